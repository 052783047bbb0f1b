package criu

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// TestEstimateSize: a counter touching 32 MiB is estimated at its
// resident memory at least, and a writable layer adds its files.
func TestEstimateSize(t *testing.T) {
	testutil.RequireRoot(t)
	const mib = 32
	pid, _ := testworkload.Start(t, "count", mib)
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	est, err := EstimateSize("/proc", tg)
	if err != nil {
		t.Fatal(err)
	}
	if r := rss(t, pid); est < r || est < mib<<20 {
		t.Errorf("estimate %d bytes, below the counter's resident %d or its %d MiB", est, r, mib)
	}
	upper := t.TempDir()
	if err := os.WriteFile(filepath.Join(upper, "data"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	tg.Layer.Upper = upper
	withLayer, err := EstimateSize("/proc", tg)
	if err != nil {
		t.Fatal(err)
	}
	if d := withLayer - est; d < 1<<20 || d > 8<<20 {
		t.Errorf("the 1 MiB writable layer added %d bytes", d)
	}
	if _, err := EstimateSize("/proc", Target{Pid: 1 << 30}); err == nil {
		t.Error("no error for a missing process")
	}
}
