package eviction

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/cgroup/cgrouptest"
	"github.com/nodeshim/nodeshim/condition"
)

func obsWith(memAvail uint64, memErr error) Observations {
	o := Observations{}
	for _, s := range Signals {
		o[s] = cgroup.Observation{Available: 900, Capacity: 1000}
	}
	o[SignalMemoryAvailable] = cgroup.Observation{Available: memAvail, Capacity: 8 << 30, Err: memErr}
	o[SignalAllocatableMemoryAvailable] = cgroup.Observation{Available: 4 << 30, Capacity: 6 << 30}
	return o
}

func condByType(cs []condition.Condition, ct string) condition.Condition {
	for _, c := range cs {
		if c.Type == ct {
			return c
		}
	}
	return condition.Condition{}
}

// TestEvaluatorTransitionPeriod walks MemoryPressure through a crossing,
// a recovery held for the transition period, a relapse inside it, and an
// unknown signal, on a fake clock.
func TestEvaluatorTransitionPeriod(t *testing.T) {
	clk := cgrouptest.NewClock()
	ths, _ := ParseThresholds("memory.available<100Mi,pid.available<5%")
	e := NewEvaluator(ths, time.Minute)
	steps := []struct {
		name      string
		advance   time.Duration
		obs       Observations
		want      metav1.ConditionStatus
		wantTrans bool
		wantMsg   string
	}{
		{"first evaluation", 0, obsWith(1<<30, nil), condition.False, true, "memory.available is 1Gi, threshold memory.available<100Mi"},
		{"crossed: set at once", time.Second, obsWith(50<<20, nil), condition.True, true, "memory.available is 50Mi, threshold memory.available<100Mi"},
		{"recovered: held", 10 * time.Second, obsWith(1<<30, nil), condition.True, false, "held for the 1m0s transition period"},
		{"crossed again inside the period", 30 * time.Second, obsWith(60<<20, nil), condition.True, false, "memory.available is 60Mi"},
		{"recovered: held from the last crossing", 50 * time.Second, obsWith(1<<30, nil), condition.True, false, "held"},
		{"period over: cleared", 10 * time.Second, obsWith(1<<30, nil), condition.False, true, "memory.available is 1Gi"},
		{"signal unknown", time.Second, obsWith(0, cgroup.ErrMissing), condition.Unknown, true, "memory.available unknown"},
		{"crossed while unknown before", time.Second, obsWith(1<<20, nil), condition.True, true, "1Mi"},
	}
	var lastTransition time.Time
	for _, st := range steps {
		clk.Advance(st.advance)
		conds, trans := e.Update(clk.Now(), st.obs)
		c := condByType(conds, condition.TypeMemoryPressure)
		if c.Status != st.want || !strings.Contains(c.Message, st.wantMsg) {
			t.Fatalf("%s: %s %s %q; want %s with %q", st.name, c.Status, c.Reason, c.Message, st.want, st.wantMsg)
		}
		var memTrans []Transition
		for _, tr := range trans {
			if tr.Condition.Type == condition.TypeMemoryPressure {
				memTrans = append(memTrans, tr)
			}
		}
		if (len(memTrans) == 1) != st.wantTrans {
			t.Fatalf("%s: transitions %+v, want one: %v", st.name, memTrans, st.wantTrans)
		}
		if st.wantTrans {
			lastTransition = clk.Now()
		}
		if !c.LastTransitionTime.Time.Equal(lastTransition) {
			t.Fatalf("%s: transition %v, want %v", st.name, c.LastTransitionTime, lastTransition)
		}
		// Pressure is a warning: kubelet starts evicting. Otherwise no
		// severity, Unknown included.
		if wantSev := map[bool]condition.Severity{true: condition.SeverityWarning}[st.want == condition.True]; c.Severity != wantSev || c.Validate() != nil {
			t.Fatalf("%s: severity %q (%v), want %q", st.name, c.Severity, c.Validate(), wantSev)
		}
		wantReason := map[metav1.ConditionStatus]string{condition.True: "HasInsufficientMemory", condition.False: "HasSufficientMemory", condition.Unknown: ReasonSignalUnknown}[st.want]
		if c.Reason != wantReason {
			t.Fatalf("%s: reason %s, want %s", st.name, c.Reason, wantReason)
		}
		pid := condByType(conds, condition.TypePIDPressure)
		if pid.Status != condition.False || pid.Reason != "HasSufficientPID" {
			t.Fatalf("%s: PIDPressure %+v", st.name, pid)
		}
		if d := condByType(conds, condition.TypeDiskPressure); d.Status != condition.False || d.Message != "no threshold configured for this condition" {
			t.Fatalf("%s: DiskPressure %+v", st.name, d)
		}
	}
}

// TestPressureConditions checks the conditions the policy emits as the
// status model and the Node show them: kubelet's polarity with Severity
// Warning under pressure, the PSI views' positive polarity with the
// severity of the contention.
func TestPressureConditions(t *testing.T) {
	now := cgrouptest.NewClock().Now()
	mem, _ := ParseThresholds("memory.available<100Mi")
	pressure := func(o cgroup.Observation) condition.Condition {
		conds, _ := NewEvaluator(mem, time.Minute).Update(now, Observations{SignalMemoryAvailable: o})
		return condByType(conds, condition.TypeMemoryPressure)
	}
	view := func(r cgroup.Resource, a10, a60 cgroup.Avg) condition.Condition {
		v, _ := NewPSIEvaluator(DefaultPSIThresholds).Update(now, r, cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: a10, Avg60: a60}}})
		return v
	}
	at := metav1.NewTime(now)
	tests := []struct {
		name string
		got  condition.Condition
		want condition.Condition
	}{
		{"pressure is a warning", pressure(cgroup.Observation{Available: 1 << 20, Capacity: 1 << 30}),
			condition.Condition{Type: "MemoryPressure", Status: condition.True, Severity: condition.SeverityWarning, Reason: "HasInsufficientMemory",
				Message: "memory.available is 1Mi, threshold memory.available<100Mi", LastTransitionTime: at}},
		{"no pressure", pressure(cgroup.Observation{Available: 1 << 30, Capacity: 1 << 30}),
			condition.Condition{Type: "MemoryPressure", Status: condition.False, Reason: "HasSufficientMemory",
				Message: "memory.available is 1Gi, threshold memory.available<100Mi", LastTransitionTime: at}},
		{"unknown stays unknown", pressure(cgroup.Observation{Err: cgroup.ErrMissing}),
			condition.Condition{Type: "MemoryPressure", Status: condition.Unknown, Reason: ReasonSignalUnknown,
				Message: "memory.available unknown: " + cgroup.ErrMissing.Error(), LastTransitionTime: at}},
		{"contention with its severity", view(cgroup.Memory, 6000, 5500),
			condition.Condition{Type: "MemoryContentionFree", Status: condition.False, Severity: condition.SeverityError, Reason: "MemoryContention",
				Message: "memory pressure some avg10=60.00% avg60=55.00% (full avg10=0.00%), Error threshold 50.00%", LastTransitionTime: at}},
		{"mild contention is info", view(cgroup.IO, 1200, 1100),
			condition.Condition{Type: "IOContentionFree", Status: condition.False, Severity: condition.SeverityInfo, Reason: "IOContention",
				Message: "io pressure some avg10=12.00% avg60=11.00% (full avg10=0.00%), Info threshold 10.00%", LastTransitionTime: at}},
		{"contention-free has no severity", view(cgroup.IO, 10, 5),
			condition.Condition{Type: "IOContentionFree", Status: condition.True, Reason: "NoIOContention",
				Message: "io pressure some avg10=0.10% avg60=0.05%, under 10.00%", LastTransitionTime: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
			if err := tt.got.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}
