package kernel

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCollectTurnsBadProbesIntoUnknown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	reqs := []Requirement{
		{ID: "ok", Group: "g", Probe: func(context.Context, *Host) Finding { return Findingf(Supported, "fine") }},
		{ID: "panics", Group: "g", Probe: func(context.Context, *Host) Finding { panic("boom") }},
		{ID: "no-verdict", Group: "g", Probe: func(context.Context, *Host) Finding { return Finding{Evidence: "hm"} }},
		{ID: "no-evidence", Group: "g", Probe: func(context.Context, *Host) Finding { return Finding{Verdict: Supported} }},
		{ID: "unknown-no-evidence", Group: "g", Probe: func(context.Context, *Host) Finding { return Finding{Verdict: Unknown} }},
		{ID: "hangs", Group: "g", Probe: func(ctx context.Context, _ *Host) Finding {
			<-release // ignores ctx, as a stuck tool would
			return Findingf(Supported, "too late")
		}},
		{ID: "honours-ctx", Group: "g", Probe: func(ctx context.Context, _ *Host) Finding {
			<-ctx.Done()
			return Findingf(Unknown, "gave up: %v", ctx.Err())
		}},
		{ID: "own-timeout", Group: "g", Timeout: time.Hour, Slow: true, Probe: func(ctx context.Context, _ *Host) Finding {
			select {
			case <-ctx.Done():
				return Findingf(Unknown, "cut short: %v", ctx.Err())
			case <-time.After(700 * time.Millisecond): // beyond the collector's 500 ms
				return Findingf(Supported, "took its time")
			}
		}},
	}
	rep, err := Collector{ProbeTimeout: 500 * time.Millisecond}.Collect(t.Context(), testHost(t, "debian-6.1"), reqs)
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

func TestCollectRejectsBadCatalogues(t *testing.T) {
	p := func(context.Context, *Host) Finding { return Findingf(Supported, "x") }
	for name, reqs := range map[string][]Requirement{
		"empty id":  {{ID: "", Probe: p}},
		"duplicate": {{ID: "a", Probe: p}, {ID: "a", Probe: p}},
		"no probe":  {{ID: "a"}},
	} {
		if _, err := Collect(t.Context(), testHost(t, "debian-6.1"), reqs); !errors.Is(err, ErrBadCatalogue) {
			t.Errorf("%s: got %v, want ErrBadCatalogue", name, err)
		}
	}
}

func TestVersionVerdictAndMismatch(t *testing.T) {
	h := &Host{Identity: Identity{Release: Release{Version: V(5, 14, 0)}}}
	tests := []struct {
		name      string
		min       Version
		identErr  error
		probe     Verdict
		byVersion Verdict
		mismatch  Mismatch
	}{
		{"no threshold", Version{}, nil, Supported, "", ""},
		{"new enough, agrees", V(5, 8, 0), nil, Supported, Supported, ""},
		{"new enough, degraded is no mismatch", V(5, 8, 0), nil, Degraded, Supported, ""},
		{"new enough, disabled", V(5, 8, 0), nil, Unsupported, Supported, Disabled},
		{"too old, agrees", V(6, 4, 0), nil, Unsupported, Unsupported, ""},
		{"too old, backported", V(5, 15, 0), nil, Supported, Unsupported, Backport},
		{"too old, degraded is no backport", V(6, 0, 0), nil, Degraded, Unsupported, ""},
		{"too old, probe unknown", V(6, 0, 0), nil, Unknown, Unsupported, ""},
		{"version unknown", V(5, 8, 0), errors.New("no osrelease"), Supported, Unknown, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hh := *h
			hh.IdentityErr = tc.identErr
			r := Requirement{ID: "x", MinKernel: tc.min}
			got := VersionVerdict(r, &hh)
			if got != tc.byVersion {
				t.Errorf("VersionVerdict = %q, want %q", got, tc.byVersion)
			}
			res := newResult(r, &hh, Findingf(tc.probe, "e"), 0)
			if res.Mismatch != tc.mismatch || res.Verdict != tc.probe {
				t.Errorf("result %+v, want mismatch %q", res, tc.mismatch)
			}
		})
	}
}

func TestCatalogueIsWellFormed(t *testing.T) {
	reqs := Catalogue()
	if err := checkCatalogue(reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.Group == "" || len(r.NeededBy) == 0 {
			t.Errorf("%s: group %q, neededBy %v", r.ID, r.Group, r.NeededBy)
		}
	}
}
