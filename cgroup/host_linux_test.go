package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// These tests run on the machine that runs `go test`, whatever its cgroup
// layout and kernel: what they expect of it they read here from sources
// other than the package (/proc/self/cgroup, /proc/cgroups, statfs(2), and
// PSI triggers written directly). The kernel-matrix guests run them too,
// on pure cgroup v2 (testenv/vmtest's host suite).

func hostMount(t *testing.T) Mount {
	t.Helper()
	testutil.RequireRoot(t)
	m, err := FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hostV1Controllers returns the controllers bound to v1 hierarchies, from
// this process's /proc/self/cgroup (named hierarchies bind none).
func hostV1Controllers(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var v1 []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[0] == "0" {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				v1 = append(v1, c)
			}
		}
	}
	slices.Sort(v1)
	return v1
}

// hostHas reports whether file exists in dir, as the kernel shows a
// controller's interface files only where the controller is enabled.
func hostHas(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// hostTriggers writes DefaultTrigger, then the same with a 2 s window, to
// the pressure file at path as a PSI monitor does, and returns the errors:
// what the kernel makes of this process's triggers, as bare errnos.
func hostTriggers(t *testing.T, path string) (dflt, twoSeconds error) {
	t.Helper()
	write := func(tr Trigger) error {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "some %d %d\x00", tr.Stall.Microseconds(), tr.Window.Microseconds())
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err // the errno, as the watcher's reason wraps it
		}
		return err
	}
	return write(DefaultTrigger), write(Trigger{Stall: DefaultTrigger.Stall, Window: 2 * time.Second})
}

func TestHostMount(t *testing.T) {
	m := hostMount(t)
	var st unix.Statfs_t
	if err := unix.Statfs(m.Path, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatalf("mount %+v: statfs %#x, %v; want cgroup2", m, st.Type, err)
	}
	v1 := hostV1Controllers(t)
	want := Unified
	if len(v1) > 0 {
		want = Hybrid
	}
	got := slices.Clone(m.V1Controllers)
	slices.Sort(got)
	if m.Mode != want || !slices.Equal(slices.Compact(got), v1) {
		t.Fatalf("mount = %+v, want %s with v1 controllers %v (/proc/self/cgroup)", m, want, v1)
	}
	c, err := controllers(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	// A controller is offered on cgroup2 when it is enabled and bound to
	// no v1 hierarchy (/proc/cgroups: hierarchy 0).
	b, err := os.ReadFile("/proc/cgroups")
	if errors.Is(err, os.ErrNotExist) {
		if len(v1) > 0 || len(c) == 0 {
			t.Fatalf("no /proc/cgroups, v1 %v, cgroup2 controllers %v", v1, c)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	v2Names := map[string]string{"cpu": "cpu", "cpuset": "cpuset", "memory": "memory", "pids": "pids", "blkio": "io", "hugetlb": "hugetlb", "rdma": "rdma", "misc": "misc", "dmem": "dmem"}
	var free []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if name, ok := v2Names[firstOr(f)]; ok && len(f) == 4 && f[1] == "0" && f[3] == "1" {
			free = append(free, name)
		}
	}
	slices.Sort(free)
	c = slices.Clone(c)
	slices.Sort(c)
	if !slices.Equal(c, free) {
		t.Fatalf("cgroup2 root controllers = %v, want %v (enabled and on no v1 hierarchy in /proc/cgroups)", c, free)
	}
}

func firstOr(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// mkCgroup creates a cgroup directory and removes it at cleanup.
func mkCgroup(t *testing.T, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

func testName(t *testing.T) string {
	return fmt.Sprintf("nodeshim-%s-%d", t.Name(), os.Getpid())
}

// TestHostTriggerOrPoll: the watcher arms the trigger where the kernel takes
// it from this process, and falls back to polling, with the kernel's
// reason, where it does not (Linux 6.5+ without CAP_SYS_RESOURCE: EINVAL).
func TestHostTriggerOrPoll(t *testing.T) {
	m := hostMount(t)
	for _, path := range []string{"/proc/pressure/memory", filepath.Join(m.Path, "memory.pressure")} {
		refused, _ := hostTriggers(t, path)
		w, err := NewWatcher(path, DefaultTrigger, WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case refused == nil && (w.Mode() != ModeTrigger || w.Armed() != DefaultTrigger):
			t.Errorf("%s: mode %s, armed %q; the kernel takes %q", path, w.Mode(), w.Armed(), DefaultTrigger)
		case refused != nil && (w.Mode() != ModePoll || !errors.Is(w.FallbackReason(), refused)):
			t.Errorf("%s: mode %s, reason %v; want poll after %v", path, w.Mode(), w.FallbackReason(), refused)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewWatcher(filepath.Join(m.Path, "no-such-cgroup", "memory.pressure"), DefaultTrigger, WatchOptions{}); !errors.Is(err, ErrVanished) {
		t.Fatalf("watcher on a missing cgroup: %v, want ErrVanished", err)
	}
}

// TestHostTriggerWidened: where the kernel refuses the default trigger but
// takes a 2 s window (6.5+ without CAP_SYS_RESOURCE), WidenWindow arms the
// trigger again with the 2 s window rather than polling; where it takes the
// default trigger, that is armed unchanged.
func TestHostTriggerWidened(t *testing.T) {
	m := hostMount(t)
	for _, path := range []string{"/proc/pressure/memory", filepath.Join(m.Path, "memory.pressure"), filepath.Join(m.Path, "io.pressure")} {
		dflt, twoSeconds := hostTriggers(t, path)
		want := DefaultTrigger
		if dflt != nil {
			if twoSeconds != nil {
				t.Fatalf("%s: the kernel refuses %v and %v; no trigger to widen to", path, dflt, twoSeconds)
			}
			want = Trigger{Stall: DefaultTrigger.Stall, Window: 2 * time.Second}
		}
		w, err := NewWatcher(path, DefaultTrigger, WatchOptions{WidenWindow: true})
		if err != nil {
			t.Fatal(err)
		}
		if w.Mode() != ModeTrigger || w.Armed() != want || w.FallbackReason() != nil {
			t.Errorf("%s: mode %s, armed %q, reason %v; want trigger %q", path, w.Mode(), w.Armed(), w.FallbackReason(), want)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// thrashCgroups creates a cgroup2 cgroup whose memory is limited to 64 MiB
// (room for the race-instrumented child's own ~17 MiB of anonymous memory
// beside the page cache it thrashes: at 32 MiB the kernel OOM-killed it),
// by the cgroup2 memory controller where the root delegates it, else by a
// v1 memory cgroup beside it, and returns a function moving a pid into
// both. The kernel accounts PSI per cgroup2 cgroup for any task in it,
// whichever hierarchy's memory controller makes it stall.
func thrashCgroups(t *testing.T, m Mount) (v2 string, enter func(pid int)) {
	t.Helper()
	name := testName(t)
	v2 = mkCgroup(t, filepath.Join(m.Path, name))
	dirs := []string{v2}
	switch {
	case hostHas(v2, "memory.max"):
		if err := os.WriteFile(filepath.Join(v2, "memory.max"), []byte("32M"), 0); err != nil {
			t.Fatal(err)
		}
	case slices.Contains(m.V1Controllers, "memory"):
		v1 := mkCgroup(t, filepath.Join(v1Memory, name))
		if err := os.WriteFile(filepath.Join(v1, "memory.limit_in_bytes"), []byte("32M"), 0); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, v1)
	default:
		testutil.Skip(t, "no memory controller to limit a cgroup with: not in %s/cgroup.subtree_control and not on v1", m.Path)
	}
	return v2, func(pid int) {
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestHostPollDetectsThrashing: the polling fallback, which the watcher
// takes where the kernel refuses the trigger as given (forced here where
// the kernel would take it).
func TestHostPollDetectsThrashing(t *testing.T) {
	detectThrashing(t, func(refused error) (WatchOptions, WatchMode) {
		return WatchOptions{ForcePoll: refused == nil}, ModePoll
	})
}

// TestHostTriggerDetectsThrashing: the kernel's trigger fires too, the
// default one where the kernel takes it, else re-armed with a 2 s window
// (WidenWindow), which the kernel checks on its 2 s averaging tick.
func TestHostTriggerDetectsThrashing(t *testing.T) {
	detectThrashing(t, func(error) (WatchOptions, WatchMode) {
		return WatchOptions{WidenWindow: true}, ModeTrigger
	})
}

// detectThrashing thrashes a memory-limited cgroup and checks the watcher's
// events; choose picks the options and the mode expected from what the
// kernel made of the default trigger on the cgroup's memory.pressure.
func detectThrashing(t *testing.T, choose func(refused error) (WatchOptions, WatchMode)) {
	m := hostMount(t)
	v2, enter := thrashCgroups(t, m)
	pressure := filepath.Join(v2, "memory.pressure")
	refused, _ := hostTriggers(t, pressure)
	opts, mode := choose(refused)
	memoryOnV2, pidsOnV2 := hostHas(v2, "memory.current"), hostHas(v2, "pids.current")

	w, err := NewWatcher(pressure, DefaultTrigger, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Mode() != mode {
		t.Fatalf("mode %s, want %s (the default trigger: %v)", w.Mode(), mode, refused)
	}
	var r Reader
	var before Stats
	if err := r.Read(v2, StatAll, &before); err != nil {
		t.Fatal(err)
	}

	th := newMemoryStaller(t, v2, 192<<20)
	enter(th.pid())
	ctx, cancel := context.WithCancel(context.Background())
	var events []PressureEvent
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thrasher runs until the first event: a detection that never
		// comes shows as the test binary's timeout, not as a guessed limit.
		_ = w.Run(ctx, nil, func(e PressureEvent) {
			events = append(events, e)
			cancel()
		})
	}()
	start := time.Now()
	th.begin(t)
	<-done
	th.stop(t)

	if len(events) == 0 {
		t.Fatal("no pressure event while the cgroup thrashed")
	}
	for _, e := range events {
		// Only the fallback measures the stall; the kernel does not say.
		if e.Mode != mode || e.Path != pressure || (mode == ModePoll && e.Stall < DefaultTrigger.Stall) {
			t.Errorf("event %+v: want %s mode on %s (with stall >= %s when polled)", e, mode, pressure, DefaultTrigger.Stall)
		}
	}
	t.Logf("%d events; first after %s (stall %s)", len(events), events[0].Time.Sub(start), events[0].Stall)

	var after Stats
	if err := r.Read(v2, StatAll, &after); err != nil {
		t.Fatal(err)
	}
	p := after.PressureOf(Memory)
	if p.Err != nil || p.PSI.Some.Total <= before.PressureOf(Memory).PSI.Some.Total {
		t.Fatalf("memory pressure %+v did not grow from %+v", p, before.PressureOf(Memory))
	}
	// Where a controller is not on cgroup2 its files are unknown, never zero.
	if memoryOnV2 != (after.Memory.Err == nil) || (!memoryOnV2 && !errors.Is(after.Memory.Err, ErrMissing)) {
		t.Fatalf("memory %+v: want it known iff %s/memory.current exists (%v)", after.Memory, v2, memoryOnV2)
	}
	if pidsOnV2 != (after.Pids.Err == nil) || (!pidsOnV2 && !errors.Is(after.Pids.Err, ErrMissing)) {
		t.Fatalf("pids %+v: want it known iff %s/pids.current exists (%v)", after.Pids, v2, pidsOnV2)
	}
	if after.CPU.Err != nil || after.CPU.UsageUsec == 0 {
		t.Fatalf("cpu.stat %+v: want usage of the thrasher", after.CPU)
	}

	// containerd's reader agrees where the files exist (cpu.pressure of the
	// now empty cgroup), but with no memory controller on cgroup2 it reports
	// memory usage 0 and drops memory PSI, where nodeshim says unknown and
	// still reads memory.pressure.
	cg, err := cgroup2.Load("/"+filepath.Base(v2), cgroup2.WithMountpoint(m.Path))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cg.StatFiltered(cgroup2.StatMemory | cgroup2.StatCPU)
	if err != nil {
		t.Fatal(err)
	}
	if cs.CPU == nil || cs.CPU.PSI == nil || cs.CPU.PSI.Some.Total != after.PressureOf(CPU).PSI.Some.Total {
		t.Fatalf("containerd cpu %+v, nodeshim cpu pressure %+v", cs.CPU, after.PressureOf(CPU))
	}
	if !memoryOnV2 && (cs.Memory.Usage != 0 || cs.Memory.PSI != nil) {
		t.Fatalf("containerd memory %+v: expected usage 0 and no PSI without memory.stat", cs.Memory)
	}
}

func TestHostVanishedCgroup(t *testing.T) {
	m := hostMount(t)
	dir := filepath.Join(m.Path, testName(t))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFd(fd)
	var buf []byte
	if _, err := readAt(fd, dir, fCPUStat, &buf); err != nil {
		t.Fatalf("live cgroup: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	// Removed while held open: the next file read is ErrVanished.
	if _, err := readAt(fd, dir, fCPUStat, &buf); !errors.Is(err, ErrVanished) {
		t.Fatalf("read after rmdir: %v, want ErrVanished", err)
	}
	var s Stats
	if err := NewReader().Read(dir, StatAll, &s); !errors.Is(err, ErrVanished) {
		t.Fatalf("Read of a removed cgroup: %v, want ErrVanished", err)
	}
}

func TestHostObserve(t *testing.T) {
	m := hostMount(t)
	// The disk amounts of a directory that every machine has: a guest
	// booted from an initramfs has no /var/lib.
	a := ReadAvailable(NodeSources{ProcRoot: "/proc", CgroupRoot: m.Path, KubeletRoot: t.TempDir()}, NewReader())
	mem := a.Memory
	mi, err := ReadMeminfo("/proc")
	if err != nil {
		t.Fatal(err)
	}
	// The root's memory.stat refines meminfo where the root has one.
	source := "meminfo"
	if hostHas(m.Path, "memory.stat") {
		source = "meminfo+memory.stat"
	}
	if !mem.Known() || mem.Capacity != mi.MemTotal || mem.Available == 0 || mem.Available > mem.Capacity || mem.Source != source {
		t.Fatalf("memory.available %+v: want known from %s", mem, source)
	}
	for name, o := range map[string]Observation{"nodefs": a.NodeFs, "nodefs inodes": a.NodeFsInodes, "imagefs": a.ImageFs, "pids": a.PIDs} {
		if !o.Known() || o.Available == 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v, want a known value", name, o)
		}
	}
	if o := a.AllocatableMemory; !errors.Is(o.Err, ErrMissing) {
		t.Errorf("allocatableMemory.available without kubepods = %+v, want ErrMissing", o)
	}
}
