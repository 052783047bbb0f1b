package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/procfs"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// workload counts to /count while a shell variable holds mib MiB, so that
// CRIU has that much memory to write and the dump lasts a while.
func workload(mib int) []string {
	if mib == 0 {
		return []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done"}
	}
	return []string{"sh", "-c", fmt.Sprintf(
		"x=$(head -c %d /dev/zero | tr '\\0' a); i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done", mib<<20)}
}

// count reads /count in ctr, -1 when it has none yet.
func count(t *testing.T, ctr *runtimetest.Container) int {
	t.Helper()
	out, _, code := ctr.Exec(t, "cat", "/count")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || err != nil {
		return -1
	}
	return n
}

// waitCount waits until ctr has counted past n; go test's -timeout bounds it.
func waitCount(t *testing.T, ctr *runtimetest.Container, n int) int {
	t.Helper()
	for {
		if c := count(t, ctr); c > n {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// frozen reports what the kernel says of pid's freezing: its cgroup's
// freezer state (v1 freezer.state, v2 cgroup.freeze) and its task state.
func frozen(t *testing.T, pid int) string {
	t.Helper()
	st, err := criu.ReadContainerState("/proc", pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	if st.FreezerCgroup != "" {
		for _, f := range []struct{ file, thawed string }{{"freezer.state", "THAWED"}, {"cgroup.freeze", "0"}} {
			b, err := os.ReadFile(filepath.Join(st.FreezerCgroup, f.file))
			if err == nil && strings.TrimSpace(string(b)) != f.thawed {
				bad = append(bad, fmt.Sprintf("%s/%s: %s", st.FreezerCgroup, f.file, strings.TrimSpace(string(b))))
			}
		}
	}
	ps, err := criu.ReadProcState("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Stopped() || ps.TracerPid != 0 {
		bad = append(bad, "pid "+strconv.Itoa(pid)+": "+ps.String())
	}
	return strings.Join(bad, "; ")
}

// whenDumping calls fn once CRIU has started writing pages images into a
// work directory under dir, and returns a function that stops watching.
func whenDumping(dir string, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "*", criu.ImagesDir, "pages-*.img")); len(m) > 0 {
				fn()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() { close(done); wg.Wait() }
}

// stopCRIU stops (SIGSTOP) the children of this test process that have a
// file open under dir: the `criu swrk` writing the dump's images there (its
// command line is not to be relied on: CRIU rewrites it). It returns the
// pids it stopped, for SIGCONT; else the timeout's SIGKILL ends them.
func stopCRIU(t *testing.T, dir string) []int {
	self := os.Getpid()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var stopped []int
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		st, err := procfs.ReadStat("/proc", pid)
		if err != nil || st.PPID != self {
			continue
		}
		if !hasFileUnder(pid, dir) {
			continue
		}
		if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
			t.Errorf("stop criu pid %d: %v", pid, err)
			continue
		}
		stopped = append(stopped, pid)
	}
	return stopped
}

// fillFS allocates a file at path as large as its filesystem's free space.
func fillFS(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// In chunks, down to a page: tmpfs undoes the whole of an fallocate
	// that runs out of room, and a writer beside this one (the archive)
	// takes room between a statfs and the fallocate of what it showed.
	var off int64
	for chunk := int64(1 << 20); chunk >= 4096; {
		err := unix.Fallocate(int(f.Fd()), 0, off, chunk)
		switch {
		case err == nil:
			off += chunk
		case errors.Is(err, unix.ENOSPC):
			chunk /= 16
		default:
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
	return nil
}

// hasFileUnder reports whether process pid has a file open under dir.
func hasFileUnder(pid int, dir string) bool {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, dir+"/") {
			return true
		}
	}
	return false
}

// mountSmallTmpfs mounts a tmpfs of size bytes on a new directory of the
// test's own temp dir: a filesystem that fills up during a dump.
func mountSmallTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestCheckpointFailuresOnContainerd drives checkpoints of real containerd
// CRI containers through the service into failure: the container is killed
// while CRIU writes its pages, the timeout expires during the dump, the
// archive directory's filesystem fills up. Each time the checkpoint fails,
// the checkpoint directory is left as it was (no archive, no work or temp
// file), and a container that was not killed runs on: thawed, untraced,
// counting.
func TestCheckpointFailuresOnContainerd(t *testing.T) {
	c := rt.Containerd(t)
	bin := criutest.Require(t)
	resolver, err := cri.Dial(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer resolver.Close()
	pod := c.RunPod(t, runtimetest.PodOptions{})

	for _, tc := range []struct {
		name string
		// mib is the container's working set.
		mib int
		// dir returns the archive directory.
		dir func(t *testing.T) string
		// timeout returns the checkpoint's timeout, given a successful
		// checkpoint's dump time of the same container (zero: none ran).
		timeout func(dump time.Duration) time.Duration
		// measure runs a successful checkpoint first, for timeout.
		measure bool
		// kill kills the container while CRIU writes its pages.
		kill bool
		// fill fills the archive directory's filesystem (a file beside
		// the directory) while CRIU writes the pages.
		fill bool
		// restart kills and restarts containerd while CRIU writes the
		// pages. CRIU does not need the runtime once the container is
		// resolved, so the checkpoint may succeed: check then gets a nil
		// error and the archive must be whole.
		restart bool
		// stall stops CRIU (SIGSTOP) while it writes the pages, so that
		// the timeout expires in the dump whatever the machine's load; the
		// stopped CRIU cannot honour the abort's SIGTERM, so the shim
		// kills it after its grace period (10 s).
		stall bool
		// check checks the error.
		check func(t *testing.T, err error, rec status.CheckpointRecord)
	}{
		{
			// CRIU either notices at once ("killed by 9 unexpectedly":
			// Failed, the target lost), or keeps the container's init
			// seized (sleeping, traced, alive) until the timeout kills
			// CRIU and the SIGKILL takes effect (Aborted); both happen
			// here, about equally often.
			name: "container-exits-during-dump", mib: 256, kill: true,
			dir:     func(t *testing.T) string { return t.TempDir() },
			timeout: func(time.Duration) time.Duration { return 15 * time.Second },
			check: func(t *testing.T, err error, rec status.CheckpointRecord) {
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					if rec.Result != status.CheckpointAborted {
						t.Errorf("recorded %q, want %q", rec.Result, status.CheckpointAborted)
					}
				case errors.Is(err, criu.ErrTargetLost):
					if rec.Result != status.CheckpointFailed {
						t.Errorf("recorded %q, want %q", rec.Result, status.CheckpointFailed)
					}
				default:
					t.Errorf("error %v, want one wrapping criu.ErrTargetLost or context.DeadlineExceeded", err)
				}
			},
		},
		{
			name: "timeout-during-dump", mib: 256, measure: true, stall: true,
			dir:     func(t *testing.T) string { return t.TempDir() },
			timeout: func(dump time.Duration) time.Duration { return 2*dump + 2*time.Second },
			check: func(t *testing.T, err error, rec status.CheckpointRecord) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v, want one wrapping context.DeadlineExceeded", err)
				}
				if !strings.Contains(err.Error(), "criu killed") {
					t.Errorf("error %v does not come from the dump: the timeout expired before CRIU ran", err)
				}
				if rec.Result != status.CheckpointAborted {
					t.Errorf("recorded %q, want %q", rec.Result, status.CheckpointAborted)
				}
			},
		},
		{
			name: "runtime-restarted-during-dump", mib: 256, restart: true,
			dir: func(t *testing.T) string { return t.TempDir() },
			check: func(t *testing.T, err error, rec status.CheckpointRecord) {
				switch {
				case err == nil:
					if rec.Result != status.CheckpointSucceeded {
						t.Errorf("recorded %q for a checkpoint that returned no error", rec.Result)
					}
					if _, err := criu.ArchiveDumpStats(rec.Path); err != nil {
						t.Errorf("archive written while containerd restarted: %v", err)
					}
				case errors.Is(err, criu.ErrTargetLost):
					t.Errorf("error %v: a restart of the runtime lost the container", err)
				}
			},
		},
		{
			// Too small for the estimate: refused before the freeze.
			name: "filesystem-full", mib: 64,
			dir: func(t *testing.T) string { return mountSmallTmpfs(t, 8<<20) },
			check: func(t *testing.T, err error, rec status.CheckpointRecord) {
				if !errors.Is(err, ErrNoRoom) || errors.Is(err, criu.ErrTargetLost) || !strings.Contains(err.Error(), "does not fit") {
					t.Errorf("error %v, want the estimate refused with the container left running", err)
				}
				if rec.Result != status.CheckpointFailed {
					t.Errorf("recorded %q, want %q", rec.Result, status.CheckpointFailed)
				}
			},
		},
		{
			// Room for the estimate, then someone else fills the
			// filesystem while CRIU writes the pages: ENOSPC in the dump.
			name: "filesystem-fills-during-dump", mib: 64, fill: true,
			dir: func(t *testing.T) string {
				d := filepath.Join(mountSmallTmpfs(t, 512<<20), "archives")
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				return d
			},
			check: func(t *testing.T, err error, rec status.CheckpointRecord) {
				if err == nil || errors.Is(err, criu.ErrTargetLost) {
					t.Errorf("error %v, want a failed dump with the container left running", err)
				}
				if rec.Result != status.CheckpointFailed {
					t.Errorf("recorded %q, want %q", rec.Result, status.CheckpointFailed)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctr := pod.Run(t, runtimetest.ContainerOptions{Name: tc.name, Command: workload(tc.mib)})
			ref := criu.ContainerRef{Namespace: pod.Config.Metadata.Namespace, Pod: pod.Config.Metadata.Name, Container: ctr.Name}
			// The working set is filled before the counter starts.
			before := waitCount(t, ctr, 0)
			proc, err := resolver.Resolve(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			dir := tc.dir(t)
			model := status.New(nil)
			svc := containerdService(t, c, bin, dir, model)
			var timeout time.Duration
			if tc.timeout != nil && !tc.measure {
				timeout = tc.timeout(0)
			}
			if tc.measure {
				res, err := svc.Checkpoint(context.Background(), ref, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(res.Path); err != nil {
					t.Fatal(err)
				}
				t.Logf("a successful checkpoint dumped in %s (frozen %s)", res.Dump, res.Frozen)
				timeout = tc.timeout(res.Dump)
			}
			stop := func() {}
			if tc.kill {
				stop = whenDumping(dir, func() { _ = unix.Kill(proc.PID, unix.SIGKILL) })
			}
			if tc.stall {
				stop = whenDumping(dir, func() {
					if pids := stopCRIU(t, dir); len(pids) == 0 {
						t.Error("no criu child to stop while it dumps")
					}
				})
			}
			if tc.fill {
				stop = whenDumping(dir, func() {
					// CRIU waits while the filesystem fills, so that what it
					// and the archive write next meets a full disk, however
					// fast a small dump is beside the fill.
					pids := stopCRIU(t, dir)
					if len(pids) == 0 {
						t.Error("no criu child to stop while it dumps")
					}
					if err := fillFS(filepath.Join(filepath.Dir(dir), "filler")); err != nil {
						t.Error(err)
					}
					for _, pid := range pids {
						if err := unix.Kill(pid, unix.SIGCONT); err != nil {
							t.Errorf("continue criu pid %d: %v", pid, err)
						}
					}
				})
			}
			var restarted chan error
			if tc.restart {
				restarted = make(chan error, 1)
				stop = whenDumping(dir, func() { restarted <- c.Restart() })
			}
			res, err := svc.Checkpoint(context.Background(), ref, timeout)
			stop()
			t.Logf("checkpoint error: %v", err)
			if tc.restart {
				select {
				case rerr := <-restarted:
					if rerr != nil {
						t.Fatalf("restart containerd: %v\n%s", rerr, c.Log())
					}
				default:
					t.Fatal("the dump ended before containerd was restarted")
				}
				// The restarted runtime still runs the container.
				st, serr := c.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ID})
				if serr != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("after the restart containerd says %v, %v; want the container running", st.GetStatus().GetState(), serr)
				}
			}
			if err == nil && !tc.restart {
				t.Fatalf("checkpoint succeeded (%s); want a failure", res.Path)
			}
			hist := model.Snapshot().Checkpoints
			if len(hist) == 0 {
				t.Fatal("no checkpoint recorded")
			}
			tc.check(t, err, hist[len(hist)-1])
			if err == nil {
				if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 || filepath.Join(dir, ents[0].Name()) != res.Path {
					t.Errorf("%s after the checkpoint: %v %v, want only %s", dir, ents, err, res.Path)
				}
			} else if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("%s after the failure: %v %v, want it empty", dir, names, err)
			}
			if tc.kill {
				if code := ctr.Wait(t); code == 0 {
					t.Errorf("killed container exited with 0")
				}
				return
			}
			if f := frozen(t, proc.PID); f != "" {
				t.Errorf("container left frozen: %s", f)
			}
			after := waitCount(t, ctr, before)
			t.Logf("count %d before, %d after the failed checkpoint", before, after)
		})
	}
}
