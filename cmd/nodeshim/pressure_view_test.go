package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

// pressureFixture is one evaluation of a hybrid node under memory
// pressure, with every kind of value the view carries.
func pressureFixture(t *testing.T) (cgroup.Mount, []cgroup.WatcherStatus, eviction.Snapshot) {
	t.Helper()
	at := metav1.NewTime(time.Date(2026, 11, 28, 1, 2, 3, 0, time.UTC))
	psi, err := cgroup.ParsePSI([]byte("some avg10=12.50 avg60=3.00 avg300=0.75 total=123456\nfull avg10=1.00 avg60=0.50 avg300=0.10 total=4567\n"))
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := cgroup.ParsePSI([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := cgroup.Mount{Path: "/sys/fs/cgroup/unified", Mode: cgroup.Hybrid, V1Controllers: []string{"memory", "pids"}}
	watchers := []cgroup.WatcherStatus{
		{Path: "/sys/fs/cgroup/unified/memory.pressure", Mode: cgroup.ModePoll, FallbackReason: "write \"some 100000 500000\": invalid argument"},
		{Path: "/sys/fs/cgroup/unified/kubepods/memory.pressure", Mode: cgroup.ModeTrigger, Trigger: "some 100000 500000"},
	}
	snap := eviction.Snapshot{
		Snapshot: cgroup.Snapshot{Time: at.Time},
		Observations: eviction.Observations{
			eviction.SignalMemoryAvailable: {Available: 50 << 20, Capacity: 8 << 30, Source: "meminfo"},
			eviction.SignalNodeFsAvailable: {Err: errors.New("statfs /var/lib/kubelet: no such file or directory")},
		},
		Conditions: []condition.Condition{{Type: condition.TypeMemoryPressure, Status: condition.True, Severity: condition.SeverityWarning,
			LastTransitionTime: at, Reason: "KubeletHasInsufficientMemory", Message: "memory.available is 51200Ki, threshold memory.available<100Mi"}},
		PSIViews: []condition.Condition{{Type: "MemoryContentionFree", Status: condition.False, Severity: condition.SeverityWarning,
			Message: "memory some avg10 12.50%"}},
	}
	snap.Pressure[0] = cgroup.Pressure{PSI: cpu}
	snap.Pressure[1] = cgroup.Pressure{PSI: psi}
	snap.Pressure[2] = cgroup.Pressure{Err: errors.New("open io.pressure: no such file or directory")}
	return m, watchers, snap
}

// TestPressureViewGolden: `nodeshim pressure` prints one evaluation as
// these JSON, YAML and table files.
func TestPressureViewGolden(t *testing.T) {
	m, watchers, snap := pressureFixture(t)
	v := newPressureView(m, "/sys/fs/cgroup/unified/kubepods", watchers, snap)
	for _, format := range []string{"json", "yaml", "table"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeOutput(&b, format, v, v.table); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "pressure."+format+".golden", b.Bytes())
			if format == "json" {
				requireCamelCase(t, b.Bytes())
			}
		})
	}
}

// TestPressureWatchEventsGolden: every kind of `pressure --watch` line.
func TestPressureWatchEventsGolden(t *testing.T) {
	_, _, snap := pressureFixture(t)
	at := snap.Time
	events := []eviction.Event{
		{Kind: eviction.EventCondition, Time: at, Condition: &eviction.Transition{Condition: snap.Conditions[0], From: condition.False}},
		{Kind: eviction.EventPSIView, Time: at, PSIView: &eviction.Transition{Condition: snap.PSIViews[0], From: condition.True}},
		{Kind: eviction.EventPressure, Time: at, Pressure: &cgroup.PressureEvent{Path: "/sys/fs/cgroup/unified/memory.pressure", Mode: cgroup.ModePoll, Time: at, Stall: 150 * time.Millisecond}},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range events {
		if err := enc.Encode(newEventView(e)); err != nil {
			t.Fatal(err)
		}
	}
	golden.Check(t, "pressure-watch.jsonl.golden", b.Bytes())
	for _, line := range bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n")) {
		requireCamelCase(t, line)
	}
}

// requireCamelCase fails t for every key of the JSON document data that
// does not start with a lower-case letter.
func requireCamelCase(t *testing.T, data []byte) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				// Signal names (memory.available) and resources are
				// keys of maps, lower-case as kubelet spells them.
				if r := []rune(k); len(r) == 0 || !unicode.IsLower(r[0]) {
					t.Errorf("key %q at %s is not camelCase", k, path)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("$", doc)
}
