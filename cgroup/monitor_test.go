package cgroup

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup/cgrouptest"
)

// TestMonitorSnapshot runs a Monitor over the recorded tree (poll mode on
// its static pressure files) and checks what its first evaluation read: the
// node's memory.available from the fake procfs and the pod's recorded
// memory pressure (avg10 35.51, avg60 20.02), stamped by the Monitor's clock.
func TestMonitorSnapshot(t *testing.T) {
	cg, _ := filepath.Abs(filepath.Join("testdata", "unified"))
	pod := filepath.Join(cg, "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	clk := cgrouptest.NewClock()
	var snaps []Snapshot // appended from Run's goroutine, read after Run returns
	ctx, cancel := context.WithCancel(context.Background())
	mon, err := NewMonitor(MonitorConfig{
		Sources:    NodeSources{ProcRoot: cgrouptest.Proc(t, "40000"), CgroupRoot: pod, Kubepods: filepath.Join(cg, "kubepods"), KubeletRoot: t.TempDir()},
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
