package cgroup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// TestMonitorEventStream runs a Monitor over the recorded tree (poll mode on
// its static pressure files) and checks the first evaluation's events: one
// per pressure condition and per PSI view. The burstable pod's recorded
// memory pressure (avg10 35.51, avg60 20.02) is over Info, under Warning.
func TestMonitorEventStream(t *testing.T) {
	cg, _ := filepath.Abs(filepath.Join("testdata", "unified"))
	pod := filepath.Join(cg, "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	clk := newFakeClock()
	var snaps []Snapshot // appended from Run's goroutine, read after Run returns
	ths, err := ParseThresholds("memory.available<200Mi,nodefs.available<10%")
	if err != nil {
		t.Fatal(err)
	}
	mon, err := NewMonitor(MonitorConfig{
		Thresholds: ths,
		Sources:    NodeSources{ProcRoot: fakeProc(t, "40000"), CgroupRoot: pod, Kubepods: filepath.Join(cg, "kubepods"), KubeletRoot: t.TempDir()},
		Interval:   time.Hour,
		Watch:      WatchOptions{PollInterval: time.Hour},
		WatchPaths: []string{filepath.Join(pod, "memory.pressure")},
		Clock:      clk,
		OnEvaluate: func(s Snapshot) { snaps = append(snaps, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if ws := mon.Watchers(); len(ws) != 1 || ws[0].Mode != ModePoll {
		t.Fatalf("watchers %+v: a regular file refuses triggers", ws)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := map[string]corev1.ConditionStatus{}
	var sev Severity
	eventsBeforeSnapshot := false
	err = mon.Run(ctx, func(e Event) {
		if len(snaps) == 0 {
			eventsBeforeSnapshot = true
		}
		switch e.Kind {
		case EventCondition:
			got[string(e.Condition.Condition.Type)] = e.Condition.Condition.Status
		case EventPSIView:
			got[string(e.PSIView.View.Condition.Type)] = e.PSIView.View.Condition.Status
			if e.PSIView.View.Resource == Memory {
				sev = e.PSIView.View.Severity
			}
		}
		if len(got) == 5 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	want := map[string]corev1.ConditionStatus{
		"MemoryPressure":       corev1.ConditionTrue, // 40000 kB free of 16 GB, nothing inactive: under 100Mi
		"DiskPressure":         corev1.ConditionFalse,
		"PIDPressure":          corev1.ConditionFalse,
		"MemoryContentionFree": corev1.ConditionFalse,
		"IOContentionFree":     corev1.ConditionTrue,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %s, want %s (all: %v)", k, got[k], v, got)
		}
	}
	if sev != SeverityInfo {
		t.Errorf("memory contention severity %q, want Info (avg10 35.51 but avg60 20.02 < Warning's 25)", sev)
	}
	// OnEvaluate sees each evaluation's snapshot before its events.
	if len(snaps) == 0 || eventsBeforeSnapshot {
		t.Fatalf("OnEvaluate: %d snapshots, events before the first: %v", len(snaps), eventsBeforeSnapshot)
	}
	if o := snaps[0].Observations[SignalMemoryAvailable]; !o.Known() || o.Available >= 200<<20 || len(snaps[0].Conditions) != 3 {
		t.Errorf("first snapshot: memory.available %+v, %d conditions", o, len(snaps[0].Conditions))
	}
}

func TestMonitorRejectsMissingPressureFile(t *testing.T) {
	_, err := NewMonitor(MonitorConfig{Sources: NodeSources{CgroupRoot: t.TempDir()}})
	if !errors.Is(err, ErrVanished) {
		t.Fatalf("NewMonitor on a tree without memory.pressure: %v", err)
	}
}
