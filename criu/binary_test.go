package criu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestParseVersion(t *testing.T) {
	cases := []struct {
		name, in string
		want     Version
		wantErr  bool
	}{
		{"release", "Version: 4.1.1\n", Version{4, 1, 1}, false},
		{"no sublevel", "Version: 3.17\n", Version{3, 17, 0}, false},
		{"git build", "Version: 4.1\nGitID: v4.1-12-gdeadbeef\n", Version{4, 1, 0}, false},
		{"garbage", "criu: command not found\n", Version{}, true},
		{"empty", "", Version{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVersion(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ParseVersion(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"Version: 4.1.1\n", "Version: 3.17\nGitID: x\n", "", "Version: 99999999999999999999.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err == nil && (v.Major < 0 || v.Minor < 0 || v.Sublevel < 0) {
			t.Fatalf("negative version %v from %q", v, s)
		}
	})
}

func TestCheckMessage(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"bookworm's criu on 6.13+", "Error (criu/vdso.c:412): vdso: Unexpected rt vDSO area bounds\nError (criu/cr-check.c:1612): ...\n",
			"Error (criu/vdso.c:412): vdso: Unexpected rt vDSO area bounds; Error (criu/cr-check.c:1612): ..."},
		{"warnings only", "Warn  (criu/cr-check.c:824): Dirty tracking is OFF.\n", "Warn  (criu/cr-check.c:824): Dirty tracking is OFF."},
		{"plain text", "must be run by root\n", "must be run by root"},
		{"nothing", "", "no output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckMessage(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFind: the configured path, then $NODESHIM_CRIU, then PATH, then the
// default path; a missing or non-executable file is ErrNoBinary.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "criu")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(t.TempDir(), "criu")
	if err := os.WriteFile(def, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvCriu {
				return v
			}
			return ""
		}
	}
	cases := []struct {
		name       string
		configured string
		env        string
		path       string
		defPath    string
		wantPath   string
		wantSource string
		wantErr    bool
	}{
		{"configured wins", exe, "/nonexistent", "", def, exe, "configured", false},
		{"environment next", "", exe, "", def, exe, "$" + EnvCriu, false},
		{"then PATH", "", "", dir, def, exe, "PATH", false},
		{"then the default path", "", "", t.TempDir(), def, def, "default", false},
		{"configured missing", "/nonexistent/criu", "", "", def, "", "", true},
		{"not executable", plain, "", "", def, "", "", true},
		{"default not executable", "", "", t.TempDir(), plain, "", "", true},
		{"nowhere", "", "", t.TempDir(), "/nonexistent/criu", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			b, err := find(tc.configured, env(tc.env), tc.defPath)
			if tc.wantErr {
				// No criu is a tool the node lacks, not a missing object.
				if !errors.Is(err, ErrNoBinary) || !errors.Is(err, errdefs.ErrNotSupported) || errors.Is(err, errdefs.ErrNotFound) {
					t.Fatalf("find = %v, %v; want ErrNoBinary of class errdefs.ErrNotSupported", b, err)
				}
				return
			}
			if err != nil || b.Path != tc.wantPath || b.Source != tc.wantSource {
				t.Fatalf("find = %+v, %v; want %s via %s", b, err, tc.wantPath, tc.wantSource)
			}
		})
	}
}

// findings runs every CRIU requirement and returns the findings by ID.
func findings(t *testing.T) map[string]capability.Finding {
	t.Helper()
	out := map[string]capability.Finding{}
	for _, r := range RequirementsWith(ReportOptions{}) {
		if r.Group != "criu" || len(r.NeededBy) == 0 {
			t.Errorf("requirement %s: group %q, needed by %v", r.ID, r.Group, r.NeededBy)
		}
		f := r.Probe(context.Background(), kernel.DefaultHost())
		t.Logf("%s: %s: %s", r.ID, f.Verdict, f.Evidence)
		out[r.ID] = f
	}
	return out
}

// TestRequirementsOnThisNode probes the real criu on this machine: trixie's
// 4.1.1 passes `criu check`; dirty-memory tracking is there when the kernel
// tracks soft-dirty pages.
func TestRequirementsOnThisNode(t *testing.T) {
	requireCriu(t)
	fs := findings(t)
	want := map[string]capability.Verdict{
		"criu.binary":                        capability.Supported,
		"criu.version":                       capability.Supported,
		"criu.check":                         capability.Supported,
		"criu.feature.uffd-noncoop":          capability.Supported,
		"criu.feature.pidfd_store":           capability.Supported,
		"criu.feature.timens":                capability.Supported,
		"criu.feature.clone3_set_tid":        capability.Supported,
		"criu.feature.network_lock_nftables": capability.Supported,
	}
	// Lazy pages: Supported, or Degraded where nodeshim has to raise
	// fs.pipe-max-size first; userfaultfd is there on every machine of
	// this kind.
	if f := fs["criu.lazy_pages"]; f.Verdict != capability.Supported && f.Verdict != capability.Degraded {
		t.Errorf("criu.lazy_pages: %s (%s), want Supported or Degraded", f.Verdict, f.Evidence)
	}
	for id, v := range want {
		if fs[id].Verdict != v {
			t.Errorf("%s: %s (%s), want %s", id, fs[id].Verdict, fs[id].Evidence, v)
		}
	}
	if !strings.Contains(fs["criu.check"].Evidence, "Looks good") {
		t.Errorf("criu.check evidence %q lacks CRIU's verdict", fs["criu.check"].Evidence)
	}
	dirty := fs["criu.feature.mem_dirty_track"]
	switch tracks := kernelTracksSoftDirty(t); {
	case tracks && dirty.Verdict != capability.Supported:
		t.Errorf("criu.feature.mem_dirty_track: %s (%s) on a kernel that tracks soft-dirty pages", dirty.Verdict, dirty.Evidence)
	case !tracks && (dirty.Verdict != capability.Degraded || !strings.Contains(dirty.Evidence, "Dirty tracking is OFF")):
		t.Errorf("criu.feature.mem_dirty_track: %s (%s), want Degraded with CRIU's message on a kernel without soft-dirty tracking", dirty.Verdict, dirty.Evidence)
	}
}

// TestRequirementsFailingCheck stands in for bookworm's criu 3.17.1 on a
// 6.13+ kernel with a script that answers as it does: the check is
// Unsupported with CRIU's own message, and so is every feature.
func TestRequirementsFailingCheck(t *testing.T) {
	testutil.RequireRoot(t) // criu check is only run as root
	dir := t.TempDir()
	script := `#!/bin/sh
case "$1" in
--version) echo "Version: 3.17.1"; exit 0;;
check) echo "Error (criu/vdso.c:412): vdso: Unexpected rt vDSO area bounds" >&2; exit 1;;
esac
exit 1
`
	exe := filepath.Join(dir, "criu")
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCriu, exe)
	fs := findings(t)
	if f := fs["criu.version"]; f.Verdict != capability.Supported || !strings.Contains(f.Evidence, "3.17.1") {
		t.Errorf("criu.version: %+v", f)
	}
	if f := fs["criu.check"]; f.Verdict != capability.Unsupported || !strings.Contains(f.Evidence, "Unexpected rt vDSO area bounds") {
		t.Errorf("criu.check: %+v, want Unsupported with CRIU's message", f)
	}
	if f := fs["criu.feature.timens"]; f.Verdict != capability.Unsupported {
		t.Errorf("criu.feature.timens: %+v, want Unsupported", f)
	}
}

func TestRequirementsNoBinary(t *testing.T) {
	t.Setenv(EnvCriu, "")
	t.Setenv("PATH", t.TempDir())
	fs := findings(t)
	for id, f := range fs {
		if f.Verdict != capability.Unsupported {
			t.Errorf("%s: %s, want Unsupported without criu", id, f.Verdict)
		}
	}
}
