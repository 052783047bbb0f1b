package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// cacheFixture is a CheckCache in a temporary dir with its own boot id
// file and a stand-in criu executable.
type cacheFixture struct {
	cache  CheckCache
	bin    Binary
	bootID string
}

func newCacheFixture(t *testing.T) cacheFixture {
	t.Helper()
	dir := t.TempDir()
	f := cacheFixture{
		cache:  CheckCache{Dir: filepath.Join(dir, "state", "report-cache"), BootIDPath: filepath.Join(dir, "boot_id")},
		bin:    Binary{Path: filepath.Join(dir, "criu"), Source: "configured"},
		bootID: filepath.Join(dir, "boot_id"),
	}
	if err := os.WriteFile(f.bootID, []byte("4673a44b-9ae0-4d19-97ab-47098c6cddf1\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.bin.Path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

var cacheT0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// goodResults are the answers of trixie's criu 4.1.1 on this kernel.
func goodResults() checkResults {
	return checkResults{
		version:  Version{4, 1, 1},
		checkMsg: "Looks good.",
		features: map[string]error{
			"timens":          nil,
			"mem_dirty_track": wrapFailed("mem_dirty_track", "Warn (criu/cr-check.c:824): Dirty tracking is OFF."),
		},
	}
}

func TestCheckCacheRoundTrip(t *testing.T) {
	f := newCacheFixture(t)
	in := goodResults()
	wrote, err := f.cache.store(f.bin, in, cacheT0)
	if err != nil || !wrote {
		t.Fatalf("store = %v, %v", wrote, err)
	}
	st, err := os.Stat(filepath.Join(f.cache.Dir, CheckCacheFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", st.Mode().Perm())
	}
	if dst, err := os.Stat(f.cache.Dir); err != nil || dst.Mode().Perm() != 0o700 {
		t.Errorf("cache dir: %v, %v; want mode 0700", dst, err)
	}
	out, err := f.cache.load(f.bin, []string{"timens", "mem_dirty_track"})
	if err != nil {
		t.Fatal(err)
	}
	if out.version != in.version || out.checkMsg != "Looks good." || out.checkErr != nil || !out.cachedAt.Equal(cacheT0) {
		t.Errorf("loaded %+v", out)
	}
	if out.features["timens"] != nil {
		t.Errorf("timens: %v, want supported", out.features["timens"])
	}
	ferr := out.features["mem_dirty_track"]
	if !errors.Is(ferr, ErrCheckFailed) || !strings.Contains(ferr.Error(), "Dirty tracking is OFF.") {
		t.Errorf("mem_dirty_track: %v, want ErrCheckFailed with CRIU's message", ferr)
	}
}

func wrapFailed(name, msg string) error {
	return &failedErr{name: name, msg: msg}
}

type failedErr struct{ name, msg string }

func (e *failedErr) Error() string {
	return "criu check --feature " + e.name + ": " + ErrCheckFailed.Error() + ": " + e.msg
}
func (e *failedErr) Unwrap() error { return ErrCheckFailed }

func TestCheckCacheFailedCheckRoundTrip(t *testing.T) {
	f := newCacheFixture(t)
	in := checkResults{
		version:  Version{3, 17, 1},
		checkErr: wrapCheck(f.bin, "Error (criu/vdso.c:412): vdso: Unexpected rt vDSO area bounds"),
		features: map[string]error{},
	}
	if _, err := f.cache.store(f.bin, in, cacheT0); err != nil {
		t.Fatal(err)
	}
	out, err := f.cache.load(f.bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.checkErr, ErrCheckFailed) || out.checkErr.Error() != in.checkErr.Error() {
		t.Errorf("check error %q, want %q", out.checkErr, in.checkErr)
	}
}

type checkErr struct{ path, msg string }

func (e *checkErr) Error() string { return e.path + " check: " + ErrCheckFailed.Error() + ": " + e.msg }
func (e *checkErr) Unwrap() error { return ErrCheckFailed }

func wrapCheck(b Binary, msg string) error { return &checkErr{b.Path, msg} }

// TestCheckCacheMiss: every change of the key, and every damaged record,
// makes the cache miss instead of answering.
func TestCheckCacheMiss(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, f cacheFixture)
		want   []string
	}{
		{"new boot", func(t *testing.T, f cacheFixture) {
			write(t, f.bootID, "0d4b8c5e-0000-4000-8000-000000000001\n")
		}, nil},
		{"criu replaced", func(t *testing.T, f cacheFixture) {
			tmp := f.bin.Path + ".new"
			write(t, tmp, "#!/bin/sh\nexit 0\n")
			if err := os.Rename(tmp, f.bin.Path); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"criu rewritten in place", func(t *testing.T, f cacheFixture) {
			write(t, f.bin.Path, "#!/bin/sh\nexit 1\n")
		}, nil},
		{"criu touched", func(t *testing.T, f cacheFixture) {
			if err := os.Chtimes(f.bin.Path, time.Time{}, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"feature not cached", func(*testing.T, cacheFixture) {}, []string{"timens", "pidfd_store"}},
		{"damaged record", func(t *testing.T, f cacheFixture) {
			write(t, filepath.Join(f.cache.Dir, CheckCacheFile), "{\"bootID\": ")
		}, nil},
		{"record without time", func(t *testing.T, f cacheFixture) {
			p := filepath.Join(f.cache.Dir, CheckCacheFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			write(t, p, strings.Replace(string(b), `"checkedAt": "2026-11-23T12:00:00Z"`, `"checkedAt": "0001-01-01T00:00:00Z"`, 1))
		}, nil},
		{"no record", func(t *testing.T, f cacheFixture) {
			if err := os.Remove(filepath.Join(f.cache.Dir, CheckCacheFile)); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFixture(t)
			if _, err := f.cache.store(f.bin, goodResults(), cacheT0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.cache.load(f.bin, []string{"timens"}); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			tc.change(t, f)
			names := tc.want
			if names == nil {
				names = []string{"timens"}
			}
			if r, err := f.cache.load(f.bin, names); !errors.Is(err, errCacheMiss) {
				t.Errorf("load = %+v, %v; want errCacheMiss", r, err)
			}
		})
	}
}

func TestCheckCacheBootIDUnreadable(t *testing.T) {
	f := newCacheFixture(t)
	f.cache.BootIDPath = filepath.Join(t.TempDir(), "missing")
	if _, err := f.cache.load(f.bin, nil); err == nil || errors.Is(err, errCacheMiss) {
		t.Errorf("load without boot id: %v, want a read error", err)
	}
	if wrote, err := f.cache.store(f.bin, goodResults(), cacheT0); wrote || err == nil {
		t.Errorf("store without boot id = %v, %v; want an error", wrote, err)
	}
}

// TestCheckCacheKeepsOnlyDefinitiveAnswers: a timeout or a criu that could
// not run is not an answer about the kernel and is never cached.
func TestCheckCacheKeepsOnlyDefinitiveAnswers(t *testing.T) {
	cases := []struct {
		name string
		mod  func(r *checkResults)
	}{
		{"version failed", func(r *checkResults) { r.verErr = errors.New("exec: permission denied") }},
		{"check timed out", func(r *checkResults) { r.checkErr = context.DeadlineExceeded }},
		{"feature could not run", func(r *checkResults) { r.features["timens"] = errors.New("signal: killed") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFixture(t)
			r := goodResults()
			r.features["mem_dirty_track"] = nil
			tc.mod(&r)
			wrote, err := f.cache.store(f.bin, r, cacheT0)
			if wrote || err != nil {
				t.Errorf("store = %v, %v; want nothing written", wrote, err)
			}
			if _, err := os.Stat(filepath.Join(f.cache.Dir, CheckCacheFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cache file: %v, want none", err)
			}
		})
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestRequirementsUseCache runs the report's CRIU entries three times
// against a stand-in criu that logs each call (it does not speak RPC, so
// after its `criu swrk` every answer comes from the command line, one
// process each): the first run calls it and
// writes the cache, the second calls nothing and says its findings are
// cached, and after the binary changes the third calls it again.
func TestRequirementsUseCache(t *testing.T) {
	testutil.RequireRoot(t) // criu check is only run as root
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	exe := filepath.Join(dir, "criu")
	script := `#!/bin/sh
echo "$*" >> ` + calls + `
case "$1" in
--version) echo "Version: 4.1.1"; exit 0;;
esac
case "$3" in
mem_dirty_track) echo "Warn  (criu/cr-check.c:824): Dirty tracking is OFF. Memory snapshot will not work."; exit 1;;
esac
echo "Looks good."
`
	write(t, exe, script)
	t.Setenv(EnvCriu, exe)
	cache := &CheckCache{Dir: filepath.Join(dir, "cache"), BootIDPath: "/proc/sys/kernel/random/boot_id"}
	clock := func() time.Time { return cacheT0 }
	run := func() (map[string]capability.Finding, int) {
		t.Helper()
		if err := os.Remove(calls); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out := map[string]capability.Finding{}
		for _, r := range RequirementsWith(ReportOptions{Cache: cache, Now: clock}) {
			out[r.ID] = r.Probe(context.Background(), kernel.DefaultHost())
		}
		b, err := os.ReadFile(calls)
		if errors.Is(err, os.ErrNotExist) {
			return out, 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return out, strings.Count(string(b), "\n")
	}

	calledFresh := 3 + len(ProbedFeatures) // swrk, --version, check, features
	cold, n := run()
	if want := calledFresh; n != want {
		t.Errorf("cold run called criu %d times, want %d", n, want)
	}
	warm, n := run()
	if n != 0 {
		t.Errorf("warm run called criu %d times, want 0", n)
	}
	for id, c := range cold {
		w := warm[id]
		if c.Verdict != w.Verdict {
			t.Errorf("%s: cold %s, warm %s", id, c.Verdict, w.Verdict)
		}
		if strings.Contains(c.Evidence, "cached") {
			t.Errorf("%s: cold evidence %q says cached", id, c.Evidence)
		}
		// criu.lazy_pages asks the kernel, not criu, once criu is found.
		if id != "criu.binary" && id != "criu.lazy_pages" && !strings.Contains(w.Evidence, "cached: criu ran at 2026-11-23T12:00:00Z") {
			t.Errorf("%s: warm evidence %q does not say it is cached", id, w.Evidence)
		}
	}
	if f := warm["criu.feature.mem_dirty_track"]; f.Verdict != capability.Degraded || !strings.Contains(f.Evidence, "Dirty tracking is OFF") {
		t.Errorf("cached mem_dirty_track: %+v, want Degraded with CRIU's message", f)
	}

	// A new criu (here: the same script written again) is run afresh.
	if err := os.Chtimes(exe, time.Time{}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	again, n := run()
	if want := calledFresh; n != want {
		t.Errorf("run after criu changed called it %d times, want %d", n, want)
	}
	if f := again["criu.check"]; f.Verdict != capability.Supported || strings.Contains(f.Evidence, "cached") {
		t.Errorf("criu.check after criu changed: %+v", f)
	}
}

// TestRequirementsCachedOnThisNode: the real criu gives the same verdicts
// from the cache as when it runs.
func TestRequirementsCachedOnThisNode(t *testing.T) {
	requireCriu(t)
	cache := &CheckCache{Dir: t.TempDir(), BootIDPath: "/proc/sys/kernel/random/boot_id"}
	probeAll := func() map[string]capability.Finding {
		out := map[string]capability.Finding{}
		for _, r := range RequirementsWith(ReportOptions{Cache: cache}) {
			out[r.ID] = r.Probe(context.Background(), kernel.DefaultHost())
		}
		return out
	}
	cold, warm := probeAll(), probeAll()
	if len(cold) != 4+len(ProbedFeatures) {
		t.Fatalf("%d findings", len(cold))
	}
	for id, c := range cold {
		t.Logf("%s: %s: %s", id, warm[id].Verdict, warm[id].Evidence)
		if warm[id].Verdict != c.Verdict {
			t.Errorf("%s: cold %s (%s), cached %s (%s)", id, c.Verdict, c.Evidence, warm[id].Verdict, warm[id].Evidence)
		}
	}
	if !strings.Contains(warm["criu.check"].Evidence, "Looks good. (cached") {
		t.Errorf("cached criu.check evidence %q", warm["criu.check"].Evidence)
	}
}

// TestCheckCacheReadiness: a cache with no record, or a record of another
// boot, is ErrNoCachedCheck; a record of this boot and binary is the
// Readiness it holds, dated.
func TestCheckCacheReadiness(t *testing.T) {
	dir := t.TempDir()
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte("boot-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "criu")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := CheckCache{Dir: filepath.Join(dir, "cache"), BootIDPath: boot}
	b := Binary{Path: bin, Source: "configured"}
	if _, err := c.Readiness(b); !errors.Is(err, ErrNoCachedCheck) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Readiness of an empty cache = %v; want ErrNoCachedCheck", err)
	}
	features := map[string]error{}
	for _, f := range ProbedFeatures {
		features[f.Name] = nil
	}
	features["timens"] = fmt.Errorf("criu check --feature timens: %w: no timens", ErrCheckFailed)
	at := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	if ok, err := c.store(b, checkResults{version: Version{Major: 4, Minor: 1, Sublevel: 1}, checkMsg: "Looks good.", features: features}, at); !ok || err != nil {
		t.Fatalf("store = %v, %v", ok, err)
	}
	rd, err := c.Readiness(b)
	if err != nil {
		t.Fatal(err)
	}
	if rd.CheckErr != nil || !rd.CachedAt.Equal(at) || rd.Version.Minor != 1 {
		t.Fatalf("Readiness = %+v", rd)
	}
	if ferr, known := rd.Feature("timens"); !known || !errors.Is(ferr, ErrCheckFailed) || !strings.Contains(ferr.Error(), "no timens") {
		t.Fatalf("timens = %v, %v; want CRIU's failure", ferr, known)
	}
	if err := os.WriteFile(boot, []byte("boot-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Readiness(b); !errors.Is(err, ErrNoCachedCheck) || !strings.Contains(err.Error(), "boot-1") {
		t.Fatalf("Readiness after a reboot = %v; want ErrNoCachedCheck naming the old boot", err)
	}
}
