package pressure

import (
	"errors"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestPressureFrom(t *testing.T) {
	s := eviction.Snapshot{Snapshot: cgroup.Snapshot{Time: time.Unix(100, 0)}, Observations: eviction.Observations{
		eviction.SignalMemoryAvailable: {Available: 1 << 30, Capacity: 4 << 30, Source: "meminfo"},
		eviction.SignalNodeFsAvailable: {Err: errors.New("statfs /var/lib/kubelet: no such file or directory")},
	}}
	s.Pressure[0] = cgroup.Pressure{Err: errors.New("open cpu.pressure: missing")}
	s.Pressure[1] = cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: 1250, Avg60: 200, Avg300: 25, Total: 42}, HasFull: true,
		Full: cgroup.PSILine{Avg10: 100, Total: 7}}}
	s.Pressure[2] = cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: 1}}}
	p := FromSnapshot(s, []cgroup.WatcherStatus{{Path: "/x/memory.pressure", Mode: cgroup.ModePoll, FallbackReason: "EINVAL"}})
	if len(p.Signals) != len(eviction.Signals) || !p.ObservedAt.Equal(s.Time) {
		t.Fatalf("%d signals, want one per signal: %+v", len(p.Signals), p)
	}
	want := map[string]status.Signal{
		"memory.available":            {Name: "memory.available", Available: 1 << 30, Capacity: 4 << 30, Source: "meminfo"},
		"nodefs.available":            {Name: "nodefs.available", Unknown: "statfs /var/lib/kubelet: no such file or directory"},
		"allocatableMemory.available": {Name: "allocatableMemory.available", Unknown: "not observed"},
	}
	for _, sig := range p.Signals {
		if w, ok := want[sig.Name]; ok && sig != w {
			t.Errorf("%s = %+v, want %+v", sig.Name, sig, w)
		}
	}
	tests := []struct {
		name string
		got  status.PSI
		want status.PSI
	}{
		{"unknown", p.PSI[0], status.PSI{Resource: "cpu", Unknown: "open cpu.pressure: missing"}},
		{"some and full", p.PSI[1], status.PSI{Resource: "memory", Some: status.PSILine{Avg10: 12.5, Avg60: 2, Avg300: 0.25, TotalMicroseconds: 42},
			Full: &status.PSILine{Avg10: 1, TotalMicroseconds: 7}}},
		{"some only", p.PSI[2], status.PSI{Resource: "io", Some: status.PSILine{Avg10: 0.01}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got.Resource != tt.want.Resource || tt.got.Some != tt.want.Some || tt.got.Unknown != tt.want.Unknown ||
				(tt.got.Full == nil) != (tt.want.Full == nil) || (tt.got.Full != nil && *tt.got.Full != *tt.want.Full) {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
		})
	}
	if len(p.Watchers) != 1 || p.Watchers[0].Mode != "poll" || p.Watchers[0].FallbackReason != "EINVAL" {
		t.Errorf("watchers %+v", p.Watchers)
	}
}
