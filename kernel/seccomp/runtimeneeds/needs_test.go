package runtimeneeds

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExitBinary checks the measurement's container process: an ELF
// executable of the right machine whose only code is exit_group(0), and
// on this machine's architecture it runs and exits 0.
func TestExitBinary(t *testing.T) {
	for _, tc := range []struct {
		goarch  string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		t.Run(tc.goarch, func(t *testing.T) {
			b, err := exitBinary(tc.goarch)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(strings.NewReader(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != tc.machine || f.Type != elf.ET_EXEC || len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD {
				t.Errorf("machine %v, type %v, %d program headers", f.Machine, f.Type, len(f.Progs))
			}
			if tc.goarch != runtime.GOARCH {
				return
			}
			path := filepath.Join(t.TempDir(), "exit")
			if err := os.WriteFile(path, b, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(path).CombinedOutput(); err != nil || len(out) != 0 {
				t.Errorf("run: %v, output %q", err, out)
			}
		})
	}
	if _, err := exitBinary("mips"); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("mips: %v, want ErrNotSupported", err)
	}
}

func validNeeds() *Needs {
	return &Needs{
		Runtime:  Identity{Path: "/usr/sbin/runc", Version: "runc version 1.1.5", Size: 10, ModTime: time.Unix(1700000000, 5).UTC(), Kernel: "6.18.44"},
		Syscalls: []string{"close", "execve", "fstatfs"},
		Measured: time.Unix(1700000100, 0).UTC(),
	}
}

// TestDecode refuses what a cache file must not hold.
func TestDecode(t *testing.T) {
	good := string(mustJSON(t, validNeeds()))
	cases := []struct {
		name, data, err string
	}{
		{"valid", good, ""},
		{"not json", "{", "decode runtime needs"},
		{"unknown field", strings.Replace(good, `"syscalls"`, `"extra":1,"syscalls"`, 1), "unknown field"},
		{"trailing object", good + "{}", "data after the object"},
		{"no path", strings.Replace(good, `"/usr/sbin/runc"`, `""`, 1), "without a runtime path"},
		{"no syscalls", strings.Replace(good, `["close","execve","fstatfs"]`, `[]`, 1), "without syscalls"},
		{"not a name", strings.Replace(good, `"fstatfs"`, `"fstatfs\"; rm"`, 1), "is not a syscall name"},
		{"upper case", strings.Replace(good, `"fstatfs"`, `"FSTATFS"`, 1), "is not a syscall name"},
		{"empty name", strings.Replace(good, `"close"`, `""`, 1), "is not a syscall name"},
		{"unsorted", strings.Replace(good, `["close","execve"`, `["execve","close"`, 1), "not sorted and unique"},
		{"duplicate", strings.Replace(good, `"close","execve"`, `"close","close"`, 1), "not sorted and unique"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Decode([]byte(tc.data))
			if tc.err == "" {
				if err != nil || len(n.Syscalls) != 3 {
					t.Fatalf("Decode = %v, %v", n, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Decode = %v, want an invalid argument with %q", err, tc.err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := json.Marshal(validNeeds())
	f.Add(b)
	f.Add([]byte(`{"runtime":{"path":"/x","version":"v"},"syscalls":["a"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := Decode(data)
		if err != nil {
			return
		}
		for _, s := range n.Syscalls {
			if !validName(s) {
				t.Fatalf("accepted %q", s)
			}
		}
		// What decodes encodes and decodes to the same.
		again, err := Decode(mustJSON(t, n))
		if err != nil || len(again.Syscalls) != len(n.Syscalls) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestCache keeps a measurement per identity: another size, mtime,
// version or kernel finds nothing; a new measurement of a path removes the
// earlier binary's; a file that holds another identity or
// does not decode is refused; For measures over what is refused.
func TestCache(t *testing.T) {
	c := &Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	n := validNeeds()
	if _, err := c.Load(n.Runtime); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("empty cache: %v", err)
	}
	if err := c.Store(n); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(c.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("cache dir: %v %v", st.Mode(), err)
	}
	got, err := c.Load(n.Runtime)
	if err != nil || strings.Join(got.Syscalls, ",") != "close,execve,fstatfs" {
		t.Fatalf("Load = %v, %v", got, err)
	}
	for name, change := range map[string]func(*Identity){
		"size":    func(id *Identity) { id.Size++ },
		"mtime":   func(id *Identity) { id.ModTime = id.ModTime.Add(time.Nanosecond) },
		"version": func(id *Identity) { id.Version += "-1" },
		"kernel":  func(id *Identity) { id.Kernel = "6.19.0" },
		"path":    func(id *Identity) { id.Path = "/usr/bin/runc" },
	} {
		id := n.Runtime
		change(&id)
		if _, err := c.Load(id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another %s: %v, want not found", name, err)
		}
	}
	// The same path measured again after an upgrade in place: the
	// earlier binary's file goes, another path's stays.
	upgraded := *n
	upgraded.Runtime.Size++
	other := *n
	other.Runtime.Path = "/usr/bin/crun"
	if err := c.Store(&other); err != nil {
		t.Fatal(err)
	}
	if err := c.Store(&upgraded); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(n.Runtime); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the earlier binary's measurement is still kept: %v", err)
	}
	for _, id := range []Identity{upgraded.Runtime, other.Runtime} {
		if _, err := c.Load(id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if err := os.Remove(c.path(upgraded.Runtime)); err != nil {
		t.Fatal(err)
	}
	if err := c.Store(n); err != nil {
		t.Fatal(err)
	}

	// A file under the name of one identity that holds another's.
	renamed := n.Runtime
	renamed.Size++
	if err := os.Rename(c.path(n.Runtime), c.path(renamed)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(renamed); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("another identity's file: %v", err)
	}
	if err := os.WriteFile(c.path(n.Runtime), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(n.Runtime); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("corrupt file: %v", err)
	}
	// For measures over a corrupt file; this fake runtime cannot be
	// measured, and the error says so rather than the file's.
	fake := filepath.Join(t.TempDir(), "fake")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := n.Runtime
	id.Path = fake
	if err := os.WriteFile(c.path(id), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := For(context.Background(), c, id, Options{WorkDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), fake+" create: exit status 3") {
		t.Errorf("For over a corrupt file = %v, want the measurement's error", err)
	}
	if _, err := c.Load(n.Runtime); err == nil {
		t.Error("the corrupt file of another identity was replaced")
	}
}
