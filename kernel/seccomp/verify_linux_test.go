package seccomp

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/internal/testutil"
)

// loadTestdata parses and compiles testdata/name.
func loadTestdata(t testing.TB, name string, co CompileOptions) (*Profile, *Filter) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b, ParseOptions{Kernel: runningKernel(t)})
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	f, err := Compile(p, co)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return p, f
}

// TestVerifyTestdata is the ground truth check on every valid profile in
// testdata, with both optimizers.
func TestVerifyTestdata(t *testing.T) {
	testutil.RequireRoot(t)
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 7 {
		t.Fatalf("testdata profiles: %v %v", files, err)
	}
	for _, path := range files {
		for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
			name := filepath.Base(path)
			t.Run(name+"/"+opt.String(), func(t *testing.T) {
				p, f := loadTestdata(t, name, CompileOptions{Optimize: opt})
				rep, err := Verify(context.Background(), p, f, VerifyOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Results {
					if r.Status == StatusMismatch {
						t.Errorf("%s(%v) [%s]: expected %s (%s), observed %s, baseline %s: %s", r.Syscall, r.Args, r.Why, r.Expected, r.Rule, r.Observed, r.Baseline, r.Detail)
					}
				}
				t.Logf("%d probed in %d children: %d ok, %d inconclusive, %d not probed", rep.Probed, rep.Children, rep.OK, rep.Inconclusive, rep.NotProbed)
				if rep.OK == 0 || rep.Probed < len(p.Names())/2 {
					t.Errorf("too little was proven: %+v", rep)
				}
			})
		}
	}
}
