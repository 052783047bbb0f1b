package api

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestSocketRemoveOnlyOurs checks that a Socket removes its own file and
// never a socket another process has put at the path since.
func TestSocketRemoveOnlyOurs(t *testing.T) {
	p := filepath.Join(t.TempDir(), SocketName)
	first, err := ListenSocket(p, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// Another server takes the path over, as a second serve did.
	second, err := ListenSocket(p, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := first.Remove(); !errors.Is(err, ErrNotOurSocket) {
		t.Fatalf("first Remove over the second's socket = %v, want ErrNotOurSocket", err)
	}
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatalf("the second socket is gone after the first's Remove: %v", err)
	}
	c.Close()
	if err := second.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after its own Remove: %v", err)
	}
	if err := second.Remove(); err != nil {
		t.Errorf("Remove of a socket already gone = %v, want nil", err)
	}
}
