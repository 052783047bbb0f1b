package reporter

import (
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		wantNames []string
		wantErr   bool
	}{
		{"empty", "", nil, false},
		{"shim metrics", "# HELP nodeshim_condition Condition status.\n# TYPE nodeshim_condition gauge\n" +
			"nodeshim_condition{status=\"True\",type=\"Ready\"} 1\nnodeshim_condition{status=\"False\",type=\"Ready\"} 0\n" +
			"# TYPE nodeshim_status_generation gauge\nnodeshim_status_generation 4\n",
			[]string{"nodeshim_condition", "nodeshim_status_generation"}, false},
		{"garbage", "this is not { prometheus\n", nil, true},
		{"bad value", "nodeshim_x one\n", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fams, err := parseMetrics(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			got := map[string]bool{}
			for _, f := range fams {
				got[f.GetName()] = true
			}
			if len(got) != len(tc.wantNames) {
				t.Fatalf("families %v, want %v", got, tc.wantNames)
			}
			for _, n := range tc.wantNames {
				if !got[n] {
					t.Fatalf("families %v lack %s", got, n)
				}
			}
		})
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add("# TYPE nodeshim_condition gauge\nnodeshim_condition{status=\"True\",type=\"Ready\"} 1\n")
	f.Add("nodeshim_x 1 1700000000000\n")
	f.Add("# HELP a b\n# TYPE a counter\na_total 3\n")
	f.Fuzz(func(t *testing.T, in string) {
		fams, err := parseMetrics(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, fam := range fams {
			if fam.GetName() == "" {
				t.Fatalf("family without a name from %q", in)
			}
		}
	})
}
