package status

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

func TestHistoriesAreBounded(t *testing.T) {
	tests := []struct {
		name  string
		add   func(m *Model, i int)
		len   func(d Document) int
		first func(d Document) int
		max   int
	}{
		{"OOM kills", func(m *Model, i int) { m.AddOOMKill(OOMKill{PID: uint32(i)}) },
			func(d Document) int { return len(d.OOMKills.Recent) }, func(d Document) int { return int(d.OOMKills.Recent[0].PID) }, MaxOOMKills},
		{"checkpoints", func(m *Model, i int) { m.AddCheckpoint(CheckpointRecord{PID: i}) },
			func(d Document) int { return len(d.Checkpoints) }, func(d Document) int { return d.Checkpoints[0].PID }, MaxCheckpoints},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(nil)
			if d := m.Snapshot(); tt.len(d) != 0 || d.OOMKills.Recent == nil || d.Checkpoints == nil {
				t.Fatalf("fresh model: %+v", d)
			}
			tt.add(m, 1)
			early := m.Snapshot()
			n := tt.max + 10
			for i := 2; i <= n; i++ {
				tt.add(m, i)
			}
			d := m.Snapshot()
			if tt.len(d) != tt.max || tt.first(d) != n-tt.max+1 {
				t.Errorf("%d entries starting at %d, want the last %d of %d", tt.len(d), tt.first(d), tt.max, n)
			}
			if d.Generation != int64(n) {
				t.Errorf("generation %d after %d additions", d.Generation, n)
			}
			if tt.len(early) != 1 || tt.first(early) != 1 {
				t.Errorf("an earlier snapshot changed: %d entries", tt.len(early))
			}
		})
	}
	m := New(nil)
	for i := 0; i < 3; i++ {
		m.AddOOMKill(OOMKill{})
	}
	if d := m.Snapshot(); d.OOMKills.Total != 3 {
		t.Errorf("total %d, want 3", d.OOMKills.Total)
	}
}

func TestOOMWatchState(t *testing.T) {
	m := New(nil)
	if d := m.Snapshot(); d.OOMKills.Watching || d.OOMKills.Reason == "" {
		t.Errorf("before the watcher starts: %+v, want not watching with a reason", d.OOMKills)
	}
	m.SetOOMWatch(true, "tracepoint/oom/mark_victim", "")
	if d := m.Snapshot(); !d.OOMKills.Watching || d.OOMKills.Reason != "" || d.OOMKills.Hook == "" {
		t.Errorf("watching: %+v", d.OOMKills)
	}
}

func TestPressureBumpsNoGeneration(t *testing.T) {
	m := New(nil)
	m.SetPressure(Pressure{ObservedAt: time.Unix(1, 0)})
	m.SetPressure(Pressure{ObservedAt: time.Unix(2, 0)})
	d := m.Snapshot()
	if d.Generation != 0 || d.Pressure == nil || !d.Pressure.ObservedAt.Equal(time.Unix(2, 0)) {
		t.Errorf("after two readings: generation %d, pressure %+v", d.Generation, d.Pressure)
	}
}

func TestSetReport(t *testing.T) {
	rep := &capability.Report{Kind: capability.ReportKind, Kernel: capability.Kernel{Identity: capability.Identity{Release: capability.Release{Raw: "6.18.44"}}},
		Summary: capability.Summary{Total: 3, Supported: 2, Unsupported: 1}}
	tests := []struct {
		name       string
		rep        *capability.Report
		err        error
		wantStatus string
		wantReason string
		wantReport bool
	}{
		{"collected", rep, nil, "True", "Collected", true},
		{"failed", nil, errors.New("read /proc/version: boom"), "False", "CollectFailed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(nil)
			m.SetReport(tt.rep, tt.err)
			d := m.Snapshot()
			c := d.Conditions[0]
			if c.Type != TypeKernelReport || string(c.Status) != tt.wantStatus || c.Reason != tt.wantReason {
				t.Errorf("condition %+v", c)
			}
			if (d.Report != nil) != tt.wantReport || (m.Report() != nil) != tt.wantReport {
				t.Errorf("report %+v", d.Report)
			}
			if tt.wantReport && (d.Report.KernelRelease != "6.18.44" || d.Report.Summary.Unsupported != 1) {
				t.Errorf("summary %+v", d.Report)
			}
		})
	}
	// A failed refresh keeps the last good report.
	m := New(nil)
	m.SetReport(rep, nil)
	m.SetReport(nil, errors.New("boom"))
	if m.Report() != rep {
		t.Error("a failed refresh dropped the last report")
	}
}

func TestPolarityAndPreviousReason(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	m := New(clk)
	trans, cancel := m.Subscribe(16)
	defer cancel()
	m.Set(condition.Condition{Type: "MemoryPressure", Status: condition.False, Reason: "HasSufficientMemory"},
		condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "Up", Polarity: "bogus"})
	m.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "UpAgain"})
	d := m.Snapshot()
	for _, c := range d.Conditions {
		want := ""
		if c.Type == "MemoryPressure" {
			want = condition.PolarityKubelet
		}
		if c.Polarity != want {
			t.Errorf("%s polarity %q, want %q", c.Type, c.Polarity, want)
		}
	}
	var got []string
	for len(trans) > 0 {
		tr := <-trans
		got = append(got, fmt.Sprintf("%s:%s/%s->%s/%s", tr.Condition.Type, tr.Previous, tr.PreviousReason, tr.Condition.Status, tr.Condition.Reason))
	}
	want := []string{
		"MemoryPressure:/->False/HasSufficientMemory", "NetworkReady:/->True/Up", "Ready:Unknown/NotObserved->True/AllConditionsReady",
		"NetworkReady:True/Up->True/UpAgain",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions\n%v\nwant\n%v", got, want)
	}
}

func TestSetSource(t *testing.T) {
	steps := []struct {
		name, source, state, err string
		wantStatus               string
		wantMsg                  string
	}{
		{"first source runs", "pressure", SourceRunning, "", "True", "no source has failed"},
		{"one returns on its own", "oom", SourceDone, "", "True", "no source has failed"},
		{"one fails", "network", SourceFailed, "netlink: permission denied", "False", "source network failed: netlink: permission denied"},
		{"another fails", "pressure", SourceFailed, "panic: boom", "False", "source pressure failed: panic: boom; source network failed: netlink: permission denied"},
	}
	m := New(nil)
	m.SetShim(time.Unix(10, 0), 42)
	for _, st := range steps {
		m.SetSource(st.source, st.state, st.err)
		d := m.Snapshot()
		var c condition.Condition
		for _, x := range d.Conditions {
			if x.Type == TypeShimHealthy {
				c = x
			}
		}
		if string(c.Status) != st.wantStatus || c.Message != st.wantMsg {
			t.Errorf("%s: %s = %+v, want %s %q", st.name, TypeShimHealthy, c, st.wantStatus, st.wantMsg)
		}
	}
	d := m.Snapshot()
	if d.Shim.PID != 42 || len(d.Shim.Sources) != 3 || d.Shim.Sources[0].Name != "pressure" || d.Shim.Sources[0].State != SourceFailed {
		t.Errorf("shim = %+v", d.Shim)
	}
}

func TestSetSeccompProfiles(t *testing.T) {
	m := New(nil)
	if d := m.Snapshot(); d.SeccompProfiles != nil {
		t.Fatalf("before the source reports: %+v", d.SeccompProfiles)
	}
	gen := m.Snapshot().Generation
	in := []InstalledProfile{{Name: "a.json", Path: "/r/a.json", SHA256: "00", InstalledAt: time.Unix(1, 0)}}
	m.SetSeccompProfiles(SeccompProfiles{Root: "/r", Installed: in})
	in[0].Name = "changed by the caller"
	d := m.Snapshot()
	if d.SeccompProfiles == nil || d.SeccompProfiles.Root != "/r" || d.SeccompProfiles.Installed[0].Name != "a.json" || d.Generation == gen {
		t.Errorf("document %+v (generation %d, was %d)", d.SeccompProfiles, d.Generation, gen)
	}
	m.SetSeccompProfiles(SeccompProfiles{Root: "/r"})
	if got := m.Snapshot().SeccompProfiles.Installed; got == nil || len(got) != 0 {
		t.Errorf("none installed: %#v, want an empty list", got)
	}
}
