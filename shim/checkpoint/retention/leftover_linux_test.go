package retention

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

func TestParseLeftover(t *testing.T) {
	tests := []struct {
		name string
		pid  int
		ok   bool
	}{
		{".nodeshim-work-4242-0123456789abcdef", 4242, true},
		{".nodeshim-tmp-1-00ff.tar", 1, true},
		{".nodeshim-tmp-1-00ff", 0, false},
		{".nodeshim-work-0-00ff", 0, false},
		{".nodeshim-work-042-00ff", 0, false},
		{".nodeshim-work--1-00ff", 0, false},
		{".nodeshim-work-12-", 0, false},
		{".nodeshim-work-12-xyz", 0, false},
		{".nodeshim-work-99999999999-00", 0, false},
		{".nodeshim-trash", 0, false},
		{"checkpoint-web-0_default-app-2026-11-23T12:00:00Z.tar", 0, false},
		{".nodeshim-tmp-.tar", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid, ok := ParseLeftover(tt.name)
			if pid != tt.pid || ok != tt.ok {
				t.Errorf("ParseLeftover = %d, %v; want %d, %v", pid, ok, tt.pid, tt.ok)
			}
		})
	}
}

func FuzzParseLeftover(f *testing.F) {
	for _, s := range []string{".nodeshim-work-4242-0123456789abcdef", ".nodeshim-tmp-1-00ff.tar", ".nodeshim-work-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		pid, ok := ParseLeftover(name)
		if !ok {
			return
		}
		if pid <= 0 || !strings.Contains(name, "-"+strconv.Itoa(pid)+"-") {
			t.Errorf("%q: pid %d", name, pid)
		}
		if !strings.HasPrefix(name, WorkPrefix) && !strings.HasPrefix(name, TempPrefix) {
			t.Errorf("%q accepted without a work prefix", name)
		}
	})
}

// fakeProc writes a procfs at root with the given uptime and, per pid, a
// stat line with that start time in clock ticks.
func fakeProc(t *testing.T, uptime string, starts map[int]uint64) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "uptime"), []byte(uptime+" 1.00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for pid, start := range starts {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// Fields 3..22 after "(comm)": state, ppid, ..., starttime.
		line := fmt.Sprintf("%d (nodeshim) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestOwnersJudge: a work entry is in use while a lock of its pid is held
// or a process of its pid that started before it runs; the entry of a
// dead pid, and of a pid that a later process took (a restarted nodeshim
// as pid 1 of its container), is left over.
func TestOwnersJudge(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	// Uptime 1000 s, so the entries, made now, were made 1000 s after
	// boot.
	proc := fakeProc(t, "1000.00", map[int]uint64{
		1:  500 * userHZ,  // started at 500 s: before the entries
		2:  1500 * userHZ, // started at 1500 s: after them, a reused pid
		3:  1001 * userHZ, // within the slack of the clocks' rounding
		40: 1500 * userHZ, // a reused pid, but it holds a lock
	})
	held := map[int]string{40: "/locks/pid-7.lock"}
	tests := []struct {
		name  string
		inUse bool
		why   string
	}{
		{WorkPrefix + "1-aa", true, "pid 1 runs"},
		{WorkPrefix + "2-aa", false, "started 8m20s after"},
		{WorkPrefix + "3-aa", true, "pid 3 runs"},
		{TempPrefix + "5-aa" + TempSuffix, false, "pid 5 is gone"},
		{WorkPrefix + "40-aa", true, "holds /locks/pid-7.lock"},
	}
	o := Owners{ProcRoot: proc, Now: func() time.Time { return now }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			born, err := birth(p)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := ParseLeftover(tt.name)
			inUse, why := o.judge(pid, born, held)
			if inUse != tt.inUse || !strings.Contains(why, tt.why) {
				t.Errorf("judge = %v %q, want %v %q", inUse, why, tt.inUse, tt.why)
			}
		})
	}
}

// TestLockTarget: a second lock of one pid fails with ErrLocked (class
// errdefs.ErrBusy) naming the holder; HeldLocks sees the holder; Unlock
// removes the file and lets the next one in.
func TestLockTarget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), LockDirName)
	l, err := LockTarget(dir, 4242)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockTarget(dir, 4242)
	if !errors.Is(err, ErrLocked) || !errors.Is(err, errdefs.ErrBusy) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())+" holds") {
		t.Errorf("second lock: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	other, err := LockTarget(dir, 4243)
	if err != nil {
		t.Fatalf("lock of another pid: %v", err)
	}
	held, err := HeldLocks(dir)
	if err != nil || len(held) != 1 || held[os.Getpid()] == "" {
		t.Errorf("HeldLocks = %v, %v; want pid %d", held, err, os.Getpid())
	}
	for _, l := range []*TargetLock{l, other} {
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("lock files left: %v", ents)
	}
	if held, err := HeldLocks(dir); err != nil || len(held) != 0 {
		t.Errorf("HeldLocks after unlock = %v, %v", held, err)
	}
	l, err = LockTarget(dir, 4242)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestHeldLocksTurnsNoOneAway: asking which locks are held, over and
// over, never makes a checkpoint taking a free lock fail, and locks taken
// and given back by many at once never let two in.
func TestHeldLocksTurnsNoOneAway(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := HeldLocks(dir); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 300 {
		l, err := LockTarget(dir, 7)
		if err != nil {
			t.Fatalf("lock %d of a free target: %v", i, err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()

	var mu sync.Mutex
	inside, most := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				l, err := LockTarget(dir, 8)
				if errors.Is(err, ErrLocked) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Unlock(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Errorf("%d holders at once", most)
	}
}

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
	mine := filepath.Join(dir, WorkPrefix+strconv.Itoa(os.Getpid())+"-00aa")
	if err := os.MkdirAll(filepath.Join(mine, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "checkpoint", "pages-1.img"), make([]byte, 1500), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := deadPID(t)
	gone := TempPrefix + strconv.Itoa(dead) + "-00bb" + TempSuffix
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
// ParseLeftover knows, named with this process's pid, and in use while
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
			l, err := Scan(dir, Owners{})
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
		work = work || strings.HasPrefix(l.Name, WorkPrefix)
		if l.PID != os.Getpid() || !l.InUse {
			t.Errorf("work entry %+v, want pid %d in use", l, os.Getpid())
		}
	}
	if !work {
		t.Errorf("no work directory seen during the checkpoint: %+v", seen)
	}
}
