package testproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestStartStop starts a shell that logs and waits, waits for its log line,
// stops it, and reads the log's tail.
func TestStartStop(t *testing.T) {
	sh := testutil.RequireBinary(t, "sh")
	dir := t.TempDir()
	p, err := Start(dir, "peer", sh, "-c", "echo one; echo ready; exec sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "peer.log"))
		return strings.Contains(string(b), "ready")
	}); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	<-p.Exited()
	if p.Err() == nil {
		t.Error("sleep ended by SIGTERM reported no error")
	}
	if got := Tail(p.Log, 1); got != "ready" {
		t.Errorf("Tail(1) = %q, want ready", got)
	}
}

// TestWaitReadyFailsWhenTheProcessExits names the process and shows its log.
func TestWaitReadyFailsWhenTheProcessExits(t *testing.T) {
	sh := testutil.RequireBinary(t, "sh")
	p, err := Start(t.TempDir(), "crasher", sh, "-c", "echo bad flag; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "crasher exited") || !strings.Contains(err.Error(), "bad flag") {
		t.Errorf("WaitReady = %v, want the exit and the log", err)
	}
}

// TestStartNamesTheMissingBinary fails with the binary's path.
func TestStartNamesTheMissingBinary(t *testing.T) {
	if _, err := Start(t.TempDir(), "x", "/nonexistent/peer"); err == nil || !strings.Contains(err.Error(), "/nonexistent/peer") {
		t.Errorf("Start = %v", err)
	}
}

// endThreads ends n OS threads: each goroutine returns while locked to
// its thread, which the runtime then terminates (as criu.privateRun's
// does).
func endThreads(n int) {
	for range n {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
		}()
		<-done
	}
}

// TestStartHeldOutlivesThreads: a child with Pdeathsig is killed when the
// thread that forked it ends, not the process (the first half shows it
// with a thread ended on purpose); StartHeld's child lives on however many
// threads end meanwhile.
func TestStartHeldOutlivesThreads(t *testing.T) {
	sleep := testutil.RequireBinary(t, "sleep")
	bare := exec.Command(sleep, "60")
	bare.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	forked := make(chan error, 1)
	locked := make(chan struct{})
	start := func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		close(locked)
		forked <- bare.Start()
	}
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != os.Getpid() {
			start()
			return
		}
		// The main thread never ends: fork from another, which cannot be
		// it while this goroutine holds it.
		go start()
		<-locked
		runtime.UnlockOSThread()
	}()
	if err := <-forked; err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := bare.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("a child whose forking thread ended: %v; want it killed by its Pdeathsig", err)
	}

	held := exec.Command(sleep, "60")
	done, err := StartHeld(held)
	if err != nil {
		t.Fatal(err)
	}
	endThreads(64)
	select {
	case err := <-done:
		t.Fatalf("StartHeld's child ended while threads ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := held.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("StartHeld's child: %v; want it ended by the SIGTERM sent", err)
	}
}
