package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fakeClock is a Clock moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestParseThresholds(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // String() of each threshold
		wantErr  string
	}{
		{"kubelet defaults", DefaultHardThresholds, []string{"memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%", "imagefs.inodesFree<5%"}, ""},
		{"pid and allocatable", "pid.available<5%, allocatableMemory.available<1Gi", []string{"pid.available<5%", "allocatableMemory.available<1Gi"}, ""},
		{"zero disables", "memory.available<0,nodefs.available<0%", nil, ""},
		{"empty", "", nil, ""},
		{"unknown signal", "memory.free<1Gi", nil, `unknown signal "memory.free"`},
		{"wrong operator", "memory.available>1Gi", nil, "want SIGNAL<VALUE"},
		{"two operators", "memory.available<=1Gi", nil, `only the "<" operator`},
		{"bad quantity", "memory.available<lots", nil, "quantities must match"},
		{"negative", "memory.available<-1Gi", nil, "must not be negative"},
		{"over 100%", "nodefs.available<101%", nil, "must be within"},
		{"bad percent", "nodefs.available<x%", nil, "bad percentage"},
		{"repeated", "memory.available<1Gi,memory.available<2Gi", nil, "given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrThreshold) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrThreshold containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, th := range got {
				s = append(s, th.String())
			}
			if fmt.Sprint(s) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func TestThresholdCrossed(t *testing.T) {
	ths, _ := ParseThresholds("memory.available<100Mi,nodefs.available<10%")
	mem, fs := ths[0], ths[1]
	cases := []struct {
		name string
		th   Threshold
		obs  Observation
		want bool
	}{
		{"memory under", mem, Observation{Available: 99 << 20, Capacity: 1 << 30}, true},
		{"memory at", mem, Observation{Available: 100 << 20, Capacity: 1 << 30}, false},
		{"percent under", fs, Observation{Available: 99, Capacity: 1000}, true},
		{"percent at", fs, Observation{Available: 100, Capacity: 1000}, false},
		{"unknown never crosses", mem, Observation{Err: ErrMissing}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.th.Crossed(tc.obs); got != tc.want {
				t.Fatalf("Crossed = %v, want %v", got, tc.want)
			}
		})
	}
}

func obsWith(memAvail uint64, memErr error) Observations {
	o := Observations{}
	for _, s := range Signals {
		o[s] = Observation{Available: 900, Capacity: 1000}
	}
	o[SignalMemoryAvailable] = Observation{Available: memAvail, Capacity: 8 << 30, Err: memErr}
	o[SignalAllocatableMemoryAvailable] = Observation{Available: 4 << 30, Capacity: 6 << 30}
	return o
}

func condByType(cs []corev1.NodeCondition, ct corev1.NodeConditionType) corev1.NodeCondition {
	for _, c := range cs {
		if c.Type == ct {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// TestEvaluatorTransitionPeriod walks MemoryPressure through a crossing,
// a recovery held for the transition period, a relapse inside it, and an
// unknown signal, on a fake clock.
func TestEvaluatorTransitionPeriod(t *testing.T) {
	clk := newFakeClock()
	ths, _ := ParseThresholds("memory.available<100Mi,pid.available<5%")
	e := NewEvaluator(ths, time.Minute, clk)
	steps := []struct {
		name      string
		advance   time.Duration
		obs       Observations
		want      corev1.ConditionStatus
		wantTrans bool
		wantMsg   string
	}{
		{"first evaluation", 0, obsWith(1<<30, nil), corev1.ConditionFalse, true, "memory.available is 1Gi, threshold memory.available<100Mi"},
		{"crossed: set at once", time.Second, obsWith(50<<20, nil), corev1.ConditionTrue, true, "memory.available is 50Mi, threshold memory.available<100Mi"},
		{"recovered: held", 10 * time.Second, obsWith(1<<30, nil), corev1.ConditionTrue, false, "held for the 1m0s transition period"},
		{"crossed again inside the period", 30 * time.Second, obsWith(60<<20, nil), corev1.ConditionTrue, false, "memory.available is 60Mi"},
		{"recovered: held from the last crossing", 50 * time.Second, obsWith(1<<30, nil), corev1.ConditionTrue, false, "held"},
		{"period over: cleared", 10 * time.Second, obsWith(1<<30, nil), corev1.ConditionFalse, true, "memory.available is 1Gi"},
		{"signal unknown", time.Second, obsWith(0, ErrMissing), corev1.ConditionUnknown, true, "memory.available unknown"},
		{"crossed while unknown before", time.Second, obsWith(1<<20, nil), corev1.ConditionTrue, true, "1Mi"},
	}
	var lastTransition time.Time
	for _, st := range steps {
		clk.Advance(st.advance)
		conds, trans := e.Update(st.obs)
		c := condByType(conds, corev1.NodeMemoryPressure)
		if c.Status != st.want || !strings.Contains(c.Message, st.wantMsg) {
			t.Fatalf("%s: %s %s %q; want %s with %q", st.name, c.Status, c.Reason, c.Message, st.want, st.wantMsg)
		}
		var memTrans []Transition
		for _, tr := range trans {
			if tr.Condition.Type == corev1.NodeMemoryPressure {
				memTrans = append(memTrans, tr)
			}
		}
		if (len(memTrans) == 1) != st.wantTrans {
			t.Fatalf("%s: transitions %+v, want one: %v", st.name, memTrans, st.wantTrans)
		}
		if st.wantTrans {
			lastTransition = clk.Now()
		}
		if !c.LastTransitionTime.Time.Equal(lastTransition) || !c.LastHeartbeatTime.Time.Equal(clk.Now()) {
			t.Fatalf("%s: transition %v heartbeat %v, want %v and %v", st.name, c.LastTransitionTime, c.LastHeartbeatTime, lastTransition, clk.Now())
		}
		wantReason := map[corev1.ConditionStatus]string{corev1.ConditionTrue: "HasInsufficientMemory", corev1.ConditionFalse: "HasSufficientMemory", corev1.ConditionUnknown: ReasonSignalUnknown}[st.want]
		if c.Reason != wantReason {
			t.Fatalf("%s: reason %s, want %s", st.name, c.Reason, wantReason)
		}
		pid := condByType(conds, corev1.NodePIDPressure)
		if pid.Status != corev1.ConditionFalse || pid.Reason != "HasSufficientPID" {
			t.Fatalf("%s: PIDPressure %+v", st.name, pid)
		}
		if d := condByType(conds, corev1.NodeDiskPressure); d.Status != corev1.ConditionFalse || d.Message != "no threshold configured for this condition" {
			t.Fatalf("%s: DiskPressure %+v", st.name, d)
		}
	}
}

func TestPSIEvaluator(t *testing.T) {
	clk := newFakeClock()
	e := NewPSIEvaluator(DefaultPSIThresholds, clk)
	psi := func(a10, a60 Avg) Pressure {
		return Pressure{PSI: PSI{Some: PSILine{Avg10: a10, Avg60: a60}, HasFull: true}}
	}
	steps := []struct {
		name      string
		p         Pressure
		want      corev1.ConditionStatus
		sev       Severity
		wantTrans bool
	}{
		{"quiet", psi(0, 0), corev1.ConditionTrue, SeverityNone, true},
		{"avg10 alone is a spike", psi(4000, 500), corev1.ConditionTrue, SeverityNone, false},
		{"both over Info", psi(1500, 1100), corev1.ConditionFalse, SeverityInfo, true},
		{"worse: Warning", psi(3000, 2600), corev1.ConditionFalse, SeverityWarning, true},
		{"worse: Error", psi(8000, 5500), corev1.ConditionFalse, SeverityError, true},
		{"avg10 drops, avg60 high: still contended", psi(200, 1200), corev1.ConditionFalse, SeverityInfo, true},
		{"avg60 under Info: cleared", psi(100, 900), corev1.ConditionTrue, SeverityNone, true},
		{"unreadable", Pressure{Err: ErrVanished}, corev1.ConditionUnknown, SeverityNone, true},
	}
	for _, st := range steps {
		clk.Advance(time.Second)
		v, tr := e.Update(Memory, st.p)
		if v.Condition.Type != "MemoryContentionFree" || v.Condition.Status != st.want || v.Severity != st.sev || (tr != nil) != st.wantTrans {
			t.Fatalf("%s: %+v (transition %v); want %s %q transition %v", st.name, v, tr != nil, st.want, st.sev, st.wantTrans)
		}
	}
}

func TestStallWindow(t *testing.T) {
	t0 := newFakeClock().Now()
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

func TestNodeSignalsFromFakeProc(t *testing.T) {
	proc := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meminfo", "MemTotal:       16384000 kB\nMemFree:         2048000 kB\nMemAvailable:   12000000 kB\nInactive(file):  4096000 kB\n")
	write("sys/kernel/pid_max", "4194304\n")
	write("sys/kernel/threads-max", "126000\n")
	write("loadavg", "0.52 0.58 0.59 3/1206 12345\n")
	cg, _ := filepath.Abs(filepath.Join("testdata", "unified"))
	r := NewReader()

	mem := NodeMemory(proc, cg, r)
	// usage = 16384000-2048000 kB; inactive_file from the root memory.stat.
	usage := uint64(16384000-2048000) * 1024
	wantAvail := uint64(16384000)*1024 - (usage - 2290417664)
	if mem.Err != nil || mem.Available != wantAvail || mem.Source != "meminfo+memory.stat" {
		t.Fatalf("memory.available = %+v, want %d from meminfo+memory.stat", mem, wantAvail)
	}
	// Without a cgroup2 memory.stat (hybrid), Inactive(file) of meminfo.
	mem = NodeMemory(proc, t.TempDir(), r)
	if want := uint64(16384000)*1024 - (usage - 4096000*1024); mem.Err != nil || mem.Available != want || mem.Source != "meminfo" {
		t.Fatalf("hybrid memory.available = %+v, want %d from meminfo", mem, want)
	}

	pids := PIDs(proc, "", r)
	if pids.Err != nil || pids.Capacity != 126000 || pids.Available != 126000-1206 {
		t.Fatalf("pid.available = %+v", pids)
	}
	kp := filepath.Join(cg, "kubepods")
	alloc := AllocatableMemory(proc, kp, r)
	if want := uint64(23622320128) - (3221225472 - 742391808); alloc.Err != nil || alloc.Available != want || alloc.Capacity != 23622320128 {
		t.Fatalf("allocatableMemory.available = %+v, want %d", alloc, want)
	}
	// The burstable pod's pids.max (4096) is lower than threads-max.
	podPids := PIDs(proc, filepath.Join(kp, "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09"), r)
	if podPids.Capacity != 4096 {
		t.Fatalf("pid.available with a node cgroup = %+v", podPids)
	}

	write("loadavg", "garbage\n")
	if o := PIDs(proc, "", r); !errors.Is(o.Err, ErrMalformed) {
		t.Fatalf("malformed loadavg: %+v", o)
	}
	if o := NodeMemory(filepath.Join(proc, "nope"), cg, r); o.Err == nil {
		t.Fatal("missing meminfo gave a value")
	}
	if o := AllocatableMemory(proc, "", r); !errors.Is(o.Err, ErrMissing) {
		t.Fatalf("no kubepods: %+v", o)
	}
	obs := Observe(NodeSources{ProcRoot: proc, CgroupRoot: cg, Kubepods: kp, KubeletRoot: proc}, r)
	for _, s := range Signals {
		if !obs[s].Known() && s != SignalPIDAvailable {
			t.Errorf("%s unknown: %v", s, obs[s].Err)
		}
	}
	if b, i := Filesystem(""); !errors.Is(b.Err, ErrMissing) || !errors.Is(i.Err, ErrMissing) {
		t.Fatal("Filesystem without a directory must be unknown")
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
