package seal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestEnsureInMemory: a directory on disk gets a private tmpfs, which
// release removes again; one on a tmpfs is left alone.
func TestEnsureInMemory(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	before, err := InMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	release, err := EnsureInMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mem, err := InMemory(dir); err != nil || !mem {
		t.Fatalf("after EnsureInMemory, %s in memory: %v, %v", dir, mem, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode of %s: %v, %v", dir, fi.Mode(), err)
	}
	// Nested: a directory already in memory needs no second mount.
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	r2, err := EnsureInMemory(inner)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2(); err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if after, err := InMemory(dir); err != nil || after != before {
		t.Fatalf("after release, in memory: %v (before: %v), %v", after, before, err)
	}
	if _, err := os.Stat(inner); !os.IsNotExist(err) {
		t.Fatalf("%s outlived the tmpfs: %v", inner, err)
	}
}
