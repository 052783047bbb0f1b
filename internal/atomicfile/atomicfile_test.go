package atomicfile

import (
	"errors"
	"io/fs"
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

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "filter.bpf")
	if err := WriteNew(path, []byte("first"), 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("stat %s: %v, %v; want mode 0640 whatever the umask", path, st, err)
	}
	err = WriteNew(path, []byte("second"), 0o640)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second write: %v, want an error wrapping fs.ErrExist naming %s", err, path)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "first" {
		t.Errorf("existing file changed to %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %v, want only filter.bpf", ents)
	}
}
