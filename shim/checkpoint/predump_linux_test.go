package checkpoint

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// TestMaxPreDumpRounds: the configuration's bound is CRIU's.
func TestMaxPreDumpRounds(t *testing.T) {
	if config.MaxPreDumpRounds != criu.MaxPreDump {
		t.Fatalf("config.MaxPreDumpRounds %d, criu.MaxPreDump %d", config.MaxPreDumpRounds, criu.MaxPreDump)
	}
}

// TestPreDumpPolicy: with checkpoint.preDumpRounds 2, a checkpoint runs
// two pre-dump rounds where the kernel tracks dirty memory, and none
// elsewhere (this host's kernel has no CONFIG_MEM_SOFT_DIRTY), where it
// still succeeds and its record says why, naming CRIU's feature; the
// workload counts on either way.
func TestPreDumpPolicy(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	supported := criu.CheckPreDump(t.Context(), bin)
	if supported != nil && !errors.Is(supported, criu.ErrPreDumpUnsupported) {
		t.Fatalf("criu check --feature mem_dirty_track: %v", supported)
	}
	pid, wdir := testworkload.Start(t, "count", 4)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	m := status.New(nil)
	s := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: "unix:///run/test.sock", PreDump: 2}
		},
		Dial: func(string) (cri.Resolver, func() error, error) {
			return resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
				return cri.Process{ContainerID: "c1", PID: pid}, nil
			}), func() error { return nil }, nil
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		Model:    m,
	})
	t.Cleanup(func() { s.Close() })
	ref := criu.ContainerRef{Namespace: "default", Pod: "web", Container: "app"}
	for i := range 2 {
		if _, err := s.Checkpoint(t.Context(), ref, 0); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	h := m.Snapshot().Checkpoints
	if len(h) != 2 {
		t.Fatalf("%d records; want 2", len(h))
	}
	for _, rec := range h {
		if rec.Result != status.CheckpointSucceeded {
			t.Fatalf("record %+v; want a success", rec)
		}
		if supported == nil {
			if rec.PreDumpRounds != 2 || rec.PreDumpSkipped != "" {
				t.Fatalf("record %+v; want 2 pre-dump rounds", rec)
			}
			continue
		}
		if rec.PreDumpRounds != 0 || !strings.Contains(rec.PreDumpSkipped, criu.MemDirtyTrack) {
			t.Fatalf("record %+v; want no rounds and the reason naming %s", rec, criu.MemDirtyTrack)
		}
	}
	t.Logf("pre-dump on this kernel: %v; record: %+v", supported, h[1])
	testworkload.AssertRunning(t, pid, wdir)
}
