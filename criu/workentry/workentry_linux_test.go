package workentry

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestParse(t *testing.T) {
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
			pid, ok := Parse(tt.name)
			if pid != tt.pid || ok != tt.ok {
				t.Errorf("Parse = %d, %v; want %d, %v", pid, ok, tt.pid, tt.ok)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{".nodeshim-work-4242-0123456789abcdef", ".nodeshim-tmp-1-00ff.tar", ".nodeshim-work-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		pid, ok := Parse(name)
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
			born, err := Birth(p)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := Parse(tt.name)
			inUse, why := o.Judge(pid, born, held)
			if inUse != tt.inUse || !strings.Contains(why, tt.why) {
				t.Errorf("Judge = %v %q, want %v %q", inUse, why, tt.inUse, tt.why)
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

// TestSweep: Sweep removes the entries of dead pids and of pids a later
// process took, and keeps those of a live maker and of a lock holder,
// whatever its pid is in this namespace (a nodeshim in a container as
// seen from the host).
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	proc := fakeProc(t, "1000.00", map[int]uint64{
		1:  500 * userHZ,  // started before the entries
		2:  1500 * userHZ, // a reused pid
		40: 1500 * userHZ, // a reused pid, but it holds a lock
	})
	locks := filepath.Join(t.TempDir(), LockDirName)
	l, err := LockTarget(locks, 4242)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	self := os.Getpid()
	names := map[string]bool{ // name: kept
		WorkPrefix + "1-aa":                     true,
		WorkPrefix + "2-aa":                     false,
		TempPrefix + "5-aa" + TempSuffix:        false,
		WorkPrefix + strconv.Itoa(self) + "-aa": true,
		"checkpoint-web-0_default-app-2026.tar": true,
		TempPrefix + "notapid-aa" + TempSuffix:  true,
	}
	for name := range names {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// The lock's holder is this process: give its pid the fake start
	// time of a reused pid, so that only the lock keeps its entry.
	if err := os.Rename(filepath.Join(proc, "40"), filepath.Join(proc, strconv.Itoa(self))); err != nil {
		t.Fatal(err)
	}
	removed := Sweep(dir, Owners{ProcRoot: proc, LockDir: locks, Now: func() time.Time { return now }})
	for name, kept := range names {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != kept {
			t.Errorf("%s: kept %v, want %v (removed %v)", name, got, kept, removed)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want 2 entries", removed)
	}
}

// TestSweepOrphanSignatures: a signature file beside no archive is
// removed once it is older than OrphanGrace; one beside its archive, a
// fresh one (an archive may be copied in after it), and a directory
// named like one stay.
func TestSweepOrphanSignatures(t *testing.T) {
	if SignatureSuffix != seal.SignatureSuffix {
		t.Fatalf("SignatureSuffix %q, seal's %q", SignatureSuffix, seal.SignatureSuffix)
	}
	tests := []struct {
		name    string
		archive bool // the archive is there
		dir     bool // the .sig is a directory
		after   time.Duration
		kept    bool
	}{
		{"beside its archive", true, false, 2 * OrphanGrace, true},
		{"orphan, fresh", false, false, 0, true},
		{"orphan, older than the grace", false, false, OrphanGrace + time.Second, false},
		{"a directory", false, true, 2 * OrphanGrace, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			archive := "checkpoint-web_default-app-2026-11-28T07:00:00Z.tar"
			sig := filepath.Join(dir, archive+SignatureSuffix)
			if tt.archive {
				if err := os.WriteFile(filepath.Join(dir, archive), []byte("age"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tt.dir {
				err = os.Mkdir(sig, 0o700)
			} else {
				err = os.WriteFile(sig, []byte("{}"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().Add(tt.after)
			removed := Sweep(dir, Owners{Now: func() time.Time { return now }})
			_, err = os.Lstat(sig)
			if kept := err == nil; kept != tt.kept {
				t.Errorf("kept %v, want %v (removed %v)", kept, tt.kept, removed)
			}
			if !tt.kept && (len(removed) != 1 || removed[0] != archive+SignatureSuffix) {
				t.Errorf("removed %v", removed)
			}
			if tt.archive {
				if _, err := os.Stat(filepath.Join(dir, archive)); err != nil {
					t.Errorf("the archive went: %v", err)
				}
			}
		})
	}
}

// gonePid returns the pid of a process that has exited and been reaped.
func gonePid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") // this test binary, running no test
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestSweepUnmountsTmpfs: the work directory of a gone maker with a
// tmpfs mounted on it (an encrypted checkpoint killed mid-dump) is
// unmounted and removed; one with another filesystem mounted on it (a
// bind mount: nodeshim mounts none), even a directory of another tmpfs
// (as where /tmp is a tmpfs), is left, mount and all.
func TestSweepUnmountsTmpfs(t *testing.T) {
	testutil.RequireRoot(t)
	if seal.TmpfsSource != TmpfsSource {
		t.Fatalf("seal mounts its tmpfs as %q, the sweep takes down %q", seal.TmpfsSource, TmpfsSource)
	}
	dir := t.TempDir()
	tmpfs := filepath.Join(dir, WorkPrefix+strconv.Itoa(gonePid(t))+"-aa")
	bind := filepath.Join(dir, WorkPrefix+strconv.Itoa(gonePid(t))+"-bb")
	src := t.TempDir()
	for _, d := range []string{tmpfs, bind} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(TmpfsSource, tmpfs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("other-tmpfs", src, "tmpfs", 0, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(tmpfs, unix.MNT_DETACH)
		_ = unix.Unmount(bind, unix.MNT_DETACH)
		_ = unix.Unmount(src, unix.MNT_DETACH)
	})
	if err := os.WriteFile(filepath.Join(tmpfs, "pages-1.img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed := Sweep(dir, Owners{})
	if len(removed) != 1 || removed[0] != filepath.Base(tmpfs) {
		t.Errorf("removed %v, want the tmpfs work directory only", removed)
	}
	if _, err := os.Lstat(tmpfs); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tmpfs work directory is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(src, "keep")); err != nil {
		t.Errorf("the bind mount's source lost its file: %v", err)
	}
	if err := Remove(dir, "../x"); err == nil {
		t.Error("Remove took a name that is no work entry")
	}
}

// TestSweepUnmountsNestedTmpfs: a pod checkpoint's work directory, left by
// a killed maker, holds a container's work entry with an encrypted
// checkpoint's tmpfs on it; the sweep takes the tmpfs down and removes
// both.
func TestSweepUnmountsNestedTmpfs(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	pod := filepath.Join(dir, WorkPrefix+strconv.Itoa(gonePid(t))+"-cc")
	inner := filepath.Join(pod, WorkPrefix+strconv.Itoa(gonePid(t))+"-dd")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(TmpfsSource, inner, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(inner, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(inner, "pages-1.img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pod, "manifest.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if removed := Sweep(dir, Owners{}); len(removed) != 1 || removed[0] != filepath.Base(pod) {
		t.Errorf("removed %v, want the pod's work directory", removed)
	}
	if _, err := os.Lstat(pod); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's work directory is still there: %v", err)
	}
	if mounts, err := os.ReadFile("/proc/thread-self/mountinfo"); err != nil || strings.Contains(string(mounts), inner) {
		t.Errorf("the tmpfs on %s is still mounted (%v)", inner, err)
	}
}
