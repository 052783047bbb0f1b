//go:build vmtest

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

	"github.com/nodeshim/nodeshim/internal/testutil"
)

// Guest tests: a Debian kernel booted under QEMU with cgroup2 alone at
// /sys/fs/cgroup, every controller delegated to the root's children, and
// PSI triggers accepted (`make vmtest`).

func guestMount(t *testing.T) Mount {
	t.Helper()
	testutil.RequireGuest(t)
	m, err := FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGuestUnifiedMount(t *testing.T) {
	m := guestMount(t)
	if m.Mode != Unified || m.Path != "/sys/fs/cgroup" {
		t.Fatalf("mount %+v, want unified at /sys/fs/cgroup", m)
	}
	c, err := Controllers(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cpu", "io", "memory", "pids"} {
		if !slices.Contains(c, want) {
			t.Errorf("controllers %v lack %s", c, want)
		}
	}
}

// guestCgroup creates a child of the root with memory.max 96 MiB and
// memory.high 16 MiB: a task holding more than 16 MiB is throttled on
// every further charge, a memory stall, without being OOM-killed.
func guestCgroup(t testing.TB, m Mount, name string) string {
	t.Helper()
	dir := filepath.Join(m.Path, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	for file, v := range map[string]string{"memory.max": "96M", "memory.high": "16M"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// detectGuest starts an anonymous-memory thrasher in a fresh cgroup and
// returns the time to the watcher's first event from the thrasher's release
// and from the cgroup's first stall, and the event.
func detectGuest(t testing.TB, m Mount, name string, opts WatchOptions, check func(dir string)) (time.Duration, time.Duration, PressureEvent, WatchMode) {
	t.Helper()
	dir := guestCgroup(t, m, name)
	w, err := NewWatcher(filepath.Join(dir, "memory.pressure"), DefaultTrigger, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	th := startThrasher(t, "anon:24")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(th.pid())), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var first PressureEvent
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, nil, func(e PressureEvent) {
			if first.Time.IsZero() {
				first = e
			}
			cancel()
		})
	}()
	onsetCtx, stopOnset := context.WithCancel(context.Background())
	defer stopOnset()
	onset := stallOnset(onsetCtx, filepath.Join(dir, "memory.pressure"))
	start := time.Now()
	th.begin(t)
	// The thrasher runs until the first event; a detection that never
	// comes shows as the test binary's timeout.
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("watcher: %v", err)
	}
	stopOnset()
	stall, ok := <-onset
	if !ok {
		t.Fatal("the event came but no stall was seen")
	}
	if check != nil {
		check(dir)
	}
	th.stop(t)
	return first.Time.Sub(start), first.Time.Sub(stall), first, w.Mode()
}

func TestGuestTriggerDetectsThrashing(t *testing.T) {
	m := guestMount(t)
	name := fmt.Sprintf("nodeshim-trigger-%d", os.Getpid())
	d, ds, ev, mode := detectGuest(t, m, name, WatchOptions{}, func(dir string) {
		var s Stats
		if err := NewReader().Read(dir, StatAll, &s); err != nil {
			t.Fatal(err)
		}
		if s.Memory.Err != nil || s.Memory.Current < 16<<20 || s.Memory.Max.Value != 96<<20 {
			t.Errorf("memory %+v: want known, over memory.high, max 96Mi", s.Memory)
		}
		if s.MemoryEvents.Err != nil || s.MemoryEvents.High == 0 {
			t.Errorf("memory.events %+v: want high events", s.MemoryEvents)
		}
		if s.Pids.Err != nil || s.Pids.Current == 0 || !s.Pids.Max.Unlimited {
			t.Errorf("pids %+v", s.Pids)
		}
		if p := s.PressureOf(Memory); p.Err != nil || p.PSI.Some.Total == 0 {
			t.Errorf("memory pressure %+v", p)
		}
		cg, err := cgroup2.Load("/"+filepath.Base(dir), cgroup2.WithMountpoint(m.Path))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := cg.StatFiltered(cgroup2.StatMemory)
		if err != nil {
			t.Fatal(err)
		}
		if cs.Memory.UsageLimit != s.Memory.Max.Value {
			t.Errorf("memory.max: containerd %d, nodeshim %v", cs.Memory.UsageLimit, s.Memory.Max)
		}
	})
	if mode != ModeTrigger || ev.Mode != ModeTrigger {
		t.Fatalf("mode %s, event %+v: want a kernel trigger on this kernel", mode, ev)
	}
	t.Logf("trigger fired %s after the release, %s after the first stall", d, ds)
}

func TestGuestPollModeDetectsThrashing(t *testing.T) {
	m := guestMount(t)
	name := fmt.Sprintf("nodeshim-poll-%d", os.Getpid())
	d, ds, ev, mode := detectGuest(t, m, name, WatchOptions{ForcePoll: true}, nil)
	if mode != ModePoll || ev.Mode != ModePoll || ev.Stall < DefaultTrigger.Stall {
		t.Fatalf("mode %s, event %+v: want poll mode with a stall over the trigger's", mode, ev)
	}
	t.Logf("poll fallback fired %s after the release, %s after the first stall (stall in window %s)", d, ds, ev.Stall)
}

// TestGuestDetectionLatency repeats the detection in both modes and logs
// the distribution for BENCHMARKS.cgroup.md; every run must detect.
func TestGuestDetectionLatency(t *testing.T) {
	m := guestMount(t)
	const runs = 10
	for _, mode := range []struct {
		name string
		opts WatchOptions
	}{{"trigger", WatchOptions{}}, {"poll", WatchOptions{ForcePoll: true}}} {
		var fromRelease, fromStall []time.Duration
		for i := range runs {
			d, ds, _, _ := detectGuest(t, m, fmt.Sprintf("nodeshim-lat-%s-%d", mode.name, i), mode.opts, nil)
			fromRelease, fromStall = append(fromRelease, d), append(fromStall, ds)
		}
		for _, l := range []struct {
			from string
			lat  []time.Duration
		}{{"release", fromRelease}, {"first stall", fromStall}} {
			slices.Sort(l.lat)
			t.Logf("LATENCY %s mode, %d runs, from %s: p50 %s p90 %s max %s", mode.name, runs, l.from, l.lat[runs/2], l.lat[runs*9/10], l.lat[runs-1])
		}
	}
}

// TestGuestMonitorStreamsTriggerEvents runs a Monitor whose kubepods is a
// thrashing cgroup: both default watchers (the root's and kubepods'
// memory.pressure) are kernel triggers, and the kubepods trigger's event
// arrives on the stream.
func TestGuestMonitorStreamsTriggerEvents(t *testing.T) {
	m := guestMount(t)
	dir := guestCgroup(t, m, fmt.Sprintf("nodeshim-monitor-%d", os.Getpid()))
	mon, err := NewMonitor(MonitorConfig{
		Sources: NodeSources{ProcRoot: "/proc", CgroupRoot: m.Path, Kubepods: dir, KubeletRoot: "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	for _, w := range mon.Watchers() {
		if w.Mode != ModeTrigger {
			t.Fatalf("watcher %+v: want a kernel trigger", w)
		}
	}
	snap, _ := mon.Evaluate()
	if o := snap.Observations[SignalAllocatableMemoryAvailable]; !o.Known() || o.Capacity != 96<<20 {
		t.Fatalf("allocatableMemory.available %+v: want the kubepods memory.max", o)
	}
	if o := snap.Observations[SignalMemoryAvailable]; !o.Known() || o.Source != "meminfo+memory.stat" {
		t.Fatalf("memory.available %+v: want the root memory.stat on a pure cgroup v2 node", o)
	}
	th := startThrasher(t, "anon:24")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(th.pid())), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got *PressureEvent
	th.begin(t)
	err = mon.Run(ctx, func(e Event) {
		if e.Kind == EventPressure && e.Pressure.Path == filepath.Join(dir, "memory.pressure") {
			got = e.Pressure
			cancel()
		}
	})
	th.stop(t)
	if !errors.Is(err, context.Canceled) || got == nil || got.Mode != ModeTrigger {
		t.Fatalf("Run = %v, event %+v: want a trigger event from kubepods", err, got)
	}
}
