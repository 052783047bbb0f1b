package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func goodConfig(gen int) string {
	return fmt.Sprintf("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nplugins:\n  expected: [driver-%d]\n", gen)
}

const badUnknownField = "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nrootDri: /x\n"

// writeSource replaces the content of dir the way kubelet updates a
// ConfigMap volume (a value "symlink:TARGET" makes that key a symlink): a new timestamped directory, an atomic rename of the
// ..data link, and one link per key.
func writeSource(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := writeSourceErr(dir, files); err != nil {
		t.Fatal(err)
	}
}

func writeSourceErr(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		return err
	}
	for n, v := range files {
		if target, ok := strings.CutPrefix(v, "symlink:"); ok {
			if err := os.Symlink(target, filepath.Join(ts, n)); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(ts, n), []byte(v), 0o644); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmpLink := filepath.Join(dir, "..data_tmp")
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			if _, ok := files[e.Name()]; !ok {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	for n := range files {
		link := filepath.Join(dir, n)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", n), link); err != nil {
				return err
			}
		}
	}
	if old != "" {
		os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixture struct {
	t      *testing.T
	state  string
	source string
	clock  *clocktesting.FakeClock
	c      *Controller
}

func newFixture(t *testing.T) *fixture {
	d := t.TempDir()
	f := &fixture{t: t, state: filepath.Join(d, "root", "config"), source: filepath.Join(d, "source"), clock: clocktesting.NewFakeClock(t0)}
	f.open()
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	c, err := Open(Options{StateDir: f.state, SourceDir: f.source, Clock: f.clock, Logger: quietLogger()})
	if err != nil {
		f.t.Fatal(err)
	}
	f.c = c
}

func uidOf(t testing.TB, files map[string]string) string {
	t.Helper()
	var p Payload
	for _, n := range []string{"10-a.conf", "20-b.conf", BaseFile} { // byte order
		if v, ok := files[n]; ok {
			p.Files = append(p.Files, File{Name: n, Data: []byte(v)})
		}
	}
	return p.UID()
}

func refUID(r *SourceRef) string {
	if r == nil {
		return "<none>"
	}
	return short(r.UID)
}

func (f *fixture) expect(step string, assigned, active, lkg string, errSub string) NodeConfigStatus {
	f.t.Helper()
	s := f.c.Status()
	if refUID(s.Assigned) != assigned || refUID(s.Active) != active || refUID(s.LastKnownGood) != lkg {
		f.t.Errorf("%s: assigned/active/lkg = %s/%s/%s, want %s/%s/%s", step,
			refUID(s.Assigned), refUID(s.Active), refUID(s.LastKnownGood), assigned, active, lkg)
	}
	if errSub == "" && s.Error != "" {
		f.t.Errorf("%s: error = %q, want none", step, s.Error)
	}
	if errSub != "" && !strings.Contains(s.Error, errSub) {
		f.t.Errorf("%s: error = %q, want containing %q", step, s.Error, errSub)
	}
	return s
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	const none = "<none>"
	st := f.expect("fresh start", none, none, none, "")
	if c := st.Condition(); c.Status != condition.True || c.Message != "local defaults" {
		t.Errorf("fresh condition = %+v", c)
	}
	if got := f.c.Active(); got.RootDir != Defaults().RootDir {
		t.Errorf("fresh Active = %+v, want defaults", got)
	}
	if err := f.c.Sync(); err != nil {
		t.Fatalf("Sync without a source: %v", err)
	}

	a := map[string]string{BaseFile: goodConfig(1), "10-a.conf": "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nnetwork: {cniConfDir: /opt/cni}\n"}
	A := short(uidOf(t, a))
	writeSource(t, f.source, a)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	st = f.expect("A assigned", A, A, none, "")
	if !st.Assigned.AssignedAt.Time.Equal(t0) {
		t.Errorf("assignedAt = %v, want %v", st.Assigned.AssignedAt, t0)
	}
	// On trial is normal operation: True, with the step and the deadline.
	if c := st.Condition(); c.Status != condition.True || c.Severity != "" || c.Reason != ReasonConfigTrial ||
		!strings.Contains(c.Message, "until 2026-03-01T12:10:00Z (step 2 of 3") {
		t.Errorf("trial condition = %+v", c)
	}
	if st.SoakingUntil == nil || !st.SoakingUntil.Time.Equal(t0.Add(DefaultSoakPeriod)) {
		t.Errorf("soakingUntil = %v, want %v", st.SoakingUntil, t0.Add(DefaultSoakPeriod))
	}
	if got := f.c.Active(); !slices.Equal(got.Plugins.Expected, []string{"driver-1"}) || got.Network.CNIConfDir != "/opt/cni" || got.RootDir != Defaults().RootDir {
		t.Errorf("Active after A = %+v", got)
	}
	for _, p := range []string{filepath.Join(f.state, stateFile), filepath.Join(f.state, snapshotsDir, uidOf(t, a)+".json")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, fi.Mode())
		}
	}

	f.clock.Step(DefaultSoakPeriod - time.Second)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("soaking", A, A, none, "")
	if d, ok := f.c.NextSoakDeadline(); !ok || !d.Equal(t0.Add(DefaultSoakPeriod)) {
		t.Errorf("NextSoakDeadline = %v %v", d, ok)
	}
	f.clock.Step(time.Second)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	st = f.expect("A soaked", A, A, A, "")
	if c := st.Condition(); c.Status != condition.True || c.Reason != ReasonConfigActive {
		t.Errorf("soaked condition = %+v", c)
	}
	if _, ok := f.c.NextSoakDeadline(); ok {
		t.Error("soak deadline pending after promotion")
	}

	b := map[string]string{BaseFile: badUnknownField}
	B := short(uidOf(t, b))
	writeSource(t, f.source, b)
	if err := f.c.Sync(); err != nil {
		t.Fatalf("a bad config is not a Sync error: %v", err)
	}
	st = f.expect("B bad, rolled back", B, A, A, `config.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "rootDri"`)
	if c := st.Condition(); c.Status != condition.False || c.Severity != condition.SeverityError || c.Reason != ReasonConfigRolledBack {
		t.Errorf("rollback condition = %+v", c)
	}
	if !slices.Equal(f.c.Active().Plugins.Expected, []string{"driver-1"}) {
		t.Error("Active is not A after rollback")
	}
	f.clock.Step(2 * DefaultSoakPeriod)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("B never becomes LKG", B, A, A, "unknown field")

	invalid := map[string]string{BaseFile: "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nrootDir: relative/dir\n"}
	writeSource(t, f.source, invalid)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("validation error rolls back", short(uidOf(t, invalid)), A, A, `rootDir "relative/dir" is not an absolute path`)

	c := map[string]string{BaseFile: goodConfig(3)}
	C := short(uidOf(t, c))
	writeSource(t, f.source, c)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	st = f.expect("C good", C, C, A, "")
	cAssignedAt := st.Assigned.AssignedAt.Time
	if _, err := os.Stat(filepath.Join(f.state, snapshotsDir, uidOf(t, b)+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot of B not collected: %v", err)
	}

	// Restart well after C's soak period: the soak is measured from the
	// assignedAt in the record, so C is promoted at the first Sync.
	f.clock.SetTime(cAssignedAt.Add(DefaultSoakPeriod + time.Minute))
	f.open()
	f.expect("restart", C, C, A, "")
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("C promoted after restart", C, C, C, "")

	// A read error is retried and rolls nothing back.
	data, err := os.Readlink(filepath.Join(f.source, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(f.source, data, BaseFile)
	os.Remove(broken)
	if err := os.Symlink("/nonexistent/config.yaml", broken); err != nil {
		t.Fatal(err)
	}
	err = f.c.Sync()
	var re *RetryableError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "config.yaml") {
		t.Fatalf("Sync with unreadable source = %v, want RetryableError naming the file", err)
	}
	st = f.expect("read error", C, C, C, "read config source")
	if c := st.Condition(); c.Severity != condition.SeverityWarning || c.Reason != ReasonConfigSourceError {
		t.Errorf("read error condition = %+v", c)
	}
	writeSource(t, f.source, c)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("read error over", C, C, C, "")

	// A snapshot write error: the new payload is not reported as assigned.
	cp := filepath.Join(f.state, snapshotsDir)
	if err := os.Rename(cp, cp+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := map[string]string{BaseFile: goodConfig(4)}
	D := short(uidOf(t, d))
	writeSource(t, f.source, d)
	if err := f.c.Sync(); !errors.As(err, &re) {
		t.Fatalf("Sync with snapshot dir broken = %v, want RetryableError", err)
	}
	f.expect("snapshot error", C, C, C, "snapshot config "+D)
	os.Remove(cp)
	if err := os.Rename(cp+".away", cp); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("D assigned after retry", D, D, C, "")

	// Source reset to none: defaults, last-known-good reset at once.
	if err := os.RemoveAll(f.source); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("reset", none, none, none, "")
	if got := f.c.Active(); len(got.Plugins.Expected) != 0 {
		t.Errorf("Active after reset = %+v, want defaults", got)
	}
	entries, _ := os.ReadDir(cp)
	if len(entries) != 0 {
		t.Errorf("snapshots left after reset: %v", entries)
	}
	f.open()
	f.expect("reset survives restart", none, none, none, "")
}

func TestLifecycleBrokenState(t *testing.T) {
	t.Run("unreadable record comes up on defaults", func(t *testing.T) {
		f := newFixture(t)
		if err := os.WriteFile(filepath.Join(f.state, stateFile), []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		f.open()
		f.expect("corrupt record", "<none>", "<none>", "<none>", "state record unreadable")
		writeSource(t, f.source, map[string]string{BaseFile: goodConfig(1)})
		if err := f.c.Sync(); err != nil {
			t.Fatal(err)
		}
		u := short(uidOf(t, map[string]string{BaseFile: goodConfig(1)}))
		f.expect("recovered", u, u, "<none>", "")
	})
	t.Run("corrupt last-known-good falls back to defaults", func(t *testing.T) {
		f := newFixture(t)
		a := map[string]string{BaseFile: goodConfig(1)}
		writeSource(t, f.source, a)
		f.c.Sync()
		f.clock.Step(DefaultSoakPeriod)
		f.c.Sync()
		b := map[string]string{BaseFile: badUnknownField}
		writeSource(t, f.source, b)
		f.c.Sync()
		if err := os.WriteFile(filepath.Join(f.state, snapshotsDir, uidOf(t, a)+".json"), []byte(`{"files":[]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		f.open()
		st := f.expect("both bad", short(uidOf(t, b)), "<none>", short(uidOf(t, a)), "last-known-good")
		if !errors.Is(ErrSnapshotCorrupt, ErrSnapshotCorrupt) || !strings.Contains(st.Error, ErrSnapshotCorrupt.Error()) {
			t.Errorf("error %q does not name the corrupt snapshot", st.Error)
		}
	})
	t.Run("interrupted write leftovers are removed", func(t *testing.T) {
		f := newFixture(t)
		leftover := filepath.Join(f.state, "."+stateFile+tempInfix+"123")
		if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		orphan := filepath.Join(f.state, snapshotsDir, strings.Repeat("a", 64)+".json")
		if err := os.WriteFile(orphan, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		f.open()
		for _, p := range []string{leftover, orphan} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there: %v", p, err)
			}
		}
	})
}

func TestPayloadLoad(t *testing.T) {
	tm := "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n"
	tests := []struct {
		name    string
		files   []File
		check   func(ShimConfiguration) bool
		wantErr string
	}{
		{"base only", []File{{BaseFile, []byte(tm + "rootDir: /srv/shim\n")}}, func(c ShimConfiguration) bool { return c.RootDir == "/srv/shim" && c.LockFile == Defaults().LockFile }, ""},
		{"drop-ins in order", []File{
			{BaseFile, []byte(tm + "pressure: {evictionHard: {memory.available: 1Gi, pid.available: 10%}}\n")},
			{"10-a.conf", []byte(tm + "pressure: {evictionHard: {pid.available: 5%}}\nplugins: {acceptedVersions: {DevicePlugin: [v1beta1, v1]}}\n")},
			{"20-b.conf", []byte("")},
		}, func(c ShimConfiguration) bool {
			return c.Pressure.EvictionHard["memory.available"] == "1Gi" && c.Pressure.EvictionHard["pid.available"] == "5%" &&
				len(c.Plugins.AcceptedVersions["DevicePlugin"]) == 2 && len(c.Plugins.AcceptedVersions["CSIPlugin"]) == 1
		}, ""},
		{"unknown feature gate", []File{{BaseFile, []byte(tm + "featureGates: {A: true}\n")}}, nil, `featureGates: unrecognized feature gate "A"`},
		{"bad eviction threshold", []File{{BaseFile, []byte(tm + "pressure: {evictionHard: {memory.free: 1Gi}}\n")}}, nil, `pressure.evictionHard: `},
		{"relative kubelet config", []File{{BaseFile, []byte(tm + "kubelet: {configFile: config.yaml}\n")}}, nil, `kubelet.configFile "config.yaml" is not an absolute path`},
		{"no base", []File{{"10-a.conf", []byte(tm)}}, nil, "no base configuration file"},
		{"empty base", []File{{BaseFile, nil}}, nil, "config.yaml: empty configuration file"},
		{"whitespace base", []File{{BaseFile, []byte(" \n\t\n")}}, nil, "config.yaml: empty configuration file"},
		{"comment-only base", []File{{BaseFile, []byte("# truncated\n---\n")}, {"10-a.conf", []byte(tm + "rootDir: /x\n")}}, nil, "config.yaml: empty configuration file"},
		{"empty drop-in is ignored", []File{{BaseFile, []byte(tm + "rootDir: /srv/shim\n")}, {"10-a.conf", []byte("# nothing yet\n")}},
			func(c ShimConfiguration) bool { return c.RootDir == "/srv/shim" }, ""},
		{"missing kind in drop-in", []File{{BaseFile, []byte(tm)}, {"10-a.conf", []byte("rootDir: /x\n")}}, nil, `10-a.conf: wrong apiVersion or kind`},
		{"foreign kind", []File{{BaseFile, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")}}, nil, "wrong apiVersion or kind"},
		{"unknown field in drop-in", []File{{BaseFile, []byte(tm)}, {"10-a.conf", []byte(tm + "api: {tcpAdress: x}\n")}}, nil, `10-a.conf: error unmarshaling JSON: while decoding JSON: json: unknown field "tcpAdress"`},
		{"tcp without tls", []File{{BaseFile, []byte(tm + "api: {tcpAddress: ':10443'}\n")}}, nil, "api.tcpAddress needs api.tlsCertFile"},
		{"negative soak", []File{{BaseFile, []byte(tm + "configSoakPeriod: -1s\n")}}, nil, "configSoakPeriod -1s is negative"},
		{"pod checkpointer not a reader", []File{{BaseFile, []byte(tm + "api: {readOnlyUIDs: [65532], podCheckpointUIDs: [1000]}\n")}}, nil, "api.podCheckpointUIDs: uid 1000 is not in api.readOnlyUIDs"},
		{"negative api limit", []File{{BaseFile, []byte(tm + "api: {limits: {connsPerAddress: -1, idleTimeout: -1s}}\n")}}, nil, "api.limits.connsPerAddress -1 is negative"},
		{"checkpoints without a runtime", []File{{BaseFile, []byte(tm + "containerRuntimeEndpoint: ''\ncheckpoint: {enabled: true}\n")}}, nil, "checkpoint.enabled needs containerRuntimeEndpoint"},
		{"reporter access", []File{{BaseFile, []byte(tm + "api: {readOnlyUIDs: [65534], readOnlyGIDs: [998]}\ncheckpoint: {enabled: true}\n")}}, func(c ShimConfiguration) bool {
			return c.API.ReadOnlyUIDs[0] == 65534 && c.API.ReadOnlyGIDs[0] == 998 && c.Checkpoint.Enabled &&
				c.ContainerRuntimeEndpoint == "unix:///run/containerd/containerd.sock"
		}, ""},
		{"unknown plugin type", []File{{BaseFile, []byte(tm + "plugins: {acceptedVersions: {FooPlugin: [v1]}}\n")}}, nil, `unknown plugin type "FooPlugin"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Payload{Files: tt.files}.Load()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Errorf("Load = %+v", cfg)
			}
		})
	}
}

func TestDefaultsValid(t *testing.T) {
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

func FuzzPayloadLoad(f *testing.F) {
	f.Add(goodConfig(1), "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nplugins: {expected: [x]}\n")
	f.Add(badUnknownField, "")
	f.Add("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nplugins: {acceptedVersions: {CSIPlugin: []}}\n", "- a")
	f.Fuzz(func(t *testing.T, base, dropin string) {
		p := Payload{Files: []File{{BaseFile, []byte(base)}, {"10-a.conf", []byte(dropin)}}}
		cfg, err := p.Load()
		if err != nil {
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("Load returned an invalid configuration: %v", verr)
		}
	})
}

// TestOwnSoakPeriod: without an override, a payload soaks for its own
// configSoakPeriod; with one (serve's --config-soak-period), for that.
func TestOwnSoakPeriod(t *testing.T) {
	for _, tt := range []struct {
		name     string
		override time.Duration
		want     time.Duration
	}{
		{"the payload's own", 0, 30 * time.Second},
		{"the override", 2 * time.Minute, 2 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.c.opts.SoakPeriod = tt.override
			a := map[string]string{BaseFile: goodConfig(1) + "configSoakPeriod: 30s\n"}
			A := short(uidOf(t, a))
			writeSource(t, f.source, a)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			if d, ok := f.c.NextSoakDeadline(); !ok || !d.Equal(t0.Add(tt.want)) {
				t.Errorf("NextSoakDeadline = %v %v, want %v", d, ok, t0.Add(tt.want))
			}
			f.clock.Step(tt.want - time.Second)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			f.expect("soaking", A, A, "<none>", "")
			f.clock.Step(time.Second)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			f.expect("soaked", A, A, A, "")
		})
	}
}

// TestCheckRefuses: a payload the daemon's check refuses is rolled back like
// one that does not load, with the check's message.
func TestCheckRefuses(t *testing.T) {
	f := newFixture(t)
	f.c.opts.Check = func(c ShimConfiguration) error {
		if len(c.Plugins.Expected) > 0 && c.Plugins.Expected[0] == "driver-2" {
			return errors.New("rootDir \"/x\" differs from serve's --root-dir")
		}
		return nil
	}
	a := map[string]string{BaseFile: goodConfig(1)}
	A := short(uidOf(t, a))
	writeSource(t, f.source, a)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(DefaultSoakPeriod)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("A good", A, A, A, "")
	b := map[string]string{BaseFile: goodConfig(2)}
	B := short(uidOf(t, b))
	writeSource(t, f.source, b)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	st := f.expect("B refused", B, A, A, "differs from serve's --root-dir")
	if c := st.Condition(); c.Status != condition.False || c.Reason != ReasonConfigRolledBack {
		t.Errorf("condition after a refused payload = %+v", c)
	}
}

// TestEmptyBaseRefused: an empty config.yaml (what a truncated write
// leaves) is refused like a missing one: it is assigned, rolled back, and
// never active nor last-known-good, however long it stays; the
// last-known-good stays in force, across a restart too. Without a
// last-known-good, the local defaults are in force and the status says why.
func TestEmptyBaseRefused(t *testing.T) {
	for _, empty := range []struct{ name, data string }{
		{"empty", ""},
		{"whitespace", "  \n\t\n"},
		{"comments", "# config.yaml\n# being rewritten\n"},
		{"document marker", "---\n"},
	} {
		t.Run(empty.name, func(t *testing.T) {
			const none = "<none>"
			f := newFixture(t)
			e := map[string]string{BaseFile: empty.data}
			E := short(uidOf(t, e))
			writeSource(t, f.source, e)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			st := f.expect("empty first", E, none, none, "config.yaml: "+ErrEmptyBase.Error())
			if c := st.Condition(); c.Status != condition.False || c.Reason != ReasonConfigRolledBack {
				t.Errorf("condition with an empty first payload = %+v", c)
			}

			a := map[string]string{BaseFile: goodConfig(1)}
			A := short(uidOf(t, a))
			writeSource(t, f.source, a)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			f.clock.Step(DefaultSoakPeriod)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			f.expect("A soaked", A, A, A, "")

			writeSource(t, f.source, e)
			if err := f.c.Sync(); err != nil {
				t.Fatalf("an empty config is not a Sync error: %v", err)
			}
			st = f.expect("empty refused", E, A, A, "config.yaml: "+ErrEmptyBase.Error())
			if c := st.Condition(); c.Status != condition.False || c.Severity != condition.SeverityError || c.Reason != ReasonConfigRolledBack {
				t.Errorf("condition = %+v", c)
			}
			if got := f.c.Active(); !slices.Equal(got.Plugins.Expected, []string{"driver-1"}) {
				t.Errorf("Active = %+v, want A's", got)
			}
			f.clock.Step(2 * DefaultSoakPeriod)
			if err := f.c.Sync(); err != nil {
				t.Fatal(err)
			}
			f.expect("empty never becomes last-known-good", E, A, A, "empty configuration file")
			f.open()
			f.expect("restart", E, A, A, "empty configuration file")
			if got := f.c.Active(); !slices.Equal(got.Plugins.Expected, []string{"driver-1"}) {
				t.Errorf("Active after restart = %+v, want A's", got)
			}
		})
	}
}
