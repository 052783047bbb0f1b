package bpf

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/cgroup"
)

// oomScenario runs the memory hog in a fresh cgroup v2 directory under
// cg2 (which gives the victim a known cgroup id), lets confine put it under
// a memory limit, and checks that the watcher reports exactly one OOM
// victim naming it. wantMemory says whether the hook sees the victim's
// memory (the oom/mark_victim tracepoint does only since 6.8).
func oomScenario(t *testing.T, w *OOMWatcher, cg2 string, wantMemory bool, confine func(pid int)) {
	t.Helper()
	dir, err := os.MkdirTemp(cg2, "nodeshim-oom-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	target, err := CgroupTargetFromPath(cg2, dir)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	cmd := workloadCommand("hog", "2048")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	confine(pid)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want killed by SIGKILL", err)
	}

	// The kernel submitted the event before it sent SIGKILL; wait for it
	// (the test binary's -timeout bounds this), then take what else has
	// been delivered.
	var victims []OOMEvent
	for ev := range w.Events() {
		t.Logf("OOM event: %+v", ev)
		if ev.PID == uint32(pid) || ev.TGID == uint32(pid) {
			victims = append(victims, ev)
			break
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for ev := range w.Events() {
		if ev.PID == uint32(pid) || ev.TGID == uint32(pid) {
			victims = append(victims, ev)
		}
	}
	if len(victims) != 1 {
		t.Fatalf("%d events name the victim %d, want 1: %+v", len(victims), pid, victims)
	}
	v := victims[0]
	wantComm := filepath.Base(os.Args[0])
	if len(wantComm) > 15 {
		wantComm = wantComm[:15]
	}
	if v.Comm != wantComm {
		t.Errorf("victim pid %d comm %q, want %d %q", v.PID, v.Comm, pid, wantComm)
	}
	// The memory cgroup's OOM runs in the hog, which is also the victim,
	// so even the tracepoint knows its process and cgroup.
	if v.TGID != uint32(pid) || v.CgroupID != target.Keys[0] {
		t.Errorf("victim tgid %d cgroup id %d, want %d %d (%s)", v.TGID, v.CgroupID, pid, target.Keys[0], dir)
	}
	// The names of its cgroup and its parent, read at the kill (the
	// root's kernfs node is named "").
	wantParent := filepath.Base(cg2)
	if root, err := cgroup.MountUnder("/sys"); err == nil && filepath.Clean(root) == filepath.Clean(cg2) {
		wantParent = ""
	}
	if v.CgroupName != filepath.Base(dir) || v.CgroupParentName != wantParent {
		t.Errorf("victim cgroup named %q in %q, want %q in %q", v.CgroupName, v.CgroupParentName, filepath.Base(dir), wantParent)
	}
	if !wantMemory {
		if v.RSSBytes != 0 || v.TotalVMBytes != 0 {
			t.Errorf("memory reported by a hook that cannot see it: %+v", v)
		}
	} else if v.RSSBytes < 8<<20 || v.TotalVMBytes < v.RSSBytes {
		t.Errorf("victim memory: rss %d, total_vm %d bytes; want rss >= 8 MiB <= total_vm", v.RSSBytes, v.TotalVMBytes)
	}
	if v.Time.IsZero() {
		t.Error("event has no time")
	}
	t.Logf("victim %d (%s) reported by %s: rss %d MiB, total_vm %d MiB", v.PID, v.Comm, v.Hook,
		v.RSSBytes>>20, v.TotalVMBytes>>20)

}

// tracepointHasMemory reports whether this kernel's oom/mark_victim
// tracepoint carries total_vm (6.8+), from its tracefs format.
func tracepointHasMemory(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile("/sys/kernel/tracing/events/oom/mark_victim/format")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), "total_vm")
}
