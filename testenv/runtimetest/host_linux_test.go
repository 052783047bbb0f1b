package runtimetest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestRemoveAll removes a directory of the test's own with stacked mounts
// on a subdirectory and a mount below them.
func TestRemoveAll(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "node")
	t.Cleanup(func() { _ = unmountUnder(dir) })
	sub := filepath.Join(dir, "root", "overlay")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(sub, "merged"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", filepath.Join(sub, "merged"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after RemoveAll: %v", dir, err)
	}
	if left, err := mountsUnder(dir); err != nil || len(left) != 0 {
		t.Errorf("mounts left under %s: %v %v", dir, left, err)
	}
}
