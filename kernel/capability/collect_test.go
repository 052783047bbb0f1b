package capability

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCollectTurnsBadProbesIntoUnknown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	reqs := []Requirement{
		{ID: "ok", Group: "g", Probe: func(context.Context, Host) Finding { return Findingf(Supported, "fine") }},
		{ID: "panics", Group: "g", Probe: func(context.Context, Host) Finding { panic("boom") }},
		{ID: "no-verdict", Group: "g", Probe: func(context.Context, Host) Finding { return Finding{Evidence: "hm"} }},
		{ID: "no-evidence", Group: "g", Probe: func(context.Context, Host) Finding { return Finding{Verdict: Supported} }},
		{ID: "unknown-no-evidence", Group: "g", Probe: func(context.Context, Host) Finding { return Finding{Verdict: Unknown} }},
		{ID: "hangs", Group: "g", Probe: func(ctx context.Context, _ Host) Finding {
			<-release // ignores ctx, as a stuck tool would
			return Findingf(Supported, "too late")
		}},
		{ID: "honours-ctx", Group: "g", Probe: func(ctx context.Context, _ Host) Finding {
			<-ctx.Done()
			return Findingf(Unknown, "gave up: %v", ctx.Err())
		}},
		{ID: "own-timeout", Group: "g", Timeout: time.Hour, Slow: true, Probe: func(ctx context.Context, _ Host) Finding {
			select {
			case <-ctx.Done():
				return Findingf(Unknown, "cut short: %v", ctx.Err())
			case <-time.After(700 * time.Millisecond): // beyond the collector's 500 ms
				return Findingf(Supported, "took its time")
			}
		}},
	}
	rep, err := Collector{ProbeTimeout: 500 * time.Millisecond}.Collect(t.Context(), &fakeHost{}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		v  Verdict
		ev string
	}{
		"ok":                  {Supported, "fine"},
		"panics":              {Unknown, "probe panicked: boom"},
		"no-verdict":          {Unknown, `probe returned no valid verdict (""): hm`},
		"no-evidence":         {Unknown, "probe said Supported without evidence"},
		"unknown-no-evidence": {Unknown, "probe gave no evidence"},
		"hangs":               {Unknown, "probe gave no answer within 500ms: context deadline exceeded"},
		"own-timeout":         {Supported, "took its time"},
		"honours-ctx":         {Unknown, "context deadline exceeded"},
	}
	for id, w := range want {
		res, ok := rep.Result(id)
		if !ok {
			t.Fatalf("no result for %s", id)
		}
		if res.Verdict != w.v {
			t.Errorf("%s: verdict %s, want %s", id, res.Verdict, w.v)
		}
		mustContain(t, res.Evidence, w.ev)
	}
	if rep.Summary.Total != len(reqs) || rep.Summary.Supported != 2 || rep.Summary.Unknown != len(reqs)-2 {
		t.Errorf("summary %+v", rep.Summary)
	}
	for i, res := range rep.Requirements {
		if res.ID != reqs[i].ID {
			t.Errorf("result %d is %s, want catalogue order (%s)", i, res.ID, reqs[i].ID)
		}
	}
}

// TestCollectProbeTimeoutRaisesOwnTimeout: a requirement's own timeout
// does not cut a probe short under a longer collector timeout
// (--probe-timeout 30s on a slow node once left the eBPF probes, with
// their own 10 s, Unknown after 10 s).
func TestCollectProbeTimeoutRaisesOwnTimeout(t *testing.T) {
	const own = 50 * time.Millisecond
	reqs := []Requirement{{ID: "slow", Group: "g", Timeout: own, Slow: true, Probe: func(ctx context.Context, _ Host) Finding {
		select {
		case <-ctx.Done():
			return Findingf(Unknown, "cut short: %v", ctx.Err())
		case <-time.After(4 * own): // beyond its own timeout, within the collector's
			return Findingf(Supported, "took its time")
		}
	}}}
	rep, err := Collector{ProbeTimeout: time.Minute}.Collect(t.Context(), &fakeHost{}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := rep.Result("slow"); res.Verdict != Supported {
		t.Errorf("slow: %s (%s), want Supported: the collector's longer timeout applies", res.Verdict, res.Evidence)
	}
}

func TestCollectRejectsBadCatalogues(t *testing.T) {
	p := func(context.Context, Host) Finding { return Findingf(Supported, "x") }
	for name, reqs := range map[string][]Requirement{
		"empty id":        {{ID: "", Probe: p}},
		"duplicate":       {{ID: "a", Probe: p}, {ID: "a", Probe: p}},
		"no probe":        {{ID: "a"}},
		"waits, not slow": {{ID: "a", Probe: p, Waits: true}},
	} {
		if _, err := (Collector{}).Collect(t.Context(), &fakeHost{}, reqs); !errors.Is(err, ErrBadCatalogue) {
			t.Errorf("%s: got %v, want ErrBadCatalogue", name, err)
		}
	}
}

// TestLaunchOrder: the slow probes that mostly wait start first, then the
// other slow ones, then the quick ones, each group in catalogue order.
func TestLaunchOrder(t *testing.T) {
	tests := []struct {
		name string
		reqs []Requirement
		want []int
	}{
		{"none", nil, []int{}},
		{"quick only", []Requirement{{}, {}}, []int{0, 1}},
		{"slow before quick", []Requirement{{}, {Slow: true}, {}, {Slow: true}}, []int{1, 3, 0, 2}},
		{"waiting before slow", []Requirement{{Slow: true}, {}, {Slow: true, Waits: true}, {Slow: true}, {Slow: true, Waits: true}}, []int{2, 4, 0, 3, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := launchOrder(tc.reqs); !slices.Equal(got, tc.want) {
				t.Errorf("launchOrder = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVersionVerdictAndMismatch(t *testing.T) {
	k := Kernel{Identity: Identity{Release: Release{Version: V(5, 14, 0)}}}
	tests := []struct {
		name      string
		min       Version
		identErr  string
		probe     Verdict
		byVersion Verdict
		mismatch  Mismatch
	}{
		{"no threshold", Version{}, "", Supported, "", ""},
		{"new enough, agrees", V(5, 8, 0), "", Supported, Supported, ""},
		{"new enough, degraded is no mismatch", V(5, 8, 0), "", Degraded, Supported, ""},
		{"new enough, disabled", V(5, 8, 0), "", Unsupported, Supported, Disabled},
		{"too old, agrees", V(6, 4, 0), "", Unsupported, Unsupported, ""},
		{"too old, backported", V(5, 15, 0), "", Supported, Unsupported, Backport},
		{"too old, degraded is no backport", V(6, 0, 0), "", Degraded, Unsupported, ""},
		{"too old, probe unknown", V(6, 0, 0), "", Unknown, Unsupported, ""},
		{"version unknown", V(5, 8, 0), "read /proc/sys/kernel/osrelease: no such file or directory", Supported, Unknown, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kk := k
			kk.Error = tc.identErr
			r := Requirement{ID: "x", MinKernel: tc.min}
			got := VersionVerdict(r, kk)
			if got != tc.byVersion {
				t.Errorf("VersionVerdict = %q, want %q", got, tc.byVersion)
			}
			res := newResult(r, kk, Findingf(tc.probe, "e"), 0)
			if res.Mismatch != tc.mismatch || res.Verdict != tc.probe {
				t.Errorf("result %+v, want mismatch %q", res, tc.mismatch)
			}
		})
	}
}

// TestCollectReportsTheDescribedNode checks that the report's header is the
// host's description, that the version verdicts compare with its kernel,
// and that the host is described once.
func TestCollectReportsTheDescribedNode(t *testing.T) {
	h := &fakeHost{node: Node{
		Kernel:  Kernel{Identity: Identity{Release: Release{Raw: "5.14.0-427.el9.x86_64", Version: V(5, 14, 0)}}, Cgroup: CgroupLayout{Mode: CgroupUnified}},
		Sysctls: []Sysctl{{Name: "net.ipv4.tcp_syncookies", State: SysctlPresent, Value: "1"}},
	}}
	var probed []Host
	p := func(_ context.Context, ph Host) Finding {
		probed = append(probed, ph)
		return Findingf(Supported, "found")
	}
	reqs := []Requirement{{ID: "new", Group: "g", MinKernel: V(6, 4, 0), Probe: p}}
	rep, err := Collector{Workers: 1}.Collect(t.Context(), h, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if h.described != 1 || len(probed) != 1 || probed[0] != h {
		t.Errorf("described %d times, probes saw %v; want once and the collector's host", h.described, probed)
	}
	if rep.Kernel.Raw != "5.14.0-427.el9.x86_64" || rep.Kernel.Cgroup.Mode != CgroupUnified || len(rep.Sysctls) != 1 {
		t.Errorf("header %+v, sysctls %+v", rep.Kernel, rep.Sysctls)
	}
	if res, _ := rep.Result("new"); res.VersionVerdict != Unsupported || res.Mismatch != Backport || res.MinKernel != "6.4.0" {
		t.Errorf("result %+v, want a backport against 5.14", res)
	}
	if rep.APIVersion != ReportAPIVersion || rep.Kind != ReportKind || rep.Summary != (Summary{Total: 1, Supported: 1, Mismatches: 1}) {
		t.Errorf("report %+v", rep)
	}
}

// fakeHost is a host that describes itself as node and counts how often
// it is asked to.
type fakeHost struct {
	node      Node
	described int
}

func (*fakeHost) Path(p string) string { return p }

func (h *fakeHost) Describe(context.Context) Node {
	h.described++
	return h.node
}

func mustContain(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("got %q, want it to contain %q", got, want)
	}
}

// TestCollectTimesEachProbeFromItsStart: a quick probe queued behind
// another on the only worker has its whole timeout once it starts; before,
// its time ran from the start of the report, and a busy node's first report
// called it Unknown without it having run.
func TestCollectTimesEachProbeFromItsStart(t *testing.T) {
	const timeout = 2 * time.Second
	sleeps := func(d time.Duration) func(context.Context, Host) Finding {
		return func(ctx context.Context, _ Host) Finding {
			select {
			case <-ctx.Done():
				return Findingf(Unknown, "cut short: %v", ctx.Err())
			case <-time.After(d):
				return Findingf(Supported, "done in %v", d)
			}
		}
	}
	// Together they outlast one timeout; each alone is well within it.
	reqs := []Requirement{
		{ID: "first", Group: "g", Probe: sleeps(timeout * 3 / 4)},
		{ID: "second", Group: "g", Probe: sleeps(timeout / 2)},
	}
	rep, err := Collector{ProbeTimeout: timeout, Workers: 1}.Collect(t.Context(), &fakeHost{}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"first", "second"} {
		if res, _ := rep.Result(id); res.Verdict != Supported {
			t.Errorf("%s: %s (%s), want Supported: each probe's time runs from its own start", id, res.Verdict, res.Evidence)
		}
	}
}

// TestCollectGoesOnPastAHungProbe: a quick probe that ignores its context
// holds its worker forever; the probes queued behind it still run, on
// another worker, once it is given up.
func TestCollectGoesOnPastAHungProbe(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	reqs := []Requirement{
		{ID: "hung", Group: "g", Probe: func(context.Context, Host) Finding { <-release; return Findingf(Supported, "late") }},
		{ID: "after", Group: "g", Probe: func(context.Context, Host) Finding { return Findingf(Supported, "ran") }},
	}
	rep, err := Collector{ProbeTimeout: 50 * time.Millisecond, Workers: 1}.Collect(t.Context(), &fakeHost{}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := rep.Result("hung"); res.Verdict != Unknown || !strings.Contains(res.Evidence, "no answer within") {
		t.Errorf("hung: %s (%s), want Unknown for no answer", res.Verdict, res.Evidence)
	}
	if res, _ := rep.Result("after"); res.Verdict != Supported {
		t.Errorf("after: %s (%s), want Supported: it runs on another worker", res.Verdict, res.Evidence)
	}
}
