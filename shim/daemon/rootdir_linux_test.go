package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestSecondServeSameRootDir starts a second serve on the root dir of a
// running one, with another lock file: it must refuse to start, naming the
// first, and the first must keep its socket and its API.
func TestSecondServeSameRootDir(t *testing.T) {
	testutil.RequireRoot(t)
	first := startDaemon(t, "")
	var before syscall.Stat_t
	if err := syscall.Stat(first.sock, &before); err != nil {
		t.Fatal(err)
	}

	second := first.opts
	second.LockFile = filepath.Join(t.TempDir(), "other.lock")
	listening := make(chan string, 1)
	second.Listening = func(s string) { listening <- s }
	second.TCPListening = nil
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, second) }()
	select {
	case err := <-done:
		var held *lock.HeldError
		if !errors.As(err, &held) || held.PID != os.Getpid() {
			t.Fatalf("second serve on the same root dir: %v, want a HeldError naming pid %d", err, os.Getpid())
		}
		if want := filepath.Join(first.opts.RootDir, lock.DirLockName); held.Path != want {
			t.Errorf("held lock %s, want the root dir's %s", held.Path, want)
		}
		t.Logf("second serve refused: %v", err)
	case s := <-listening:
		// It took the socket over; its exit shows what that costs the
		// first.
		cancel()
		<-done
		t.Errorf("a second serve started on root dir %s (socket %s)", second.RootDir, s)
	}

	// The first serve keeps its socket and answers on it.
	var after syscall.Stat_t
	if err := syscall.Stat(first.sock, &after); err != nil {
		t.Fatalf("the first serve's socket is gone: %v", err)
	}
	if after.Ino != before.Ino {
		t.Errorf("the socket at %s was replaced (inode %d, was %d)", first.sock, after.Ino, before.Ino)
	}
	if code, _ := first.do(t, http.MethodGet, "/healthz"); code != 200 {
		t.Errorf("the first serve's GET /healthz = %d", code)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	// Both locks are free again.
	for _, p := range []string{first.opts.LockFile, second.LockFile} {
		l, err := lock.Acquire(p, lock.Options{})
		if err != nil {
			t.Errorf("lock %s after the first serve stopped: %v", p, err)
			continue
		}
		l.Release()
	}
}

// TestExitLeavesAnotherSocket has another process put its socket at the
// API socket's path while serve runs: serve must not remove it at exit.
func TestExitLeavesAnotherSocket(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDaemon(t, "")
	otherSock, err := api.ListenSocket(d.sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	other := otherSock.UnixListener
	defer os.Remove(d.sock)
	defer other.Close()
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatalf("serve removed the socket another process put at %s: %v", d.sock, err)
	}
	c.Close()
}
