package kernel

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

// TestReportGolden renders the report of each recorded host as a table,
// as JSON and as an NFD feature file, and compares them with golden files.
func TestReportGolden(t *testing.T) {
	for _, name := range []string{"debian-6.1", "rhel-8.10"} {
		t.Run(name, func(t *testing.T) {
			rep, err := capability.Collector{Now: fixedClock()}.Collect(t.Context(), testHost(t, name), Catalogue())
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
	rep, err := capability.Collector{Now: fixedClock()}.Collect(t.Context(), testHost(t, "rhel-8.10"), Catalogue())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back capability.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.APIVersion != capability.ReportAPIVersion || back.Kind != capability.ReportKind || back.Kernel.Raw != "4.18.0-553.el8_10.x86_64" ||
		back.Kernel.Version != capability.V(4, 18, 0) || len(back.Requirements) != len(rep.Requirements) || back.Summary != rep.Summary {
		t.Errorf("round trip lost data: %+v", back)
	}
	// The recorded RHEL 8 host has PSI triggers (upstream 5.2) in 4.18.
	res, _ := back.Result("psi.triggers")
	if res.Mismatch != capability.Backport || res.VersionVerdict != capability.Unsupported || res.Verdict != capability.Supported {
		t.Errorf("backported PSI triggers: %+v", res)
	}
}
