package retention

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// TestWorkingEntriesCountAgainstMaxBytes: a work entry in use (this
// process's, made now) is kept and its bytes count against maxBytes, so
// that the oldest archive goes; a dead pid's entry is removed.
func TestWorkingEntriesCountAgainstMaxBytes(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{
		"checkpoint-web-0_default-app-2026-01-01T00:00:00Z.tar",
		"checkpoint-web-0_default-app-2026-01-02T00:00:00Z.tar",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 1000+i), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mine := filepath.Join(dir, workentry.WorkPrefix+strconv.Itoa(os.Getpid())+"-00aa")
	if err := os.MkdirAll(filepath.Join(mine, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "checkpoint", "pages-1.img"), make([]byte, 1500), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := deadPID(t)
	gone := workentry.TempPrefix + strconv.Itoa(dead) + "-00bb" + workentry.TempSuffix
	if err := os.WriteFile(filepath.Join(dir, gone), make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Apply(dir, Policy{MaxBytes: 2600}, t0, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 1 || res.Removed[0].Reason != ReasonMaxBytes || res.Removed[0].Size != 1000 {
		t.Errorf("removed %+v, want the oldest archive for maxBytes", res.Removed)
	}
	if len(res.Working) != 1 || res.Working[0].Size != 1500 || !res.Working[0].InUse {
		t.Errorf("working %+v, want this process's entry of 1500 bytes", res.Working)
	}
	if len(res.Leftovers) != 1 || res.Leftovers[0].Name != gone {
		t.Errorf("leftovers %+v, want %s", res.Leftovers, gone)
	}
	if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v, want removed", gone, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("the entry in use: %v", err)
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

// TestLeftoverNames: the work entries criu.Checkpoint makes are the ones
// workentry.Parse knows, named with this process's pid, and in use while
// the checkpoint runs.
func TestLeftoverNames(t *testing.T) {
	testutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, _ := testworkload.Start(t, "count", 64)
	target, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoints")
	var mu sync.Mutex
	var seen []Leftover
	_, err = criu.Checkpoint(t.Context(), target, criu.Options{Binary: bin, ArchiveDir: dir, ProgressInterval: time.Millisecond,
		Progress: func(criu.Progress) {
			l, err := Scan(dir, workentry.Owners{})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			seen = append(seen, l.Leftovers...)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	work := false
	for _, l := range seen {
		work = work || strings.HasPrefix(l.Name, workentry.WorkPrefix)
		if l.PID != os.Getpid() || !l.InUse {
			t.Errorf("work entry %+v, want pid %d in use", l, os.Getpid())
		}
	}
	if !work {
		t.Errorf("no work directory seen during the checkpoint: %+v", seen)
	}
}
