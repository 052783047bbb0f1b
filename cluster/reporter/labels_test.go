package reporter

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/config/configstatus"
	"github.com/nodeshim/nodeshim/shim/transfer"
)

// testReport is a report with the CRIU findings the labels read.
func testReport(verdicts map[string]capability.Verdict, evidence map[string]string) *capability.Report {
	rep := &capability.Report{Kind: capability.ReportKind}
	rep.Kernel.Arch = "amd64"
	for id, v := range verdicts {
		rep.Requirements = append(rep.Requirements, capability.Result{ID: id, Verdict: v, Evidence: evidence[id]})
	}
	return rep
}

func TestCapabilityLabels(t *testing.T) {
	all := map[string]capability.Verdict{
		"criu.check": capability.Supported, "criu.version": capability.Supported, "criu.lazy_pages": capability.Supported,
		"criu.feature.uffd-noncoop": capability.Supported, "criu.feature.mem_dirty_track": capability.Supported,
	}
	with := func(id string, v capability.Verdict) map[string]capability.Verdict {
		m := maps.Clone(all)
		if v == "" {
			delete(m, id)
		} else {
			m[id] = v
		}
		return m
	}
	ev := map[string]string{"criu.version": "criu --version: 4.1.1 (cached: criu ran at 2026-11-28T04:00:00Z in this boot; binary unchanged)"}
	handlers := []corev1.NodeRuntimeHandler{{Name: "runc"}, {Name: "nodeshim"}}
	for _, tt := range []struct {
		name     string
		rep      *capability.Report
		handlers []corev1.NodeRuntimeHandler
		want     map[string]string
	}{
		{"no report: no label", nil, handlers, map[string]string{}},
		{"everything", testReport(all, ev), handlers, map[string]string{
			v1alpha1.LabelCRIU: "true", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "true",
			v1alpha1.LabelPreCopy: "true", v1alpha1.LabelRestoreRuntimeClass: "true", v1alpha1.LabelArch: "amd64"}},
		{"criu check fails: nothing of criu holds", testReport(with("criu.check", capability.Unsupported), ev), handlers, map[string]string{
			v1alpha1.LabelCRIU: "false", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "false",
			v1alpha1.LabelPreCopy: "false", v1alpha1.LabelRestoreRuntimeClass: "true", v1alpha1.LabelArch: "amd64"}},
		{"no dirty tracking, lazy pages degraded", testReport(with("criu.feature.mem_dirty_track", capability.Unsupported), ev), nil, map[string]string{
			v1alpha1.LabelCRIU: "true", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "true",
			v1alpha1.LabelPreCopy: "false", v1alpha1.LabelArch: "amd64"}},
		{"unknown makes no label", testReport(with("criu.lazy_pages", capability.Unknown), ev), []corev1.NodeRuntimeHandler{{Name: "runc"}}, map[string]string{
			v1alpha1.LabelCRIU: "true", v1alpha1.LabelCRIUVersion: "4.1.1",
			v1alpha1.LabelPreCopy: "true", v1alpha1.LabelRestoreRuntimeClass: "false", v1alpha1.LabelArch: "amd64"}},
		{"absent finding makes no label", testReport(with("criu.feature.uffd-noncoop", ""), map[string]string{"criu.version": "criu --version: 4.1.1 garbage"}), nil, map[string]string{
			v1alpha1.LabelCRIU: "true", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelPreCopy: "true", v1alpha1.LabelArch: "amd64"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := CapabilityLabels(tt.rep, tt.handlers, DefaultRestoreHandler)
			if !maps.Equal(got, tt.want) {
				t.Errorf("labels %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCRIUVersion(t *testing.T) {
	for _, tt := range []struct {
		verdict  capability.Verdict
		evidence string
		want     string
	}{
		{capability.Supported, "criu --version: 4.1.1", "4.1.1"},
		{capability.Supported, "criu --version: 4.1.1 (cached: ...)", "4.1.1"},
		{capability.Degraded, "criu 3.12 is older than 3.15", "3.12"},
		{capability.Unknown, "criu --version: 4.1.1", ""},
		{capability.Supported, "criu --version: 4.1/../x", ""},
		{capability.Supported, "something else", ""},
		{capability.Supported, "criu --version: ", ""},
	} {
		if got := criuVersion(capability.Result{Verdict: tt.verdict, Evidence: tt.evidence}); got != tt.want {
			t.Errorf("criuVersion(%s, %q) = %q, want %q", tt.verdict, tt.evidence, got, tt.want)
		}
	}
}

func FuzzCRIUVersion(f *testing.F) {
	f.Add("criu --version: 4.1.1")
	f.Add("criu 3.12 is older than 3.15")
	f.Fuzz(func(t *testing.T, ev string) {
		for _, v := range []capability.Verdict{capability.Supported, capability.Degraded} {
			got := criuVersion(capability.Result{Verdict: v, Evidence: ev})
			rep := testReport(map[string]capability.Verdict{"criu.version": v}, map[string]string{"criu.version": ev})
			if l := CapabilityLabels(rep, nil, DefaultRestoreHandler)[v1alpha1.LabelCRIUVersion]; l != got && got != "" && len(got) <= 63 {
				t.Fatalf("version %q labelled %q", got, l)
			}
		}
	})
}

func TestLabelPatch(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tt := range []struct {
		name          string
		current, want map[string]string
		patch         map[string]*string
	}{
		{"nothing to do", map[string]string{"team": "a", v1alpha1.LabelCRIU: "true"}, map[string]string{v1alpha1.LabelCRIU: "true"}, map[string]*string{}},
		{"set, change and remove only ours",
			map[string]string{"team": "a", "checkpoint.other.io/criu": "true", v1alpha1.LabelCRIU: "false", v1alpha1.LabelPrefix + "old": "true"},
			map[string]string{v1alpha1.LabelCRIU: "true", v1alpha1.LabelArch: "amd64"},
			map[string]*string{v1alpha1.LabelCRIU: s("true"), v1alpha1.LabelArch: s("amd64"), v1alpha1.LabelPrefix + "old": nil}},
		{"nothing wanted removes ours", map[string]string{"kubernetes.io/arch": "amd64", v1alpha1.LabelArch: "amd64"}, map[string]string{},
			map[string]*string{v1alpha1.LabelArch: nil}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := LabelPatch(tt.current, tt.want)
			if len(got) != len(tt.patch) {
				t.Fatalf("patch %v, want %v", got, tt.patch)
			}
			for k, v := range tt.patch {
				g, ok := got[k]
				if !ok || (v == nil) != (g == nil) || (v != nil && *v != *g) {
					t.Errorf("patch[%s] = %v, want %v", k, g, v)
				}
			}
		})
	}
}

func TestTransferLabels(t *testing.T) {
	const rec = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
	for _, tt := range []struct {
		name string
		in   *transfer.Info
		want map[string]string
	}{
		{"receives none", nil, map[string]string{}},
		{"receives", &transfer.Info{Port: 10443, Recipients: []string{rec, "age1other"}},
			map[string]string{v1alpha1.LabelTransferPort: "10443", v1alpha1.LabelTransferRecipient: rec}},
		{"no port", &transfer.Info{Recipients: []string{rec}}, map[string]string{}},
		{"no recipient", &transfer.Info{Port: 10443}, map[string]string{}},
		{"a recipient no label holds", &transfer.Info{Port: 10443, Recipients: []string{rec + rec}}, map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := TransferLabels(tt.in); !maps.Equal(got, tt.want) {
				t.Fatalf("TransferLabels(%+v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestLabelsKey: the labels are written again when the shim's report, its
// process (a restarted shim listens for transfers on another port) or its
// active configuration (its keys) changes, and only then.
func TestLabelsKey(t *testing.T) {
	base := func() Snapshot {
		var s Snapshot
		s.Report = json.RawMessage(`{"verdicts":{"supported":3}}`)
		s.Shim.StartedAt, s.Shim.PID = time.Date(2026, 11, 28, 13, 0, 0, 0, time.UTC), 4242
		s.Config = &configstatus.NodeConfigStatus{Active: &configstatus.SourceRef{UID: "a1"}}
		s.Generation = 7
		return s
	}
	same := base()
	same.Generation = 9 // another status change alone
	if labelsKey(base()) != labelsKey(same) {
		t.Error("the key changed with the status generation alone")
	}
	for name, change := range map[string]func(*Snapshot){
		"report":    func(s *Snapshot) { s.Report = json.RawMessage(`{"verdicts":{"supported":2}}`) },
		"restarted": func(s *Snapshot) { s.Shim.StartedAt = s.Shim.StartedAt.Add(time.Second); s.Shim.PID = 4343 },
		"config":    func(s *Snapshot) { s.Config.Active.UID = "b2" },
	} {
		s := base()
		change(&s)
		if labelsKey(s) == labelsKey(base()) {
			t.Errorf("%s: the key did not change", name)
		}
	}
}
