package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestHostKeptCgroupsComeAndGo reads real cgroups with a Reader that keeps
// their files open while one is removed and another created between
// passes: the removed one is ErrVanished once and its files closed, the
// new one is read, and EndPass and Close leave no descriptor behind.
func TestHostKeptCgroupsComeAndGo(t *testing.T) {
	m := hostMount(t)
	parent := filepath.Join(m.Path, testName(t))
	var made []string
	mk := func(name string) string {
		d := filepath.Join(parent, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
		return d
	}
	t.Cleanup(func() {
		for _, d := range slices.Backward(made) {
			_ = os.Remove(d)
		}
		_ = os.Remove(parent)
	})
	a, b := mk("a"), mk("b")
	base := openFds(t)
	r := NewKeepReader(KeepOptions{})
	read := func(dir string) (Stats, error) {
		var s Stats
		err := r.Read(dir, StatAll, &s)
		return s, err
	}
	for _, d := range []string{a, b} {
		s, err := read(d)
		if err != nil || s.CPU.Err != nil {
			t.Fatalf("%s: %v, cpu.stat %v", d, err, s.CPU.Err)
		}
	}
	r.EndPass()
	k := r.Keeping()
	if k.Groups != 2 || openFds(t)-base != k.Files {
		t.Fatalf("after the first pass: %+v with %d descriptors more than before", k, openFds(t)-base)
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	c := mk("c")
	// The second pass: a from its kept files, b gone, c new.
	if s, err := read(a); err != nil || s.CPU.Err != nil || s.CPU.UsageUsec != 0 {
		t.Fatalf("a: %v, cpu %+v", err, s.CPU)
	}
	if _, err := read(b); !errors.Is(err, ErrVanished) {
		t.Fatalf("removed b: %v, want ErrVanished", err)
	}
	if got := r.Keeping().Groups; got != 1 {
		t.Fatalf("after b vanished %d cgroups kept, want 1 (its files closed)", got)
	}
	if s, err := read(c); err != nil || s.CPU.Err != nil {
		t.Fatalf("new c: %v, cpu.stat %v", err, s.CPU.Err)
	}
	r.EndPass()
	if k := r.Keeping(); k.Groups != 2 || openFds(t)-base != k.Files {
		t.Fatalf("after the second pass: %+v with %d descriptors more than before", k, openFds(t)-base)
	}
	// A pass without c closes c's files.
	if _, err := read(a); err != nil {
		t.Fatal(err)
	}
	r.EndPass()
	if k := r.Keeping(); k.Groups != 1 || openFds(t)-base != k.Files {
		t.Fatalf("after a pass without c: %+v with %d descriptors more than before", k, openFds(t)-base)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFds(t) - base; n != 0 || r.Keeping().Files != 0 {
		t.Fatalf("after Close: %d descriptors more than before, %+v", n, r.Keeping())
	}
}

// TestHostKeptMissingFiles: a file missing from a kept cgroup (its
// controller not enabled there) is found once it is enabled, where this
// machine lets a test cgroup enable a controller of the ones Read reads.
func TestHostKeptMissingFiles(t *testing.T) {
	m := hostMount(t)
	parent := filepath.Join(m.Path, testName(t))
	child := filepath.Join(parent, "child")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(child); _ = os.Remove(parent) })
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	available := strings.Fields(string(ctrl))
	r := NewKeepReader(KeepOptions{})
	defer r.Close()
	var s Stats
	if err := r.Read(child, StatAll, &s); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(available, "pids") {
		// pids is not enabled for the parent (on a hybrid node it is
		// bound to a v1 hierarchy); TestKeptControllersChange covers
		// the change on a tree of regular files.
		if !errors.Is(s.Pids.Err, ErrMissing) {
			t.Fatalf("pids on a cgroup2 tree without the controller: %v, want ErrMissing", s.Pids.Err)
		}
		if err := r.Read(child, StatAll, &s); err != nil || !errors.Is(s.Pids.Err, ErrMissing) {
			t.Fatalf("second read: %v, pids %v, want ErrMissing", err, s.Pids.Err)
		}
		t.Logf("pids not available under %s (%q): only the remembered ErrMissing is checked", parent, ctrl)
		return
	}
	if !errors.Is(s.Pids.Err, ErrMissing) {
		t.Fatalf("pids before +pids in the parent: %v, want ErrMissing", s.Pids.Err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(child, StatAll, &s); err != nil || s.Pids.Err != nil || !s.Pids.Max.Unlimited {
		t.Fatalf("pids after +pids: %v, %+v", err, s.Pids)
	}
	// Disabled again: the kept files are gone from the live cgroup.
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("-pids"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(child, StatAll, &s); err != nil || !errors.Is(s.Pids.Err, ErrMissing) {
		t.Fatalf("pids after -pids: %v, %v, want ErrMissing", err, s.Pids.Err)
	}
}

// TestKeptControllersChange: a kept cgroup re-checks the files it found
// missing when its cgroup.controllers changes, on a tree of regular files
// standing in for a cgroup whose parent enables pids. (A controller that
// leaves a cgroup takes its files with it: kept descriptors then fail with
// ENODEV, which regular files cannot show; TestHostKeptMissingFiles checks
// it where the machine can enable pids.)
func TestKeptControllersChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.controllers", "memory\n")
	write("cpu.stat", "usage_usec 5\nuser_usec 3\nsystem_usec 2\n")
	r := NewKeepReader(KeepOptions{})
	defer r.Close()
	steps := []struct {
		name  string
		setup func()
		want  error // of the pids group
		cur   uint64
	}{
		{"pids not enabled", func() {}, ErrMissing, 0},
		{"still not enabled: remembered", func() {}, ErrMissing, 0},
		{"files appear without the controller listed: still remembered", func() {
			write("pids.current", "4\n")
			write("pids.max", "max\n")
		}, ErrMissing, 0},
		{"enabled", func() { write("cgroup.controllers", "memory pids\n") }, nil, 4},
		{"kept open", func() { write("pids.current", "6\n") }, nil, 6},
	}
	for _, st := range steps {
		st.setup()
		var s Stats
		if err := r.Read(dir, StatPids|StatCPU, &s); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if s.CPU.Err != nil || s.CPU.UsageUsec != 5 {
			t.Errorf("%s: cpu %+v", st.name, s.CPU)
		}
		if st.want == nil && (s.Pids.Err != nil || s.Pids.Current != st.cur) || st.want != nil && !errors.Is(s.Pids.Err, st.want) {
			t.Errorf("%s: pids %+v, want current %d, error %v", st.name, s.Pids, st.cur, st.want)
		}
	}
}

// TestPreadAll reads files around the buffer's size: preadAll must return
// the whole file from offset 0, however often it is called and whatever
// buffer it is given.
func TestPreadAll(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		buf  int
	}{
		{"empty", 0, 4096},
		{"small", 17, 4096},
		{"one short of the buffer", 4095, 4096},
		{"the buffer exactly", 4096, 4096},
		{"one over the buffer", 4097, 4096},
		{"several buffers", 3*4096 + 5, 4096},
		{"no buffer yet", 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkPreadAll(t, bytes.Repeat([]byte("k 1\n"), tc.size/4+1)[:tc.size], tc.buf)
		})
	}
}

func checkPreadAll(t *testing.T, data []byte, bufSize int) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 0, bufSize)
	for pass := range 2 {
		got, err := preadAll(int(f.Fd()), &buf)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("pass %d: %d bytes, %v; want %d bytes", pass, len(got), err, len(data))
		}
	}
}

func FuzzPreadAll(f *testing.F) {
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 8)
	f.Add(bytes.Repeat([]byte{'x'}, 5000), 4096)
	f.Fuzz(func(t *testing.T, data []byte, bufSize int) {
		checkPreadAll(t, data, bufSize&0xffff)
	})
}

// TestKeptFilesBound: however the masks of successive reads widen, a
// Reader keeps no more descriptors than MaxFiles, and its stats are those
// of a Reader that opens every file.
func TestKeptFilesBound(t *testing.T) {
	_, _, dirs := recordedTree(t, "unified", false)
	for _, limit := range []int{1, nKept + 1, 2*nKept + 2, 20, 1000} {
		r := NewKeepReader(KeepOptions{MaxFiles: limit})
		for _, mask := range []Mask{StatPressure, StatCPU | StatPressure, StatAll, StatAll} {
			for _, d := range dirs {
				var got, want Stats
				errGot, errWant := r.Read(d, mask, &got), NewReader().Read(d, mask, &want)
				if fmt.Sprint(errGot, got) != fmt.Sprint(errWant, want) {
					t.Errorf("limit %d, mask %b, %s: kept %v %+v, opened %v %+v", limit, mask, d, errGot, got, errWant, want)
				}
				if k := r.Keeping(); k.Files > limit {
					t.Fatalf("limit %d, mask %b, %s: %+v", limit, mask, d, k)
				}
			}
			r.EndPass()
		}
		r.Close()
	}
}
