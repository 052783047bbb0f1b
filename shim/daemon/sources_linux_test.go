package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/source"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

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
		d := startDaemonWith(t, func(o *Options) { o.collectReport = collect })
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
			o.collectReport = func(context.Context) (*capability.Report, error) { return nil, errors.New("read /proc/version: boom") }
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
		o.extraSources = []source.Source{
			source.Func{SourceName: "boom", F: func(context.Context, *status.Model) error { panic("index out of range") }},
			source.Func{SourceName: "broken", F: func(context.Context, *status.Model) error { return errors.New("read /sys/x: no such file") }},
			source.Func{SourceName: "finished", F: func(context.Context, *status.Model) error { return nil }},
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
