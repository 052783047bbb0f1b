package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestNodeAvailableFromFakeProc(t *testing.T) {
	proc := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meminfo", "MemTotal:       16384000 kB\nMemFree:         2048000 kB\nMemAvailable:   12000000 kB\nInactive(file):  4096000 kB\n")
	write("sys/kernel/pid_max", "4194304\n")
	write("sys/kernel/threads-max", "126000\n")
	write("loadavg", "0.52 0.58 0.59 3/1206 12345\n")
	cg, _ := filepath.Abs(filepath.Join("testdata", "unified"))
	r := NewReader()

	mem := NodeMemory(proc, cg, r)
	// usage = 16384000-2048000 kB; inactive_file from the root memory.stat.
	usage := uint64(16384000-2048000) * 1024
	wantAvail := uint64(16384000)*1024 - (usage - 2290417664)
	if mem.Err != nil || mem.Available != wantAvail || mem.Source != "meminfo+memory.stat" {
		t.Fatalf("memory.available = %+v, want %d from meminfo+memory.stat", mem, wantAvail)
	}
	// Without a cgroup2 memory.stat (hybrid), Inactive(file) of meminfo.
	mem = NodeMemory(proc, t.TempDir(), r)
	if want := uint64(16384000)*1024 - (usage - 4096000*1024); mem.Err != nil || mem.Available != want || mem.Source != "meminfo" {
		t.Fatalf("hybrid memory.available = %+v, want %d from meminfo", mem, want)
	}

	pids := PIDs(proc, "", r)
	if pids.Err != nil || pids.Capacity != 126000 || pids.Available != 126000-1206 {
		t.Fatalf("pid.available = %+v", pids)
	}
	kp := filepath.Join(cg, "kubepods")
	alloc := AllocatableMemory(proc, kp, r)
	if want := uint64(23622320128) - (3221225472 - 742391808); alloc.Err != nil || alloc.Available != want || alloc.Capacity != 23622320128 {
		t.Fatalf("allocatableMemory.available = %+v, want %d", alloc, want)
	}
	// The burstable pod's pids.max (4096) is lower than threads-max.
	podPids := PIDs(proc, filepath.Join(kp, "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09"), r)
	if podPids.Capacity != 4096 {
		t.Fatalf("pid.available with a node cgroup = %+v", podPids)
	}

	write("loadavg", "garbage\n")
	if o := PIDs(proc, "", r); !errors.Is(o.Err, ErrMalformed) {
		t.Fatalf("malformed loadavg: %+v", o)
	}
	if o := NodeMemory(filepath.Join(proc, "nope"), cg, r); o.Err == nil {
		t.Fatal("missing meminfo gave a value")
	}
	if o := AllocatableMemory(proc, "", r); !errors.Is(o.Err, ErrMissing) {
		t.Fatalf("no kubepods: %+v", o)
	}
	a := ReadAvailable(NodeSources{ProcRoot: proc, CgroupRoot: cg, Kubepods: kp, KubeletRoot: proc}, r)
	for name, o := range map[string]Observation{
		"memory": a.Memory, "allocatable memory": a.AllocatableMemory, "nodefs": a.NodeFs, "nodefs inodes": a.NodeFsInodes,
		"imagefs": a.ImageFs, "imagefs inodes": a.ImageFsInodes,
	} {
		if !o.Known() {
			t.Errorf("%s unknown: %v", name, o.Err)
		}
	}
	// Without an image store of its own, imagefs is nodefs.
	if a.ImageFs != a.NodeFs || a.ImageFsInodes != a.NodeFsInodes {
		t.Errorf("imagefs %+v %+v, want nodefs's %+v %+v", a.ImageFs, a.ImageFsInodes, a.NodeFs, a.NodeFsInodes)
	}
	if b, i := Filesystem(""); !errors.Is(b.Err, ErrMissing) || !errors.Is(i.Err, ErrMissing) {
		t.Fatal("Filesystem without a directory must be unknown")
	}
}
