package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	tests := []struct {
		name     string
		existing string // "" for none
		perm     os.FileMode
	}{
		{"new file", "", 0o644},
		{"replaces an existing file", "old content that is longer than the new one\n", 0o644},
		{"root-only mode from the start", "", 0o600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "features")
			if tc.existing != "" {
				if err := os.WriteFile(path, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(path, []byte("a=b\n"), tc.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "a=b\n" {
				t.Fatalf("content %q, %v", b, err)
			}
			st, _ := os.Stat(path)
			if st.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("directory holds %v", ents)
			}
		})
	}
}

func TestWriteFileFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// The target is a non-empty directory: the rename fails, and the
	// temporary file must not stay behind.
	target := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(target, []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), target) {
		t.Fatalf("got %v, want an error naming %s", err, target)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "busy" {
		t.Errorf("directory holds %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Error("missing directory: no error")
	}
}
