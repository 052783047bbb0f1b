package eviction

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/cgroup/cgrouptest"
	"github.com/nodeshim/nodeshim/condition"
)

func TestPSIEvaluator(t *testing.T) {
	clk := cgrouptest.NewClock()
	e := NewPSIEvaluator(DefaultPSIThresholds)
	psi := func(a10, a60 cgroup.Avg) cgroup.Pressure {
		return cgroup.Pressure{PSI: cgroup.PSI{Some: cgroup.PSILine{Avg10: a10, Avg60: a60}, HasFull: true}}
	}
	steps := []struct {
		name      string
		p         cgroup.Pressure
		want      metav1.ConditionStatus
		sev       condition.Severity
		wantTrans bool
	}{
		{"quiet", psi(0, 0), condition.True, "", true},
		{"avg10 alone is a spike", psi(4000, 500), condition.True, "", false},
		{"both over Info", psi(1500, 1100), condition.False, condition.SeverityInfo, true},
		{"worse: Warning", psi(3000, 2600), condition.False, condition.SeverityWarning, true},
		{"worse: Error", psi(8000, 5500), condition.False, condition.SeverityError, true},
		{"avg10 drops, avg60 high: still contended", psi(200, 1200), condition.False, condition.SeverityInfo, true},
		{"avg60 under Info: cleared", psi(100, 900), condition.True, "", true},
		{"unreadable", cgroup.Pressure{Err: cgroup.ErrVanished}, condition.Unknown, "", true},
	}
	for _, st := range steps {
		clk.Advance(time.Second)
		v, tr := e.Update(clk.Now(), cgroup.Memory, st.p)
		if v.Type != "MemoryContentionFree" || v.Status != st.want || v.Severity != st.sev || (tr != nil) != st.wantTrans || v.Validate() != nil {
			t.Fatalf("%s: %+v (transition %v); want %s %q transition %v", st.name, v, tr != nil, st.want, st.sev, st.wantTrans)
		}
	}
}
