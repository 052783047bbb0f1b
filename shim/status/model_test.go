package status

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/condition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func c(t string, s condition.Condition) condition.Condition { s.Type = t; return s }

var (
	ok      = condition.Condition{Status: condition.True, Reason: "Fine"}
	broken  = condition.Condition{Status: condition.False, Severity: condition.SeverityError, Reason: "Broken", Message: "broken"}
	unknown = condition.Condition{Status: condition.Unknown, Reason: "NotProbed", Message: "not probed"}
)

func TestModel(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	m := New(clk)
	d := m.Snapshot()
	if len(d.Conditions) != 1 || d.Conditions[0].Status != condition.Unknown || d.Generation != 0 {
		t.Fatalf("fresh model = %+v, want only Ready Unknown", d)
	}
	trans, cancel := m.Subscribe(16)
	defer cancel()

	steps := []struct {
		name        string
		set         []condition.Condition
		wantChanged bool
		wantReady   string
		wantTrans   []string // "Type:Previous->Status"
	}{
		{"first source", []condition.Condition{c("NetworkReady", ok)}, true, "True",
			[]string{"NetworkReady:->True", "Ready:Unknown->True"}},
		{"same again: no churn", []condition.Condition{c("NetworkReady", ok)}, false, "True", nil},
		{"Ready cannot be set", []condition.Condition{c("Ready", broken)}, false, "True", nil},
		{"an unknown source", []condition.Condition{c("BPFReady", unknown)}, true, "Unknown",
			[]string{"BPFReady:->Unknown", "Ready:True->Unknown"}},
		{"config trial is info", []condition.Condition{condition.Progress("ConfigHealthy", "ConfigOnTrial", "soaking", 2, 3)}, true, "Unknown",
			[]string{"ConfigHealthy:->False", "Ready:Unknown->Unknown"}},
		{"an error wins", []condition.Condition{c("NetworkReady", broken), c("BPFReady", ok)}, true, "False",
			[]string{"NetworkReady:True->False", "BPFReady:Unknown->True", "Ready:Unknown->False"}},
	}
	gen := int64(0)
	for _, st := range steps {
		clk.Step(time.Second)
		if got := m.Set(st.set...); got != st.wantChanged {
			t.Errorf("%s: changed = %v", st.name, got)
		}
		if st.wantChanged {
			gen++
		}
		d := m.Snapshot()
		ready := d.Conditions[len(d.Conditions)-1]
		if ready.Type != "Ready" || string(ready.Status) != st.wantReady || d.Generation != gen {
			t.Errorf("%s: Ready %s gen %d, want %s gen %d", st.name, ready.Status, d.Generation, st.wantReady, gen)
		}
		for _, want := range st.wantTrans {
			tr := <-trans
			if got := tr.Condition.Type + ":" + string(tr.Previous) + "->" + string(tr.Condition.Status); got != want {
				t.Errorf("%s: transition %s, want %s", st.name, got, want)
			}
		}
		select {
		case tr := <-trans:
			t.Errorf("%s: unexpected transition %+v", st.name, tr)
		default:
		}
	}
	d = m.Snapshot()
	ready := d.Conditions[len(d.Conditions)-1]
	if ready.Message != "NetworkReady: broken; ConfigHealthy: soaking (2 of 3)" {
		t.Errorf("Ready message = %q", ready.Message)
	}
	if since, ok := m.Since("BPFReady"); !ok || since != 0 {
		t.Errorf("Since(BPFReady) = %v %v", since, ok)
	}
	clk.Step(time.Minute)
	if since, _ := m.Since("NetworkReady"); since != time.Minute {
		t.Errorf("Since(NetworkReady) = %v, want 1m", since)
	}
}

// A subscriber that does not read never blocks the sources.
func TestSlowSubscriber(t *testing.T) {
	m := New(nil)
	_, cancel := m.Subscribe(1)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				st := ok
				if j%2 == 1 {
					st = broken
				}
				m.Set(c("Source"+string(rune('A'+i)), st))
			}
		}(i)
	}
	wg.Wait()
	if d := m.Snapshot(); d.Generation != 200 {
		t.Errorf("generation = %d, want 200", d.Generation)
	}
	cancel()
	cancel() // idempotent
}

func TestDocumentCondition(t *testing.T) {
	m := New(clocktesting.NewFakeClock(time.Unix(0, 0)))
	m.Set(condition.Condition{Type: TypePressureMonitor, Status: condition.True, Reason: "Running"})
	d := m.Snapshot()
	tests := []struct {
		typ    string
		ok     bool
		reason string
	}{
		{TypePressureMonitor, true, "Running"},
		{condition.TypeReady, true, ""},
		{TypeOOMWatcher, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.typ, func(t *testing.T) {
			c, ok := d.Condition(tc.typ)
			if ok != tc.ok || (ok && (c.Type != tc.typ || (tc.reason != "" && c.Reason != tc.reason))) {
				t.Errorf("Condition(%s) = %+v, %v; want found %v", tc.typ, c, ok, tc.ok)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	tests := []struct {
		name   string
		change func(m *Model)
		want   bool
	}{
		{"a condition changes", func(m *Model) { m.Set(c("NetworkReady", ok)) }, true},
		{"the same condition again", func(m *Model) { m.Set(c("NetworkReady", ok)); m.Set(c("NetworkReady", ok)) }, true},
		{"an OOM kill", func(m *Model) { m.AddOOMKill(OOMKill{PID: 1}) }, true},
		{"pressure values only", func(m *Model) { m.SetPressure(Pressure{}) }, false},
		{"nothing", func(*Model) {}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(nil)
			gen := m.Snapshot().Generation
			if !closed(m.Changed(gen + 1)) {
				t.Error("Changed(another generation) is not closed at once")
			}
			ch := m.Changed(gen)
			if closed(ch) {
				t.Fatal("Changed(current generation) is closed before any change")
			}
			tt.change(m)
			if got := closed(ch); got != tt.want {
				t.Errorf("closed after the change = %v, want %v", got, tt.want)
			}
			if got := closed(m.Changed(m.Snapshot().Generation)); got {
				t.Error("Changed(new current generation) is closed")
			}
		})
	}
}

func TestRefreshPods(t *testing.T) {
	m := New(nil)
	m.RefreshPods(t.Context()) // nothing registered: a no-op
	m.SetPods(&PodPressures{Items: []PodPressure{}})
	if m.Snapshot().Pressure != nil {
		t.Fatal("SetPods before any pressure reading created one")
	}
	m.SetPressure(Pressure{})
	reads := 0
	m.SetPodsRefresh(func(context.Context) { reads++; m.SetPods(&PodPressures{Items: []PodPressure{{UID: "a"}}}) })
	gen := m.Snapshot().Generation
	m.RefreshPods(t.Context())
	d := m.Snapshot()
	if reads != 1 || d.Pressure == nil || d.Pressure.Pods == nil || len(d.Pressure.Pods.Items) != 1 {
		t.Fatalf("after RefreshPods: %d reads, pressure %+v", reads, d.Pressure)
	}
	if d.Generation != gen {
		t.Errorf("the pods' view bumped the generation %d -> %d", gen, d.Generation)
	}
	m.SetPressure(Pressure{})
	m.SetPodsRefresh(nil)
	m.RefreshPods(t.Context())
	if reads != 1 {
		t.Errorf("RefreshPods called an unregistered refresh")
	}
}
