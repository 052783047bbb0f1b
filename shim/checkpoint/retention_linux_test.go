package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/metrics"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// counterService is a Service whose one container is a counter process
// (checkpointed as a plain process tree by the real CRIU) and whose
// archives go to a temp dir under policy p.
func counterService(t *testing.T, p retention.Policy) (*Service, *status.Model, *prometheus.Registry, string, int, string) {
	t.Helper()
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 4)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	m := status.New(nil)
	reg := prometheus.NewRegistry()
	met := metrics.NewCheckpoints(reg)
	s := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: "unix:///run/test.sock", Retention: p}
		},
		Dial: func(string) (cri.Resolver, func() error, error) {
			return resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
				return cri.Process{ContainerID: "c1", PID: pid}, nil
			}), func() error { return nil }, nil
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		Parallel: 2,
		Model:    m,
		Metrics:  met,
	})
	t.Cleanup(func() { s.Close() })
	return s, m, reg, dir, pid, wdir
}

// removedMetric sums nodeshim_checkpoint_archives_removed_total.
func removedMetric(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "nodeshim_checkpoint_archives_removed_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestRetentionAfterCheckpoints: with maxPerContainer 2, five
// checkpoints leave the newest two; the removals are counted and the
// status document shows what is left.
func TestRetentionAfterCheckpoints(t *testing.T) {
	s, m, reg, dir, _, _ := counterService(t, retention.Policy{MaxPerContainer: 2})
	var paths []string
	for range 5 {
		res, err := s.Checkpoint(t.Context(), web, 0)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Base(res.Path))
	}
	left, err := archivesIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{left[0].Name, left[1].Name}; len(left) != 2 || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(paths[3:]))) {
		t.Errorf("left %+v, want %v", left, paths[3:])
	}
	if n := removedMetric(t, reg); n != 3 {
		t.Errorf("removed metric %v, want 3", n)
	}
	a := m.Snapshot().CheckpointArchives
	if a == nil || len(a.Containers) != 1 || a.Containers[0].Count != 2 || a.Containers[0].Oldest != paths[3] || a.RemovedTotal != 3 {
		t.Errorf("status %+v, want 2 archives of %s, oldest %s, 3 removed", a, web, paths[3])
	}
}

// TestConcurrentCheckpointsOfOneContainer: of checkpoints of one
// container requested at once, those that overlap fail with ErrBusy, the
// rest succeed, and retention leaves the limit.
func TestConcurrentCheckpointsOfOneContainer(t *testing.T) {
	s, _, _, dir, pid, wdir := counterService(t, retention.Policy{MaxPerContainer: 1})
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Checkpoint(context.Background(), web, 0)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrBusy):
			t.Errorf("concurrent checkpoint: %v, want success or ErrBusy", err)
		}
	}
	if ok == 0 {
		t.Error("no checkpoint succeeded")
	}
	left, err := archivesIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 {
		t.Errorf("%d archives left, want 1: %+v", len(left), left)
	}
	testworkload.AssertRunning(t, pid, wdir)
}

// TestRefusedBeforeFreezing: a checkpoint whose estimated archive exceeds
// maxBytes is refused with both figures, and the counter was never frozen
// (no CRIU run: no dump statistics, no archive).
func TestRefusedBeforeFreezing(t *testing.T) {
	s, m, _, dir, pid, wdir := counterService(t, retention.Policy{MaxBytes: 4096})
	_, err := s.Checkpoint(t.Context(), web, 0)
	if !errors.Is(err, ErrNoRoom) {
		t.Fatalf("err %v, want ErrNoRoom", err)
	}
	if !strings.Contains(err.Error(), "estimated archive size") || !strings.Contains(err.Error(), "maxBytes 4096 bytes") {
		t.Errorf("error does not name the estimate and the budget: %v", err)
	}
	if left, _ := archivesIn(dir); len(left) != 0 {
		t.Errorf("archives %+v", left)
	}
	h := m.Snapshot().Checkpoints
	if len(h) != 1 || h[0].Result != status.CheckpointFailed || h[0].FrozenSeconds != 0 {
		t.Errorf("history %+v, want one failure never frozen", h)
	}
	testworkload.AssertRunning(t, pid, wdir)
}

// TestBusyContainerArchivesKept: ApplyRetention leaves the archives of a
// container being checkpointed alone.
func TestBusyContainerArchivesKept(t *testing.T) {
	dir := t.TempDir()
	for _, ts := range []string{"2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"} {
		if err := os.WriteFile(filepath.Join(dir, criu.ArchiveName(web, mustTime(t, ts), 0)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Settings: func() Settings {
		return Settings{Dir: dir, Retention: retention.Policy{MaxPerContainer: 1}}
	}, Model: status.New(nil)})
	defer s.Close()
	s.busy[web] = true
	if res, err := s.ApplyRetention(); err != nil || len(res.Removed) != 0 {
		t.Errorf("busy: removed %+v, %v", res.Removed, err)
	}
	delete(s.busy, web)
	if res, err := s.ApplyRetention(); err != nil || len(res.Removed) != 1 {
		t.Errorf("free: removed %+v, %v; want one", res.Removed, err)
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// archivesIn is the checkpoint archives of dir, as retention lists them.
func archivesIn(dir string) ([]retention.Archive, error) {
	l, err := retention.Scan(dir, workentry.Owners{})
	return l.Archives, err
}
