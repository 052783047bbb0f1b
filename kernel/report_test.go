package kernel

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/golden"
)

// TestReportGolden renders the report of each recorded host as a table,
// as JSON and as an NFD feature file, and compares them with golden files.
func TestReportGolden(t *testing.T) {
	for _, name := range []string{"debian-6.1", "rhel-8.10"} {
		t.Run(name, func(t *testing.T) {
			rep, err := Collector{Now: fixedClock()}.Collect(t.Context(), testHost(t, name), Catalogue())
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "golden/"+name+".table", []byte(rep.Table()))
			var js bytes.Buffer
			enc := json.NewEncoder(&js)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "golden/"+name+".json", js.Bytes())
			nfd, err := rep.NFDFeatures()
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "golden/"+name+".nfd", nfd)
		})
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep, err := Collector{Now: fixedClock()}.Collect(t.Context(), testHost(t, "rhel-8.10"), Catalogue())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.APIVersion != ReportAPIVersion || back.Kind != ReportKind || back.Kernel.Raw != "4.18.0-553.el8_10.x86_64" ||
		back.Kernel.Version != V(4, 18, 0) || len(back.Requirements) != len(rep.Requirements) || back.Summary != rep.Summary {
		t.Errorf("round trip lost data: %+v", back)
	}
	// The recorded RHEL 8 host has PSI triggers (upstream 5.2) in 4.18.
	res, _ := back.Result("psi.triggers")
	if res.Mismatch != Backport || res.VersionVerdict != Unsupported || res.Verdict != Supported {
		t.Errorf("backported PSI triggers: %+v", res)
	}
}

func TestNFDFeatures(t *testing.T) {
	base := func() *Report {
		return &Report{APIVersion: ReportAPIVersion, Kind: ReportKind, Kernel: KernelInfo{Cgroup: CgroupLayout{Mode: CgroupUnified}}}
	}
	tests := []struct {
		name    string
		reqs    []Result
		wantErr bool
	}{
		{"valid", []Result{{ID: "cgroup.v2", Verdict: Supported}, {ID: "sysctl.net.ipv4.tcp_keepalive_probes", Verdict: Degraded}}, false},
		{"name with a slash", []Result{{ID: "a/b", Verdict: Supported}}, true},
		{"name too long", []Result{{ID: strings.Repeat("x", 64), Verdict: Supported}}, true},
		{"name starting with a dot", []Result{{ID: ".x", Verdict: Supported}}, true},
		{"too many for 64 KiB", func() []Result {
			var rs []Result
			for i := range 1200 {
				rs = append(rs, Result{ID: "r" + strings.Repeat("x", 50) + string(rune('a'+i%26)) + strings.Repeat("0", i%5), Verdict: Supported})
			}
			return rs
		}(), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			r.Requirements = tc.reqs
			b, err := r.NFDFeatures()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error; got %d bytes", len(b))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				name, value, ok := strings.Cut(line, "=")
				if !ok || !strings.HasPrefix(name, NFDNamespace+"/") || value == "" {
					t.Errorf("bad feature line %q", line)
				}
			}
		})
	}
}
