package cgroup

import (
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup/cgrouptest"
)

func TestStallWindow(t *testing.T) {
	t0 := cgrouptest.NewClock().Now()
	ms := time.Millisecond
	w := stallWindow{trig: Trigger{Stall: 150 * time.Millisecond, Window: time.Second}}
	steps := []struct {
		at    time.Duration
		total uint64 // microseconds
		fire  bool
	}{
		{0, 1000, false},
		{100 * ms, 50_000, false},   // 49 ms stalled
		{200 * ms, 160_000, true},   // 159 ms within the window: fire
		{300 * ms, 400_000, false},  // still over, but rate-limited to one per window
		{1100 * ms, 420_000, false}, // window base is now t=100ms: 370 ms, but < 1 s since firing
		{1200 * ms, 430_000, true},  // one window after the first event: fire again (270 ms since t=200ms)
		{2500 * ms, 440_000, false}, // quiet: 10 ms in the window
		{2600 * ms, 100, false},     // counter went backwards (cgroup recreated): start over
		{2700 * ms, 200_100, true},  // 200 ms since the restart
	}
	for i, st := range steps {
		fire, stall := w.add(t0.Add(st.at), st.total)
		if fire != st.fire {
			t.Fatalf("step %d at %s: fire=%v (stall %s), want %v", i, st.at, fire, stall, st.fire)
		}
	}
}

func TestTriggerWidened(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Trigger
		want time.Duration
	}{
		{"1 s becomes 2 s", Trigger{Stall: 150 * time.Millisecond, Window: time.Second}, 2 * time.Second},
		{"500 ms becomes 2 s", Trigger{Stall: 50 * time.Millisecond, Window: 500 * time.Millisecond}, 2 * time.Second},
		{"3 s becomes 4 s", Trigger{Full: true, Stall: time.Second, Window: 3 * time.Second}, 4 * time.Second},
		{"2 s stays", Trigger{Stall: 150 * time.Millisecond, Window: 2 * time.Second}, 2 * time.Second},
		{"8 s stays", Trigger{Stall: time.Second, Window: 8 * time.Second}, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.widened()
			if got.Window != tc.want || got.Stall != tc.in.Stall || got.Full != tc.in.Full {
				t.Fatalf("%q widened = %q, want window %s with the same stall and kind", tc.in, got, tc.want)
			}
		})
	}
}
