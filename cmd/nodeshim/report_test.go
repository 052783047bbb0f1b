package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/report"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}

// machineReport runs `nodeshim report -o json` on this machine.
func machineReport(t *testing.T) capability.Report {
	t.Helper()
	out, err := run(t, "report", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r capability.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReportCommand runs `nodeshim report` on this machine's kernel. What
// --require meets and what it does not comes from the machine's own report.
func TestReportCommand(t *testing.T) {
	testutil.RequireRoot(t)
	var met, notMet []string
	var notMetWant []string
	for _, res := range machineReport(t).Requirements {
		switch {
		case res.Verdict == capability.Supported:
			met = append(met, res.ID)
		case len(notMet) < 2:
			notMet = append(notMet, res.ID)
			notMetWant = append(notMetWant, fmt.Sprintf("%s is %s", res.ID, res.Verdict))
		}
	}
	if len(met) == 0 {
		t.Fatal("no requirement is Supported on this machine")
	}
	notMetCode := exitProblem
	if len(notMet) == 0 {
		notMetCode = exitOK // every requirement is Supported here
	}
	tests := []struct {
		name  string
		args  []string
		code  int
		check func(t *testing.T, out string, err error)
	}{
		{"table", []string{"report"}, exitOK, func(t *testing.T, out string, _ error) {
			for _, want := range []string{"KERNEL ", "LABELS    kubernetes.io/arch=", "GROUP     REQUIREMENT", "cgroup    cgroup.v2", "requirements: "} {
				if !strings.Contains(out, want) {
					t.Errorf("table lacks %q:\n%s", want, out)
				}
			}
		}},
		{"json", []string{"report", "-o", "json"}, exitOK, func(t *testing.T, out string, _ error) {
			var r capability.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.APIVersion != capability.ReportAPIVersion || r.Kind != capability.ReportKind || len(r.Requirements) != len(report.Catalogue()) {
				t.Errorf("report header %s %s with %d requirements", r.APIVersion, r.Kind, len(r.Requirements))
			}
		}},
		{"yaml", []string{"report", "-o", "yaml"}, exitOK, func(t *testing.T, out string, _ error) {
			if !strings.HasPrefix(out, "apiVersion: nodeshim.io/v1alpha1\n") || !strings.Contains(out, "kind: KernelReport") {
				t.Errorf("yaml:\n%.300s", out)
			}
		}},
		{"require met", []string{"report", "--require", strings.Join(met, ",")}, exitOK, nil},
		{"require not met names the reasons", []string{"report", "-o", "json", "--require", strings.Join(append([]string{met[0]}, notMet...), ",")}, notMetCode, func(t *testing.T, out string, err error) {
			msg := fmt.Sprint(err)
			for _, want := range notMetWant {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			if strings.Contains(msg, met[0]) {
				t.Errorf("error names a Supported requirement: %q", msg)
			}
			if !json.Valid([]byte(out)) {
				t.Error("the report is still printed before exit 3")
			}
		}},
		{"unknown required id", []string{"report", "--require", "no.such"}, exitUsage, func(t *testing.T, _ string, err error) {
			if !strings.Contains(err.Error(), "no.such") {
				t.Error(err)
			}
		}},
		{"bad output", []string{"report", "-o", "xml"}, exitUsage, nil},
		{"stray argument", []string{"report", "extra"}, exitUsage, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			if got := exitCode(err); got != tc.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.code)
			}
			if tc.check != nil {
				tc.check(t, out, err)
			}
		})
	}
}

func TestReportNFDFile(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "nodeshim")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "report", "-o", "json", "--nfd-features-file", path)
	if err != nil {
		t.Fatal(err)
	}
	// The file says what the report printed beside it says of this machine.
	var r capability.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	var v2 capability.Verdict
	for _, res := range r.Requirements {
		if res.ID == "cgroup.v2" {
			v2 = res.Verdict
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > capability.NFDMaxFileSize || r.Kernel.Cgroup.Mode == "" || v2 == "" ||
		!strings.Contains(string(b), fmt.Sprintf("%s/cgroup.mode=%s\n", capability.NFDNamespace, r.Kernel.Cgroup.Mode)) ||
		!strings.Contains(string(b), fmt.Sprintf("%s/cgroup.v2=%s\n", capability.NFDNamespace, v2)) {
		t.Errorf("feature file (cgroup mode %q, cgroup.v2 %q in the report):\n%s", r.Kernel.Cgroup.Mode, v2, b)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o022 != 0 {
		t.Errorf("mode %v, %v", st.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}

	_, err = run(t, "report", "--nfd-features-file", filepath.Join(dir, "missing", "nodeshim"))
	if exitCode(err) != exitFailure || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Errorf("unwritable path: %v", err)
	}
}

// TestReportHostRoots points the report at a recorded host: the identity
// and files come from there, while system calls still go to this kernel.
func TestReportHostRoots(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "hosts", "debian-6.1")
	out, err := run(t, "report", "-o", "json",
		"--proc-root", filepath.Join(root, "proc"), "--sys-root", filepath.Join(root, "sys"),
		"--boot-root", filepath.Join(root, "boot"), "--modules-root", filepath.Join(root, "lib", "modules"))
	if err != nil {
		t.Fatal(err)
	}
	var r capability.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kernel.Raw != "6.1.0-50-amd64" || r.Kernel.Cgroup.Mode != capability.CgroupUnified ||
		r.Kernel.Config.Source != filepath.Join(root, "boot", "config-6.1.0-50-amd64") {
		t.Errorf("kernel section %+v", r.Kernel)
	}
	// The trigger probe refuses to write to files that are not procfs.
	if res, _ := r.Result("psi.triggers"); res.Verdict != capability.Unknown || !strings.Contains(res.Evidence, "is not on procfs or cgroup2") {
		t.Errorf("psi.triggers on a recorded host: %+v", res)
	}
}

func TestRunReportBadCatalogueFails(t *testing.T) {
	p := func(context.Context, capability.Host) capability.Finding {
		return capability.Findingf(capability.Supported, "x")
	}
	reqs := []capability.Requirement{{ID: "a", Probe: p}, {ID: "a", Probe: p}}
	o := &reportOptions{output: "table", host: *kernel.DefaultHost()}
	err := runReport(t.Context(), &bytes.Buffer{}, o, reqs)
	if exitCode(err) != exitFailure || !errors.Is(err, capability.ErrBadCatalogue) {
		t.Errorf("got %v, want exit 1 wrapping ErrBadCatalogue", err)
	}
}

// TestReportCachesPerBootVerdicts runs the report twice with one cache
// directory: the second run answers the per-boot requirements that had a
// definitive verdict from the cache, says so in their evidence and keeps
// their verdicts; without a cache directory nothing is cached.
func TestReportCachesPerBootVerdicts(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "cache")
	collect := func(args ...string) map[string]capability.Result {
		t.Helper()
		out, err := run(t, append([]string{"report", "-o", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var r capability.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		m := map[string]capability.Result{}
		for _, res := range r.Requirements {
			m[res.ID] = res
		}
		return m
	}
	first := collect("--cache-dir", dir)
	second := collect("--cache-dir", dir)
	fresh := collect("--cache-dir", "")
	perBoot := 0
	for _, req := range report.Catalogue() {
		a, b, c := first[req.ID], second[req.ID], fresh[req.ID]
		if strings.Contains(c.Evidence, "(cached: probed at") {
			t.Errorf("%s is cached without a cache directory: %s", req.ID, c.Evidence)
		}
		if strings.Contains(a.Evidence, "(cached: probed at") {
			t.Errorf("%s is cached in the first run: %s", req.ID, a.Evidence)
		}
		cached := strings.Contains(b.Evidence, "(cached: probed at")
		switch {
		case !req.PerBoot && cached:
			t.Errorf("%s is not per boot but came from the cache: %s", req.ID, b.Evidence)
		case req.PerBoot && a.Verdict != capability.Unknown:
			perBoot++
			if !cached || b.Verdict != a.Verdict || !strings.HasPrefix(b.Evidence, a.Evidence) {
				t.Errorf("%s: second run %s %q, want the first run's %s %q from the cache", req.ID, b.Verdict, b.Evidence, a.Verdict, a.Evidence)
			}
		}
	}
	if perBoot == 0 {
		t.Error("no per-boot requirement had a definitive verdict to cache")
	}
}
