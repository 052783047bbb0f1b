package testproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
