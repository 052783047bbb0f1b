package eviction

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/cgroup/cgrouptest"
	"github.com/nodeshim/nodeshim/condition"
)

// TestMonitorEventStream runs a Monitor over cgroup's recorded tree (poll
// mode on its static pressure files) and checks the first evaluation's
// events: one per pressure condition and per PSI view. The burstable pod's
// recorded memory pressure (avg10 35.51, avg60 20.02) is over Info, under
// Warning.
func TestMonitorEventStream(t *testing.T) {
	cg, _ := filepath.Abs(filepath.Join("..", "cgroup", "testdata", "unified"))
	pod := filepath.Join(cg, "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	clk := cgrouptest.NewClock()
	var snaps []Snapshot // appended from Run's goroutine, read after Run returns
	ths, err := ParseThresholds("memory.available<200Mi,nodefs.available<10%")
	if err != nil {
		t.Fatal(err)
	}
	mon, err := NewMonitor(MonitorConfig{
		Read: cgroup.MonitorConfig{
			Sources:    cgroup.NodeSources{ProcRoot: cgrouptest.Proc(t, "40000"), CgroupRoot: pod, Kubepods: filepath.Join(cg, "kubepods"), KubeletRoot: t.TempDir()},
			Interval:   time.Hour,
			Watch:      cgroup.WatchOptions{PollInterval: time.Hour},
			WatchPaths: []string{filepath.Join(pod, "memory.pressure")},
			Clock:      clk,
		},
		Thresholds: ths,
		OnEvaluate: func(s Snapshot) { snaps = append(snaps, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if ws := mon.Watchers(); len(ws) != 1 || ws[0].Mode != cgroup.ModePoll {
		t.Fatalf("watchers %+v: a regular file refuses triggers", ws)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := map[string]condition.Condition{}
	eventsBeforeSnapshot := false
	err = mon.Run(ctx, func(e Event) {
		if len(snaps) == 0 {
			eventsBeforeSnapshot = true
		}
		switch e.Kind {
		case EventCondition:
			got[e.Condition.Condition.Type] = e.Condition.Condition
		case EventPSIView:
			got[e.PSIView.Condition.Type] = e.PSIView.Condition
		}
		if len(got) == 5 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	want := map[string]struct {
		status metav1.ConditionStatus
		sev    condition.Severity
	}{
		"MemoryPressure": {condition.True, condition.SeverityWarning}, // 40000 kB free of 16 GB, nothing inactive: under 200Mi
		"DiskPressure":   {condition.False, ""},
		"PIDPressure":    {condition.False, ""},
		// avg10 35.51 but avg60 20.02 < Warning's 25: Info.
		"MemoryContentionFree": {condition.False, condition.SeverityInfo},
		"IOContentionFree":     {condition.True, ""},
	}
	for k, w := range want {
		c := got[k]
		if c.Status != w.status || c.Severity != w.sev || !c.LastTransitionTime.Time.Equal(clk.Now()) {
			t.Errorf("%s = %s %q at %v, want %s %q at the Monitor's clock %v (all: %v)", k, c.Status, c.Severity, c.LastTransitionTime, w.status, w.sev, clk.Now(), got)
		}
	}
	// OnEvaluate sees each evaluation's snapshot before its events.
	if len(snaps) == 0 || eventsBeforeSnapshot {
		t.Fatalf("OnEvaluate: %d snapshots, events before the first: %v", len(snaps), eventsBeforeSnapshot)
	}
	s := snaps[0]
	if o := s.Observations[SignalMemoryAvailable]; !o.Known() || o.Available >= 200<<20 || len(s.Conditions) != 3 || len(s.PSIViews) != 2 {
		t.Errorf("first snapshot: memory.available %+v, %d conditions, %d views", o, len(s.Conditions), len(s.PSIViews))
	}
	if o := s.Observations[SignalMemoryAvailable]; o != s.Available.Memory {
		t.Errorf("memory.available %+v is not the snapshot's memory %+v", o, s.Available.Memory)
	}
}

func TestMonitorRejectsMissingPressureFile(t *testing.T) {
	_, err := NewMonitor(MonitorConfig{Read: cgroup.MonitorConfig{Sources: cgroup.NodeSources{CgroupRoot: t.TempDir()}}})
	if !errors.Is(err, cgroup.ErrVanished) {
		t.Fatalf("NewMonitor on a tree without memory.pressure: %v", err)
	}
}

// BenchmarkEvaluate measures one evaluation over cgroup's recorded tree:
// the cgroup.Monitor's reading alone, and with the policy on top, side by
// side, so that what the policy costs per evaluation is their difference.
func BenchmarkEvaluate(b *testing.B) {
	cg, _ := filepath.Abs(filepath.Join("..", "cgroup", "testdata", "unified"))
	pod := filepath.Join(cg, "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	proc := b.TempDir()
	for name, data := range map[string]string{
		"meminfo":                "MemTotal:       16384000 kB\nMemFree:         40000 kB\nInactive(file):  0 kB\n",
		"sys/kernel/pid_max":     "4194304\n",
		"sys/kernel/threads-max": "126000\n",
		"loadavg":                "0.52 0.58 0.59 3/1206 12345\n",
	} {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	read := cgroup.MonitorConfig{
		Sources:    cgroup.NodeSources{ProcRoot: proc, CgroupRoot: pod, Kubepods: filepath.Join(cg, "kubepods"), KubeletRoot: b.TempDir()},
		WatchPaths: []string{filepath.Join(pod, "memory.pressure")},
	}
	b.Run("read", func(b *testing.B) {
		mon, err := cgroup.NewMonitor(read)
		if err != nil {
			b.Fatal(err)
		}
		defer mon.Close()
		b.ReportAllocs()
		for b.Loop() {
			mon.Evaluate()
		}
	})
	b.Run("read+policy", func(b *testing.B) {
		mon, err := NewMonitor(MonitorConfig{Read: read})
		if err != nil {
			b.Fatal(err)
		}
		defer mon.Close()
		b.ReportAllocs()
		for b.Loop() {
			mon.Evaluate()
		}
	})
}
