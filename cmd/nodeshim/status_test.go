package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/api"
)

// TestStatusTimeout checks that `nodeshim status` gives up after --timeout
// on a serve whose API accepts no connection (a saturated or stuck one)
// instead of waiting for ever.
func TestStatusTimeout(t *testing.T) {
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, api.SocketName), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := run(t, "status", "--root-dir", dir, "--timeout", "200ms")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("status on a stuck socket = %v, want the deadline exceeded", err)
		}
		t.Logf("gave up after %v: %v", time.Since(start), err)
	case <-time.After(time.Minute):
		t.Fatal("status still waits after a minute")
	}
}
