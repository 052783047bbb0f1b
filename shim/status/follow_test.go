package status_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/plugin"
	"github.com/nodeshim/nodeshim/shim/status"
)

// waitReady blocks until Ready satisfies ok; go test's -timeout bounds it.
func waitReady(t *testing.T, m *status.Model, ok func(condition.Condition) bool) condition.Condition {
	t.Helper()
	trans, cancel := m.Subscribe(64)
	defer cancel()
	for {
		d := m.Snapshot()
		if r := d.Conditions[len(d.Conditions)-1]; ok(r) {
			return r
		}
		<-trans
	}
}

// TestFollowSources wires the configuration lifecycle and the plugin
// watcher into the model as nodeshim serve does, and checks that Ready
// follows a bad configuration and its repair.
func TestFollowSources(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	source := filepath.Join(dir, "source")
	cfg, err := config.Open(config.Options{StateDir: filepath.Join(dir, "state"), SourceDir: source, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	plugins := plugin.New(plugin.Options{KubeletRootDir: filepath.Join(dir, "kubelet"), Logger: quiet})
	m := status.New(nil)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { cfg.Run(ctx) })
	run(func() { plugins.Run(ctx) })
	run(func() {
		m.Follow(ctx, cfg.Changed, func() []condition.Condition { return []condition.Condition{cfg.Status().Condition()} })
	})
	run(func() {
		m.Follow(ctx, plugins.Changed, func() []condition.Condition { return []condition.Condition{plugins.Condition("PluginsReady")} })
	})
	defer func() { cancel(); wg.Wait() }()

	// No source: local defaults, no plugins: Ready.
	waitReady(t, m, func(c condition.Condition) bool { return c.Status == condition.True })

	write := func(body string) {
		if err := os.MkdirAll(source, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(source, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(source, config.BaseFile)); err != nil {
			t.Fatal(err)
		}
	}
	write("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nbogus: 1\n")
	r := waitReady(t, m, func(c condition.Condition) bool {
		return c.Status == condition.False && c.Severity == condition.SeverityError
	})
	if r.Reason != config.ReasonConfigRolledBack {
		t.Errorf("Ready after a bad config = %+v", r)
	}
	write("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n")
	// A payload on trial is normal operation: ConfigHealthy says so with
	// its step and deadline, and the node stays Ready.
	r = waitReady(t, m, func(c condition.Condition) bool { return c.Status == condition.True })
	var ch condition.Condition
	for _, c := range m.Snapshot().Conditions {
		if c.Type == config.ConditionConfigHealthy {
			ch = c
		}
	}
	if ch.Status != condition.True || ch.Reason != config.ReasonConfigTrial || !strings.Contains(ch.Message, "2 of 3") ||
		!strings.Contains(ch.Message, "on trial until") {
		t.Errorf("ConfigHealthy during the trial = %+v (Ready %+v)", ch, r)
	}
}
