package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/internal/testutil"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

var discard = slog.New(slog.DiscardHandler)

// waitModel polls the model until ok holds; go test's -timeout bounds it.
func waitModel(t *testing.T, m *status.Model, ok func(status.Document) bool) status.Document {
	t.Helper()
	for {
		if d := m.Snapshot(); ok(d) {
			return d
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSource runs f on its own goroutine until the test's cleanup, which
// cancels it and waits for it to return.
func runSource(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source returned %v", err)
		}
	})
}

// TestOOMWatcherSource makes a real OOM kill and finds it in the model. On
// this host the cgroup v1 memory controller limits the hog (hybrid
// cgroups); the watcher attaches to the best hook the kernel accepts.
func TestOOMWatcherSource(t *testing.T) {
	testutil.RequireRoot(t)
	const memcgV1 = "/sys/fs/cgroup/memory"
	testutil.RequireFile(t, filepath.Join(memcgV1, "memory.limit_in_bytes"))
	m := status.New(nil)
	runSource(t, func(ctx context.Context) error { return runOOM(ctx, m, nil, discard) })
	d := waitModel(t, m, func(d status.Document) bool { _, ok := cond(d, status.TypeOOMWatcher); return ok })
	if c, _ := cond(d, status.TypeOOMWatcher); c.Status != condition.True || c.Reason != ReasonAttached || !d.OOMKills.Watching || d.OOMKills.Hook == "" {
		t.Fatalf("OOM watcher: %+v, %+v", c, d.OOMKills)
	}

	memcg, err := os.MkdirTemp(memcgV1, "nodeshim-daemon-oom-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(memcg); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove %s: %v", memcg, err)
		}
	})
	if err := os.WriteFile(filepath.Join(memcg, "memory.limit_in_bytes"), []byte(strconv.Itoa(48<<20)), 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(memcg), 0o600); err != nil {
		t.Fatal(err)
	}
	hog := startHog(t, dir)
	d = waitModel(t, m, func(d status.Document) bool {
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
	unsupported := &capability.Report{Requirements: []capability.Result{{ID: oomRequirement, Verdict: capability.Unsupported,
		Evidence: "OOM watcher: no hook available: BPF_PROG_TYPE_TRACING refused"}}}
	degraded := &capability.Report{Requirements: []capability.Result{{ID: oomRequirement, Verdict: capability.Degraded, Evidence: "tracepoint"}}}
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
			if tt.report != nil {
				m.SetReport(tt.report, nil)
			}
			if err := runOOM(context.Background(), m, []bpf.OOMHook{"nowhere"}, discard); err != nil {
				t.Fatal(err)
			}
			d := m.Snapshot()
			c, _ := cond(d, status.TypeOOMWatcher)
			if string(c.Status) != tt.wantStatus || c.Reason != tt.wantReason || c.Severity != tt.wantSev || !strings.Contains(c.Message, tt.wantMsg) {
				t.Errorf("%s = %+v, want %s %s %q", status.TypeOOMWatcher, c, tt.wantStatus, tt.wantReason, tt.wantMsg)
			}
			if d.OOMKills.Watching || d.OOMKills.Reason == "" || d.OOMKills.Recent == nil {
				t.Errorf("oomKills = %+v, want not watching, with a reason and an empty list", d.OOMKills)
			}
			// Ready is never True with the watcher missing.
			if r, _ := cond(d, condition.TypeReady); r.Status == condition.True {
				t.Errorf("Ready = %+v", r)
			}
		})
	}
}

// TestPressureSource runs the pressure monitor on this host: kubelet's
// pressure conditions (labelled with kubelet's polarity), the PSI views,
// and the live readings arrive in the model.
func TestPressureSource(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/proc/pressure/memory")
	m := status.New(nil)
	kubelet := t.TempDir() // nodefs: an existing directory
	runSource(t, func(ctx context.Context) error {
		runPressure(ctx, m, pressureOptions{ProcRoot: "/proc", KubeletRoot: kubelet, Interval: 50 * time.Millisecond, Logger: discard})
		return nil
	})
	d := waitModel(t, m, func(d status.Document) bool {
		_, mem := cond(d, "MemoryPressure")
		_, psi := cond(d, "MemoryContentionFree")
		return mem && psi && d.Pressure != nil
	})
	c, _ := cond(d, status.TypePressureMonitor)
	if c.Status != condition.True || c.Reason != ReasonWatching || !strings.Contains(c.Message, "memory.pressure") {
		t.Errorf("%s = %+v", status.TypePressureMonitor, c)
	}
	for _, typ := range []string{"MemoryPressure", "DiskPressure", "PIDPressure"} {
		c, ok := cond(d, typ)
		if !ok || c.Polarity != condition.PolarityKubelet || c.Status == condition.Unknown {
			t.Errorf("%s = %+v, want a known status with kubelet's polarity", typ, c)
		}
	}
	for _, typ := range []string{"MemoryContentionFree", "IOContentionFree"} {
		if c, ok := cond(d, typ); !ok || c.Polarity != "" || c.Status == condition.Unknown {
			t.Errorf("%s = %+v, want a known positive-polarity view", typ, c)
		}
	}
	sig := map[string]status.Signal{}
	for _, s := range d.Pressure.Signals {
		sig[s.Name] = s
	}
	if s := sig["memory.available"]; s.Unknown != "" || s.Capacity == 0 || s.Available > s.Capacity {
		t.Errorf("memory.available = %+v", s)
	}
	if s := sig["allocatableMemory.available"]; s.Unknown == "" {
		t.Errorf("allocatableMemory.available without kubepods = %+v, want unknown", s)
	}
	var memPSI *status.PSI
	for i := range d.Pressure.PSI {
		if d.Pressure.PSI[i].Resource == "memory" {
			memPSI = &d.Pressure.PSI[i]
		}
	}
	if memPSI == nil || memPSI.Unknown != "" || memPSI.Full == nil {
		t.Errorf("memory PSI = %+v", memPSI)
	}
	if len(d.Pressure.Watchers) == 0 {
		t.Error("no pressure watchers in the document")
	}
	// Readings are live: a later evaluation replaces them.
	at := d.Pressure.ObservedAt
	waitModel(t, m, func(d status.Document) bool { return d.Pressure.ObservedAt.After(at) })
}

// TestPressureSourceFails: without a readable mount table the monitor
// cannot start; the model says so and the pressure conditions are Unknown,
// and it is retried.
func TestPressureSourceFails(t *testing.T) {
	m := status.New(nil)
	logs := &testutil.Buffer{}
	runSource(t, func(ctx context.Context) error {
		runPressure(ctx, m, pressureOptions{ProcRoot: t.TempDir(), KubeletRoot: t.TempDir(), Retry: time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		return nil
	})
	d := waitModel(t, m, func(d status.Document) bool { _, ok := cond(d, status.TypePressureMonitor); return ok })
	c, _ := cond(d, status.TypePressureMonitor)
	if c.Status != condition.False || c.Reason != ReasonMonitorFailed || !strings.Contains(c.Message, "mountinfo") {
		t.Errorf("%s = %+v", status.TypePressureMonitor, c)
	}
	for _, typ := range []string{"MemoryPressure", "DiskPressure", "PIDPressure", "MemoryContentionFree", "IOContentionFree"} {
		if c, _ := cond(d, typ); c.Status != condition.Unknown || c.Reason != ReasonPressureMonitorDown {
			t.Errorf("%s = %+v, want Unknown %s", typ, c, ReasonPressureMonitorDown)
		}
	}
	for strings.Count(logs.String(), "pressure monitor failed") < 2 {
		time.Sleep(time.Millisecond) // retried; go test's -timeout bounds it
	}
}

// TestReport: the report injected by the command is collected at start,
// printed before the transitions, summarised in /status, served whole by
// GET /report, and collected again on demand at most once per interval;
// a failing collection is a condition, not a crash.
func TestReport(t *testing.T) {
	testutil.RequireRoot(t)
	calls := 0
	collect := func(ctx context.Context) (*capability.Report, error) {
		calls++
		h := kernel.DefaultHost()
		return capability.Collector{}.Collect(ctx, h, kernel.Catalogue())
	}
	t.Run("collected", func(t *testing.T) {
		d := startDaemonWith(t, func(o *Options) { o.Report = collect })
		doc := d.status(t)
		c, _ := cond(doc, status.TypeKernelReport)
		if c.Status != condition.True || doc.Report == nil || doc.Report.Summary.Total != len(kernel.Catalogue()) || doc.Report.KernelRelease == "" {
			t.Fatalf("report in status: %+v, %+v", c, doc.Report)
		}
		out := d.out.String()
		if !strings.HasPrefix(out, "KERNEL ") || strings.Index(out, "KernelReportSucceeded True") < strings.Index(out, "requirements:") {
			t.Errorf("out does not start with the report followed by the transitions:\n%s", out)
		}
		get := func(path string) capability.Report {
			code, body := d.do(t, "GET", path)
			var rep capability.Report
			if code != 200 || json.Unmarshal([]byte(body), &rep) != nil {
				t.Fatalf("%s = %d %s", path, code, body)
			}
			return rep
		}
		first := get("/report")
		if !first.GeneratedAt.Equal(doc.Report.GeneratedAt) || first.Kind != capability.ReportKind {
			t.Errorf("/report generated at %v, status says %v", first.GeneratedAt, doc.Report.GeneratedAt)
		}
		fresh := get("/report?refresh=true")
		if !fresh.GeneratedAt.After(first.GeneratedAt) || calls != 2 {
			t.Errorf("refresh: generated at %v after %v, %d collections", fresh.GeneratedAt, first.GeneratedAt, calls)
		}
		again := get("/report?refresh=true")
		if !again.GeneratedAt.Equal(fresh.GeneratedAt) || calls != 2 {
			t.Errorf("a second refresh within the interval collected again (%d collections)", calls)
		}
	})
	t.Run("failing", func(t *testing.T) {
		d := startDaemonWith(t, func(o *Options) {
			o.Report = func(context.Context) (*capability.Report, error) { return nil, errors.New("read /proc/version: boom") }
		})
		doc := d.status(t)
		if c, _ := cond(doc, status.TypeKernelReport); c.Status != condition.False || c.Reason != "CollectFailed" || !strings.Contains(c.Message, "boom") {
			t.Errorf("%s = %+v", status.TypeKernelReport, c)
		}
		if code, _ := d.do(t, "GET", "/report"); code != 503 {
			t.Errorf("/report without a report = %d, want 503", code)
		}
	})
}

// TestSourceFailures: a source that fails or panics turns ShimHealthy
// False naming it, and the daemon goes on serving; a source that returns
// on its own is Done and no failure.
func TestSourceFailures(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDaemonWith(t, func(o *Options) {
		o.extraSources = map[string]func(context.Context) error{
			"boom":     func(context.Context) error { panic("index out of range") },
			"broken":   func(context.Context) error { return errors.New("read /sys/x: no such file") },
			"finished": func(context.Context) error { return nil },
		}
	})
	doc := d.wait(t, func(doc status.Document) bool {
		n := 0
		for _, s := range doc.Shim.Sources {
			if s.State != status.SourceRunning && (s.Name == "boom" || s.Name == "broken" || s.Name == "finished") {
				n++
			}
		}
		return n == 3
	})
	states := map[string]status.SourceState{}
	for _, s := range doc.Shim.Sources {
		states[s.Name] = s
	}
	tests := []struct {
		name, state, err string
	}{
		{"boom", status.SourceFailed, "panic: index out of range"},
		{"broken", status.SourceFailed, "no such file"},
		{"finished", status.SourceDone, ""},
		{"pressure", status.SourceRunning, ""},
		{"config", status.SourceRunning, ""},
	}
	for _, tt := range tests {
		if s := states[tt.name]; s.State != tt.state || !strings.Contains(s.Error, tt.err) {
			t.Errorf("source %s = %+v, want %s %q", tt.name, s, tt.state, tt.err)
		}
	}
	c, _ := cond(doc, status.TypeShimHealthy)
	if c.Status != condition.False || c.Severity != condition.SeverityError || !strings.Contains(c.Message, "source boom failed: panic") ||
		!strings.Contains(c.Message, "source broken failed") || strings.Contains(c.Message, "goroutine") {
		t.Errorf("%s = %+v", status.TypeShimHealthy, c)
	}
	if doc.Shim.PID != os.Getpid() || doc.Shim.StartedAt.IsZero() {
		t.Errorf("shim = %+v", doc.Shim)
	}
	if code, _ := d.do(t, "GET", "/healthz"); code != 200 {
		t.Errorf("/healthz after source failures = %d", code)
	}
	if !strings.Contains(d.logs.String(), "source panicked") {
		t.Error("the panic was not logged with its stack")
	}
}
