package pressure

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestPressureFrom(t *testing.T) {
	s := cgroup.Snapshot{Time: time.Unix(100, 0), Observations: cgroup.Observations{
		cgroup.SignalMemoryAvailable: {Available: 1 << 30, Capacity: 4 << 30, Source: "meminfo"},
		cgroup.SignalNodeFsAvailable: {Err: errors.New("statfs /var/lib/kubelet: no such file or directory")},
	}}
	s.Pressure[0] = cgroup.Pressure{Err: errors.New("open cpu.pressure: missing")}
	s.Pressure[1] = cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: 1250, Avg60: 200, Avg300: 25, Total: 42}, HasFull: true,
		Full: cgroup.PSILine{Avg10: 100, Total: 7}}}
	s.Pressure[2] = cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: 1}}}
	p := FromSnapshot(s, []cgroup.WatcherStatus{{Path: "/x/memory.pressure", Mode: cgroup.ModePoll, FallbackReason: "EINVAL"}})
	if len(p.Signals) != len(cgroup.Signals) || !p.ObservedAt.Equal(s.Time) {
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

func TestPressureConditions(t *testing.T) {
	nc := func(typ string, s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: s, Reason: "R", Message: "m"}
	}
	tests := []struct {
		name string
		got  condition.Condition
		want condition.Condition
	}{
		{"pressure is a warning", KubeletCondition(nc("MemoryPressure", corev1.ConditionTrue)),
			condition.Condition{Type: "MemoryPressure", Status: condition.True, Severity: condition.SeverityWarning, Reason: "R", Message: "m"}},
		{"no pressure", KubeletCondition(nc("DiskPressure", corev1.ConditionFalse)),
			condition.Condition{Type: "DiskPressure", Status: condition.False, Reason: "R", Message: "m"}},
		{"unknown stays unknown", KubeletCondition(nc("PIDPressure", corev1.ConditionUnknown)),
			condition.Condition{Type: "PIDPressure", Status: condition.Unknown, Reason: "R", Message: "m"}},
		{"contention with its severity", ViewCondition(cgroup.PSIView{Severity: cgroup.SeverityError, Condition: nc("MemoryContentionFree", corev1.ConditionFalse)}),
			condition.Condition{Type: "MemoryContentionFree", Status: condition.False, Severity: condition.SeverityError, Reason: "R", Message: "m"}},
		{"mild contention is info", ViewCondition(cgroup.PSIView{Severity: cgroup.SeverityInfo, Condition: nc("IOContentionFree", corev1.ConditionFalse)}),
			condition.Condition{Type: "IOContentionFree", Status: condition.False, Severity: condition.SeverityInfo, Reason: "R", Message: "m"}},
		{"contention-free has no severity", ViewCondition(cgroup.PSIView{Condition: nc("IOContentionFree", corev1.ConditionTrue)}),
			condition.Condition{Type: "IOContentionFree", Status: condition.True, Reason: "R", Message: "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
		})
	}
}
