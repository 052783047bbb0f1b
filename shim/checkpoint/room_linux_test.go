package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/internal/procfs"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// The environment that makes the test binary a CLI checkpoint (Run) of
// pid envRunPID into envRunDir, with its target locks in envRunLocks and
// the criu at envRunCriu: the process these tests kill mid-dump, or race
// a service checkpoint against.
const (
	envRunPID   = "NODESHIM_TEST_RUN_PID"
	envRunDir   = "NODESHIM_TEST_RUN_DIR"
	envRunLocks = "NODESHIM_TEST_RUN_LOCKS"
	envRunCriu  = "NODESHIM_TEST_RUN_CRIU"
)

// runCLICheckpoint is the test binary as a CLI checkpoint: it exits 0
// when Run succeeds, else 1 with the error on stderr.
func runCLICheckpoint() int {
	pid, err := strconv.Atoi(os.Getenv(envRunPID))
	if err == nil {
		var target criu.Target
		if target, err = criu.PIDTarget("/proc", pid, time.Now()); err == nil {
			_, err = Run(context.Background(), target, criu.Options{
				Binary:     criu.Binary{Path: os.Getenv(envRunCriu), Source: "configured"},
				ArchiveDir: os.Getenv(envRunDir),
			}, os.Getenv(envRunLocks))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// cliCheckpoint starts a CLI checkpoint of pid into dir (see
// runCLICheckpoint); its stderr goes to the returned buffer, read once it
// has been waited for.
func cliCheckpoint(t *testing.T, bin criu.Binary, pid int, dir, locks string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRunPID+"="+strconv.Itoa(pid), envRunDir+"="+dir, envRunLocks+"="+locks, envRunCriu+"="+bin.Path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &stderr
}

// childrenWritingUnder returns the children of parent that have a file
// open under dir: the criu swrk a checkpoint runs.
func childrenWritingUnder(parent int, dir string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat("/proc", pid); err == nil && st.PPID == parent && hasFileUnder(pid, dir) {
			out = append(out, pid)
		}
	}
	return out
}

// waitDumping waits until CRIU has written pages into a work directory
// under dir and returns the criu processes of parent writing there; go
// test's -timeout bounds the wait.
func waitDumping(t *testing.T, parent int, dir string) []int {
	t.Helper()
	for {
		if m, _ := filepath.Glob(filepath.Join(dir, workentry.WorkPrefix+"*", criu.ImagesDir, "pages-*.img")); len(m) > 0 {
			if pids := childrenWritingUnder(parent, dir); len(pids) > 0 {
				return pids
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// waitExited waits until pid is gone (reaped by init once orphaned).
func waitExited(pid int) {
	for {
		if st, err := procfs.ReadStat("/proc", pid); err != nil || st.State == 'Z' || st.State == 'X' {
			if err == nil {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
			if _, err := procfs.ReadStat("/proc", pid); err != nil {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// workEntries names the work entries in dir.
func workEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, ok := workentry.Parse(e.Name()); ok {
			out = append(out, e.Name())
		}
	}
	return out
}

// pidService is a Service whose one container is process pid, writing to
// dir with its target locks in locks.
func pidService(t *testing.T, bin criu.Binary, pid int, dir, locks string, p retention.Policy) (*Service, *status.Model) {
	t.Helper()
	m := status.New(nil)
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
		LockDir:  locks,
		Model:    m,
	})
	t.Cleanup(func() { s.Close() })
	return s, m
}

// TestImagesAndArchiveMustFit: on a filesystem with room for the archive
// once but not for CRIU's images and the archive together, a checkpoint is
// refused before anything is frozen, by the CLI's Run and by the service
// alike, with an error of class errdefs.ErrUnavailable naming the
// directory, the need and the free space; the directory is left empty and
// the counter counts on. With room for both, the same checkpoint succeeds.
func TestImagesAndArchiveMustFit(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 64)
	target, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	est, err := criu.EstimateSize("/proc", target)
	if err != nil {
		t.Fatal(err)
	}
	// Room for 1.5 archives: the old check, which counted the archive
	// once, let this checkpoint freeze the counter and fail with ENOSPC.
	small := mountSmallTmpfs(t, int(est*3/2))
	locks := filepath.Join(t.TempDir(), "locks")

	check := func(t *testing.T, err error, dir string) {
		t.Helper()
		if !errors.Is(err, ErrNoRoom) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("err %v, want ErrNoRoom of class ErrUnavailable", err)
		}
		for _, want := range []string{"filesystem of " + dir, "before freezing"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not say %q: %v", want, err)
			}
		}
		// The need is the images and the archive, each the estimate
		// (taken again: the counter's resident memory moves a little),
		// and more than is free.
		m := needRE.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("error does not give the need, its parts and the free space: %v", err)
		}
		need, archive, images, free := atoi64(t, m[1]), atoi64(t, m[2]), atoi64(t, m[3]), atoi64(t, m[4])
		if archive != images || need != archive+images || need <= free || archive < est/2 {
			t.Errorf("need %d = archive %d + images %d, free %d, estimate %d: %v", need, archive, images, free, est, err)
		}
		if w := workEntries(t, dir); len(w) != 0 {
			t.Errorf("work entries left: %v", w)
		}
		if a, _ := archivesIn(dir); len(a) != 0 {
			t.Errorf("archives %+v", a)
		}
		testworkload.AssertRunning(t, pid, wdir)
	}
	t.Run("cli", func(t *testing.T) {
		dir := filepath.Join(small, "cli")
		_, err := Run(t.Context(), target, criu.Options{Binary: bin, ArchiveDir: dir}, locks)
		check(t, err, dir)
	})
	t.Run("service", func(t *testing.T) {
		dir := filepath.Join(small, "service")
		s, m := pidService(t, bin, pid, dir, locks, retention.Policy{})
		_, err := s.Checkpoint(t.Context(), web, 0)
		check(t, err, dir)
		h := m.Snapshot().Checkpoints
		if len(h) != 1 || h[0].Result != status.CheckpointFailed || h[0].FrozenSeconds != 0 {
			t.Errorf("history %+v, want one failure never frozen", h)
		}
	})
	t.Run("room for both", func(t *testing.T) {
		big := mountSmallTmpfs(t, int(2*est+64<<20))
		res, err := Run(t.Context(), target, criu.Options{Binary: bin, ArchiveDir: big}, locks)
		if err != nil {
			t.Fatal(err)
		}
		if res.Size <= est/2 {
			t.Errorf("archive of %d bytes, estimate %d", res.Size, est)
		}
		testworkload.AssertRunning(t, pid, wdir)
	})
}

// needRE reads SpacePlan.Check's refusal of a plan with work and archive
// directory on one filesystem.
var needRE = regexp.MustCompile(`it needs (\d+) bytes \([^)]*\) there at its peak, the archive \((\d+) bytes \([^)]*\)\) and CRIU's images \((\d+) bytes \([^)]*\)\) in \S+, and (\d+) bytes \([^)]*\) are free`)

func atoi64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeftoversOfAKilledCheckpoint: a CLI checkpoint SIGKILLed while CRIU
// writes the pages leaves a work directory as large as the memory; it is
// recognised as left over (its maker is gone) and counted, and a new
// service's start removes it; the dead checkpoint's lock does not stand in
// the way of the next one.
func TestLeftoversOfAKilledCheckpoint(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 256)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	locks := filepath.Join(t.TempDir(), "locks")

	cmd, _ := cliCheckpoint(t, bin, pid, dir, locks)
	criuPids := waitDumping(t, cmd.Process.Pid, dir)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// CRIU outlives it and finishes writing its images, which nothing
	// removes now.
	for _, p := range criuPids {
		waitExited(p)
	}
	waitRunning(t, pid)

	l, err := retention.Scan(dir, workentry.Owners{LockDir: locks})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Leftovers) != 1 || l.Leftovers[0].InUse || l.Leftovers[0].PID != cmd.Process.Pid {
		t.Fatalf("leftovers %+v, want the work directory of pid %d, not in use", l.Leftovers, cmd.Process.Pid)
	}
	if n := l.LeftoverBytes(false); n < 128<<20 {
		t.Errorf("leftover of %d bytes, want most of the 256 MiB", n)
	}
	t.Logf("leftover %s: %d bytes (%s)", l.Leftovers[0].Name, l.Leftovers[0].Size, l.Leftovers[0].Why)

	s, _ := pidService(t, bin, pid, dir, locks, retention.Policy{})
	res, err := s.ApplyRetention()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Leftovers) != 1 || res.Leftovers[0].Name != l.Leftovers[0].Name {
		t.Errorf("removed %+v, want %s", res.Leftovers, l.Leftovers[0].Name)
	}
	if w := workEntries(t, dir); len(w) != 0 {
		t.Errorf("work entries left after the service's start: %v", w)
	}
	if _, err := s.Checkpoint(t.Context(), web, 0); err != nil {
		t.Fatalf("checkpoint after the killed one: %v", err)
	}
	testworkload.AssertRunning(t, pid, wdir)
}

// waitRunning waits until pid runs untraced and unstopped (CRIU lets go
// of it); go test's -timeout bounds the wait.
func waitRunning(t *testing.T, pid int) {
	t.Helper()
	for {
		st, err := procfs.ReadStatus("/proc", pid)
		if err != nil || st.Gone() {
			t.Fatalf("workload %d is gone: %v %v", pid, st, err)
		}
		if st.TracerPid == 0 && !st.Stopped() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCLIAndServiceCheckpointOneProcess: while a CLI checkpoint dumps a
// process, the service's checkpoint of the same process (under its
// container's name) is turned away at once with an ErrBusy error naming
// the pid; nothing reports the workload lost, the CLI's checkpoint
// succeeds, and the service's next one too.
func TestCLIAndServiceCheckpointOneProcess(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 256)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	locks := filepath.Join(t.TempDir(), "locks")
	s, m := pidService(t, bin, pid, dir, locks, retention.Policy{})

	cmd, stderr := cliCheckpoint(t, bin, pid, dir, locks)
	// With CRIU stopped mid-dump the CLI's checkpoint is certainly in
	// progress while the service's is asked for.
	criuPids := waitDumping(t, cmd.Process.Pid, dir)
	for _, p := range criuPids {
		if err := unix.Kill(p, unix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Checkpoint(t.Context(), web, 0)
	for _, p := range criuPids {
		if err := unix.Kill(p, unix.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("service checkpoint during the CLI's: %v", err)
	if !errors.Is(err, ErrBusy) || !errors.Is(err, errdefs.ErrBusy) || errors.Is(err, criu.ErrTargetLost) {
		t.Errorf("service checkpoint during the CLI's: %v, want ErrBusy", err)
	}
	if err != nil && (!strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)+" holds")) {
		t.Errorf("error does not name the target pid %d and the holder %d: %v", pid, cmd.Process.Pid, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("CLI checkpoint: %v: %s", err, stderr)
	}
	for _, c := range m.Snapshot().Conditions {
		if c.Type == status.TypeCheckpoint && c.Severity == "Error" {
			t.Errorf("condition %+v reports the workload lost", c)
		}
	}
	for _, h := range m.Snapshot().Checkpoints {
		if strings.Contains(h.Error, criu.ErrTargetLost.Error()) {
			t.Errorf("history %+v reports the workload lost", h)
		}
	}
	testworkload.AssertRunning(t, pid, wdir)
	if _, err := s.Checkpoint(t.Context(), web, 0); err != nil {
		t.Fatalf("service checkpoint after the CLI's: %v", err)
	}
	if a, _ := archivesIn(dir); len(a) != 2 {
		t.Errorf("archives %+v, want the CLI's and the service's", a)
	}
}

// TestNotLostWhileAlive: an error of criu saying the target is lost is
// kept only when the target is gone; for a live one it says it runs on,
// and keeps the abort's class.
func TestNotLostWhileAlive(t *testing.T) {
	nstestutil.RequireRoot(t)
	alive, _ := testworkload.Start(t, "count", 1)
	dead, _ := testworkload.Start(t, "count", 1)
	testworkload.Kill(t, dead)
	lost := fmt.Errorf("pid 7 after checkpoint is traced by pid 9: %w", criu.ErrTargetLost)
	tests := []struct {
		name      string
		pid       int
		err       error
		wantLost  bool
		wantClass error
	}{
		{"alive", alive, lost, false, nil},
		{"alive, aborted", alive, errors.Join(context.Canceled, lost), false, context.Canceled},
		{"gone", dead, lost, true, nil},
		{"not a loss", alive, context.DeadlineExceeded, false, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := notLostIfAlive("/proc", tt.pid, tt.err)
			if errors.Is(err, criu.ErrTargetLost) != tt.wantLost {
				t.Errorf("%v: lost %v, want %v", err, !tt.wantLost, tt.wantLost)
			}
			if tt.wantClass != nil && !errors.Is(err, tt.wantClass) {
				t.Errorf("%v: lost the class %v", err, tt.wantClass)
			}
			if !tt.wantLost && errors.Is(tt.err, criu.ErrTargetLost) && !strings.Contains(err.Error(), "runs on") {
				t.Errorf("%v does not say the workload runs on", err)
			}
		})
	}
}

func TestRetentionPolicy(t *testing.T) {
	q := resource.MustParse("2Gi")
	neg := resource.MustParse("-1")
	tests := []struct {
		name string
		c    config.CheckpointRetention
		want retention.Policy
	}{
		{"defaults", config.CheckpointRetention{}, retention.Policy{MaxPerContainer: retention.DefaultMaxPerContainer}},
		{"all set", config.CheckpointRetention{MaxPerContainer: 3, MaxBytes: &q, MaxAge: metav1.Duration{Duration: time.Hour}},
			retention.Policy{MaxPerContainer: 3, MaxBytes: 2 << 30, MaxAge: time.Hour}},
		{"unbounded", config.CheckpointRetention{MaxPerContainer: -1, MaxBytes: &neg}, retention.Policy{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RetentionPolicy(tt.c); got != tt.want {
				t.Errorf("RetentionPolicy = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLeftoverRemovedToMakeRoom: a temp archive left by a killed
// checkpoint fills the filesystem so that CRIU's images and the archive
// fit only without it; the service's checkpoint removes it (one listing
// of the directory, one plan) before the freeze, and succeeds.
func TestLeftoverRemovedToMakeRoom(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 64)
	target, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	est, err := criu.EstimateSize("/proc", target)
	if err != nil {
		t.Fatal(err)
	}
	dir := mountSmallTmpfs(t, int(2*est+64<<20))
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, workentry.TempPrefix+strconv.Itoa(dead.Process.Pid)+"-00aa"+workentry.TempSuffix)
	f, err := os.OpenFile(left, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, est+32<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, _ := pidService(t, bin, pid, dir, filepath.Join(t.TempDir(), "locks"), retention.Policy{})
	res, err := s.Checkpoint(t.Context(), web, 0)
	if err != nil {
		t.Fatalf("checkpoint with a leftover to remove: %v", err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover %s: %v, want it removed", left, err)
	}
	if w := workEntries(t, dir); len(w) != 0 {
		t.Errorf("work entries left: %v", w)
	}
	if _, err := os.Stat(res.Path); err != nil {
		t.Error(err)
	}
	testworkload.AssertRunning(t, pid, wdir)
}
