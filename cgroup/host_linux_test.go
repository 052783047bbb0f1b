//go:build !vmtest

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/testutil"
)

// These tests run on the build machine: a hybrid node (kernel 6.18, v1
// memory controller, cgroup2 at /sys/fs/cgroup/unified with hugetlb only)
// where PSI triggers are refused with EINVAL. They are left out of the
// kernel-matrix guest binary, which runs *_vm_test.go instead.

func hostMount(t *testing.T) Mount {
	t.Helper()
	testutil.RequireRoot(t)
	m, err := FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHostMountIsHybrid(t *testing.T) {
	m := hostMount(t)
	if m.Mode != Hybrid || m.Path != "/sys/fs/cgroup/unified" {
		t.Fatalf("mount = %+v, want hybrid at /sys/fs/cgroup/unified", m)
	}
	if !slices.Contains(m.V1Controllers, "memory") || !slices.Contains(m.V1Controllers, "pids") {
		t.Fatalf("v1 controllers %v lack memory or pids", m.V1Controllers)
	}
	c, err := controllers(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c, []string{"hugetlb"}) {
		t.Fatalf("cgroup2 root controllers = %v, want [hugetlb]", c)
	}
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

func TestHostTriggerRefusedFallsBackToPoll(t *testing.T) {
	m := hostMount(t)
	for _, path := range []string{"/proc/pressure/memory", filepath.Join(m.Path, "memory.pressure")} {
		w, err := NewWatcher(path, DefaultTrigger, WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Mode() != ModePoll || !errors.Is(w.FallbackReason(), unix.EINVAL) {
			t.Errorf("%s: mode %s, reason %v; want poll after EINVAL", path, w.Mode(), w.FallbackReason())
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewWatcher(filepath.Join(m.Path, "no-such-cgroup", "memory.pressure"), DefaultTrigger, WatchOptions{}); !errors.Is(err, ErrVanished) {
		t.Fatalf("watcher on a missing cgroup: %v, want ErrVanished", err)
	}
}

// TestHostTriggerWidenedToTwoSeconds: without CAP_SYS_RESOURCE this kernel
// takes only windows that are multiples of 2 s; with WidenWindow the
// default trigger is armed again with a 2 s window rather than polled.
func TestHostTriggerWidenedToTwoSeconds(t *testing.T) {
	m := hostMount(t)
	want := Trigger{Stall: DefaultTrigger.Stall, Window: 2 * time.Second}
	for _, path := range []string{"/proc/pressure/memory", filepath.Join(m.Path, "memory.pressure"), filepath.Join(m.Path, "io.pressure")} {
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

// thrashCgroups creates a v1 memory cgroup with a 32 MiB limit and a
// cgroup2 child, and returns a function moving a pid into both. The kernel
// accounts PSI per cgroup2 cgroup for any task in it, whichever hierarchy's
// memory controller makes it stall.
func thrashCgroups(t *testing.T, m Mount) (v2 string, enter func(pid int)) {
	t.Helper()
	testutil.RequireFile(t, filepath.Join(v1Memory, "memory.limit_in_bytes"))
	name := testName(t)
	v1 := mkCgroup(t, filepath.Join(v1Memory, name))
	if err := os.WriteFile(filepath.Join(v1, "memory.limit_in_bytes"), []byte("32M"), 0); err != nil {
		t.Fatal(err)
	}
	v2 = mkCgroup(t, filepath.Join(m.Path, name))
	return v2, func(pid int) {
		for _, d := range []string{v1, v2} {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestHostFallbackDetectsThrashing: the polling fallback, where the kernel
// refuses the trigger as given.
func TestHostFallbackDetectsThrashing(t *testing.T) {
	detectThrashing(t, WatchOptions{}, ModePoll)
}

// TestHostWidenedTriggerDetectsThrashing: the trigger re-armed with a 2 s
// window (WidenWindow) fires too, later than polling (the kernel checks it
// on its 2 s averaging tick).
func TestHostWidenedTriggerDetectsThrashing(t *testing.T) {
	detectThrashing(t, WatchOptions{WidenWindow: true}, ModeTrigger)
}

func detectThrashing(t *testing.T, opts WatchOptions, mode WatchMode) {
	m := hostMount(t)
	v2, enter := thrashCgroups(t, m)
	pressure := filepath.Join(v2, "memory.pressure")

	w, err := NewWatcher(pressure, DefaultTrigger, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Mode() != mode {
		t.Fatalf("mode %s, want %s on this kernel", w.Mode(), mode)
	}
	var r Reader
	var before Stats
	if err := r.Read(v2, StatAll, &before); err != nil {
		t.Fatal(err)
	}

	th := newThrasher(t, 96<<20)
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
	// The memory controller is bound to v1 here: its cgroup2 files are
	// unknown, never zero.
	if !errors.Is(after.Memory.Err, ErrMissing) || !errors.Is(after.Pids.Err, ErrMissing) {
		t.Fatalf("memory %+v, pids %+v: want ErrMissing on a hybrid node", after.Memory, after.Pids)
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
	if cs.Memory.Usage != 0 || cs.Memory.PSI != nil {
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
	obs := Observe(NodeSources{ProcRoot: "/proc", CgroupRoot: m.Path, KubeletRoot: "/var/lib"}, NewReader())
	mem := obs[SignalMemoryAvailable]
	mi, err := ReadMeminfo("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if !mem.Known() || mem.Capacity != mi.MemTotal || mem.Available == 0 || mem.Available > mem.Capacity || mem.Source != "meminfo" {
		t.Fatalf("memory.available %+v: want known from meminfo (no memory controller on cgroup2 here)", mem)
	}
	for _, s := range []Signal{SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalPIDAvailable} {
		if o := obs[s]; !o.Known() || o.Available == 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v, want a known value", s, o)
		}
	}
	if o := obs[SignalAllocatableMemoryAvailable]; !errors.Is(o.Err, ErrMissing) {
		t.Errorf("allocatableMemory.available without kubepods = %+v, want ErrMissing", o)
	}
	conds, _ := NewEvaluator(MustDefaultThresholds(), 0, nil).Update(obs)
	for _, c := range conds {
		if c.Status != "False" {
			t.Errorf("condition %s = %s (%s) on an idle host", c.Type, c.Status, c.Message)
		}
	}
}
