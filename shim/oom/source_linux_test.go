package oom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

const envHog = "NODESHIM_OOM_TEST_HOG"

func TestMain(m *testing.M) {
	// The test binary doubles as the OOM victim.
	if dir := os.Getenv(envHog); dir != "" {
		testworkload.RunHog(dir)
		fmt.Fprintln(os.Stderr, "the hog was not killed")
		os.Exit(2)
	}
	os.Exit(rtEnv.Main(m))
}

// rtEnv runs the real container runtimes of the package's tests.
var rtEnv runtimetest.Env

var discard = slog.New(slog.DiscardHandler)

// startHog starts the hog, which joins the memory cgroup named in
// dir/cgroup and allocates until it is killed, and returns its pid.
func startHog(t testing.TB, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHog+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hog: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// memoryCgroup creates a cgroup whose memory is limited to limit bytes
// where this machine's memory controller is: on cgroup2 when its root hands
// memory to its children (pure cgroup v2), else in the v1 memory hierarchy
// (hybrid cgroups).
func memoryCgroup(t *testing.T, limit int) string {
	t.Helper()
	mnt, err := cgroup.FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent, limitFile := "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	if ctl, err := os.ReadFile(filepath.Join(mnt.Path, "cgroup.subtree_control")); err == nil && slices.Contains(strings.Fields(string(ctl)), "memory") {
		parent, limitFile = mnt.Path, "memory.max"
	} else {
		testutil.RequireFile(t, filepath.Join(parent, limitFile))
	}
	memcg, err := os.MkdirTemp(parent, "nodeshim-daemon-oom-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(memcg); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove %s: %v", memcg, err)
		}
	})
	if err := os.WriteFile(filepath.Join(memcg, limitFile), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Fatal(err)
	}
	return memcg
}

// TestOOMWatcherSource makes a real OOM kill and finds it in the model. The
// memory controller, v1 or cgroup2, limits the hog; the watcher attaches to
// the best hook the kernel accepts.
func TestOOMWatcherSource(t *testing.T) {
	testutil.RequireRoot(t)
	memcg := memoryCgroup(t, 48<<20)
	m := status.New(nil)
	sourcetest.Run(t, m, &Source{Logger: discard})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool { _, ok := d.Condition(status.TypeOOMWatcher); return ok })
	if c, _ := d.Condition(status.TypeOOMWatcher); c.Status != condition.True || c.Reason != ReasonAttached || !d.OOMKills.Watching || d.OOMKills.Hook == "" {
		t.Fatalf("OOM watcher: %+v, %+v", c, d.OOMKills)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(memcg), 0o600); err != nil {
		t.Fatal(err)
	}
	hog := startHog(t, dir)
	d = sourcetest.WaitFor(t, m, func(d status.Document) bool {
		for _, k := range d.OOMKills.Recent {
			if k.TGID == uint32(hog) || (k.TGID == 0 && k.PID == uint32(hog)) {
				return true
			}
		}
		return false
	})
	if d.OOMKills.Total < 1 || len(d.OOMKills.Recent) > status.MaxOOMKills {
		t.Errorf("OOM kills: %+v", d.OOMKills)
	}
	for _, k := range d.OOMKills.Recent {
		if k.TGID == uint32(hog) && (k.Time.IsZero() || time.Since(k.Time) > time.Minute) {
			t.Errorf("kill of the hog dated %v", k.Time)
		}
	}
}

// TestOOMWatcherUnavailable: when the watcher cannot attach, the model says
// that OOM kills are not watched, and why, instead of an empty history.
func TestOOMWatcherUnavailable(t *testing.T) {
	unsupported := &capability.Report{Requirements: []capability.Result{{ID: Requirement, Verdict: capability.Unsupported,
		Evidence: "OOM watcher: no hook available: BPF_PROG_TYPE_TRACING refused"}}}
	degraded := &capability.Report{Requirements: []capability.Result{{ID: Requirement, Verdict: capability.Degraded, Evidence: "tracepoint"}}}
	tests := []struct {
		name       string
		report     *capability.Report
		wantStatus string
		wantReason string
		wantSev    condition.Severity
		wantMsg    string
	}{
		{"the report says the kernel cannot", unsupported, "False", ReasonNotSupportedByKernel, condition.SeverityWarning, "BPF_PROG_TYPE_TRACING refused"},
		{"no report", nil, "Unknown", ReasonAttachFailed, "", "nowhere"},
		{"the report says it should work", degraded, "Unknown", ReasonAttachFailed, "", "nowhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := status.New(nil)
			var verdict *capability.Result
			if tt.report != nil {
				if res, ok := tt.report.Result(Requirement); ok {
					verdict = &res
				}
			}
			if err := (&Source{Hooks: []bpf.OOMHook{"nowhere"}, Logger: discard, Verdict: verdict}).Run(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			d := m.Snapshot()
			c, _ := d.Condition(status.TypeOOMWatcher)
			if string(c.Status) != tt.wantStatus || c.Reason != tt.wantReason || c.Severity != tt.wantSev || !strings.Contains(c.Message, tt.wantMsg) {
				t.Errorf("%s = %+v, want %s %s %q", status.TypeOOMWatcher, c, tt.wantStatus, tt.wantReason, tt.wantMsg)
			}
			if d.OOMKills.Watching || d.OOMKills.Reason == "" || d.OOMKills.Recent == nil {
				t.Errorf("oomKills = %+v, want not watching, with a reason and an empty list", d.OOMKills)
			}
			// Ready is never True with the watcher missing.
			if r, _ := d.Condition(condition.TypeReady); r.Status == condition.True {
				t.Errorf("Ready = %+v", r)
			}
		})
	}
}
