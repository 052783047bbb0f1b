package cgroup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func fakeProc(t *testing.T, memFreeKB string) string {
	t.Helper()
	proc := t.TempDir()
	for name, data := range map[string]string{
		"meminfo":                "MemTotal:       16384000 kB\nMemFree:         " + memFreeKB + " kB\nInactive(file):  0 kB\n",
		"sys/kernel/pid_max":     "4194304\n",
		"sys/kernel/threads-max": "126000\n",
		"loadavg":                "0.52 0.58 0.59 3/1206 12345\n",
	} {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// TestMonitorSnapshot runs a Monitor over the recorded tree (poll mode on
// its static pressure files) and checks what its first evaluation read: the
// node's memory.available from the fake procfs and the pod's recorded
// memory pressure (avg10 35.51, avg60 20.02), stamped by the Monitor's clock.
func TestMonitorSnapshot(t *testing.T) {
	cg, _ := filepath.Abs(filepath.Join("testdata", "unified"))
	pod := filepath.Join(cg, "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	clk := newFakeClock()
	var snaps []Snapshot // appended from Run's goroutine, read after Run returns
	ctx, cancel := context.WithCancel(context.Background())
	mon, err := NewMonitor(MonitorConfig{
		Sources:    NodeSources{ProcRoot: fakeProc(t, "40000"), CgroupRoot: pod, Kubepods: filepath.Join(cg, "kubepods"), KubeletRoot: t.TempDir()},
		Interval:   time.Hour,
		Watch:      WatchOptions{PollInterval: time.Hour},
		WatchPaths: []string{filepath.Join(pod, "memory.pressure")},
		Clock:      clk,
		OnEvaluate: func(s Snapshot) {
			snaps = append(snaps, s)
			cancel()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if ws := mon.Watchers(); len(ws) != 1 || ws[0].Mode != ModePoll {
		t.Fatalf("watchers %+v: a regular file refuses triggers", ws)
	}
	var events []PressureEvent
	err = mon.Run(ctx, func(e PressureEvent) { events = append(events, e) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if len(snaps) == 0 {
		t.Fatal("OnEvaluate was not called: Run evaluates once as it starts")
	}
	// A static file's total never grows: no stall, no event.
	if len(events) != 0 {
		t.Errorf("pressure events %+v from a static file", events)
	}
	s := snaps[0]
	if !s.Time.Equal(clk.Now()) {
		t.Errorf("snapshot at %v, want the Monitor's clock %v", s.Time, clk.Now())
	}
	// 40000 kB free of 16 GB, nothing inactive: well under 200Mi.
	if o := s.Available.Memory; !o.Known() || o.Available >= 200<<20 || o.Capacity != 16384000*1024 {
		t.Errorf("memory available %+v", o)
	}
	if o := s.Available.AllocatableMemory; !o.Known() {
		t.Errorf("allocatable memory %+v: want the kubepods memory.max", o)
	}
	if p := s.PressureOf(Memory); p.Err != nil || p.PSI.Some.Avg10 != 3551 || p.PSI.Some.Avg60 != 2002 {
		t.Errorf("memory pressure %+v, want the recorded avg10 35.51 avg60 20.02", p)
	}
}

func TestMonitorRejectsMissingPressureFile(t *testing.T) {
	_, err := NewMonitor(MonitorConfig{Sources: NodeSources{CgroupRoot: t.TempDir()}})
	if !errors.Is(err, ErrVanished) {
		t.Fatalf("NewMonitor on a tree without memory.pressure: %v", err)
	}
}
