package capability

import (
	"strings"
	"testing"
)

func TestNFDFeatures(t *testing.T) {
	base := func() *Report {
		return &Report{APIVersion: ReportAPIVersion, Kind: ReportKind, Kernel: Kernel{Cgroup: CgroupLayout{Mode: CgroupUnified}}}
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
		{"name ending with a dash", []Result{{ID: "x-", Verdict: Supported}}, true},
		{"name of 63 characters", []Result{{ID: strings.Repeat("x", 63), Verdict: Supported}}, false},
		{"name of one character", []Result{{ID: "x", Verdict: Supported}}, false},
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
