package downtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Root is a podman storage root, a node of a move: the runtimetest
// Podman's own (no Flags), or a second one on the same machine that
// shares nothing with it but the files it is given (SecondRoot).
type Root struct {
	P *runtimetest.Podman
	// Flags are the --root and --runroot of a second root.
	Flags []string
}

// Command is a podman command on r.
func (r Root) Command(args ...string) *exec.Cmd {
	// podman's persistent flags: the last --root and --runroot win.
	return r.P.Command(append(append([]string{}, r.Flags...), args...)...)
}

// Run runs a podman command on r and returns its output, trimmed; a
// failure fails tb.
func (r Root) Run(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := r.Command(args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("podman %s: %v: %s%s", strings.Join(args, " "), err, out, criuLogErrors(string(out)))
	}
	return strings.TrimSpace(string(out))
}

// criuLogErrors returns the error lines of the CRIU log a failed podman
// command names ("log file: PATH", runc's message), which is gone with the
// container's storage once the test ends; "" when it names none.
func criuLogErrors(out string) string {
	_, rest, ok := strings.Cut(out, "log file: ")
	if !ok {
		return ""
	}
	path := strings.Fields(rest)
	if len(path) == 0 {
		return ""
	}
	b, err := os.ReadFile(path[0])
	if err != nil {
		return fmt.Sprintf("\n(%v)", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Error") || strings.Contains(l, "error") || strings.Contains(l, "Warn") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return "\n" + path[0] + ":\n" + strings.Join(lines, "\n")
}

// Count reads /count in container name; ok is false while it cannot.
func (r Root) Count(name string) (int, bool) {
	out, err := r.Command("exec", name, "cat", "/"+CountFile).Output()
	if err != nil {
		return 0, false
	}
	c, err := strconv.Atoi(strings.TrimSpace(string(out)))
	return c, err == nil
}

// WaitCount waits until name has counted past min, and returns the count.
func (r Root) WaitCount(tb testing.TB, name string, min int) int {
	tb.Helper()
	var c int
	testutil.Eventually(tb, fmt.Sprintf("container %s counts past %d", name, min), func() error {
		var ok bool
		if c, ok = r.Count(name); !ok {
			return errors.New("its /count cannot be read")
		}
		if c <= min {
			return fmt.Errorf("it counts %d", c)
		}
		return nil
	})
	return c
}

// SecondRoot makes a second podman storage root beside p's, with the
// base image loaded from p through an OCI archive, and removes it after
// tb.
func SecondRoot(tb testing.TB, p *runtimetest.Podman) Root {
	tb.Helper()
	dir, err := os.MkdirTemp(p.Dir, "node-b-")
	if err != nil {
		tb.Fatal(err)
	}
	b := Root{P: p, Flags: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run")}}
	tb.Cleanup(func() {
		if out, err := b.Command("rm", "--all", "--force", "--time", "0").CombinedOutput(); err != nil {
			tb.Errorf("podman rm on the second root: %v: %s", err, out)
		}
		if err := runtimetest.RemoveAll(dir); err != nil {
			tb.Errorf("remove the second root: %v", err)
		}
	})
	base := filepath.Join(dir, "base.tar")
	Root{P: p}.Run(tb, "save", "--format", "oci-archive", "-o", base, runtimetest.BusyboxImage)
	b.Run(tb, "load", "-i", base)
	if err := b.Command("image", "exists", runtimetest.BusyboxImage).Run(); err != nil {
		tb.Fatalf("the second root has no %s after loading it: %v", runtimetest.BusyboxImage, err)
	}
	return b
}

// Checkpointer checkpoints the running container name of root a into
// the directory dir, and returns the archive's path and how long the
// container was frozen.
type Checkpointer func(tb testing.TB, a Root, name, dir string) (archive string, frozen time.Duration)

// podmanStats is what `podman container checkpoint --print-stats` prints
// (durations in microseconds).
type podmanStats struct {
	Containers []struct {
		CRIU struct {
			FrozenTime int64 `json:"frozen_time"`
		} `json:"criu_statistics"`
	} `json:"container_statistics"`
}

// PodmanCheckpoint is podman's own checkpoint: `podman container
// checkpoint --export --print-stats` (podman's default zstd archive; the
// container stops). The frozen time is CRIU's frozen_time, which leaves
// out the freezing itself.
func PodmanCheckpoint(tb testing.TB, a Root, name, dir string) (string, time.Duration) {
	tb.Helper()
	archive := filepath.Join(dir, name+".tar")
	out := a.Run(tb, "container", "checkpoint", "--export", archive, "--print-stats", name)
	var st podmanStats
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Containers) != 1 {
		tb.Fatalf("podman checkpoint --print-stats: %v: %s", err, out)
	}
	return archive, time.Duration(st.Containers[0].CRIU.FrozenTime) * time.Microsecond
}

// Timer is a benchmark's timer (*testing.B).
type Timer interface {
	StartTimer()
	StopTimer()
}

// MoveOptions are how MoveContainer moves the container.
type MoveOptions struct {
	// Runtime is the OCI runtime podman runs on both roots (--runtime).
	Runtime string
	// Checkpoint takes the checkpoint on A; PodmanCheckpoint when nil.
	Checkpoint Checkpointer
	// Timer, when set, runs only over the checkpoint and the restore,
	// and is left stopped.
	Timer Timer
}

// Move is what MoveContainer measured of one move.
type Move struct {
	// Checkpoint and Restore are the two commands' wall times; Frozen
	// what the Checkpointer says.
	Checkpoint, Frozen, Restore time.Duration
	// Downtime is from the freeze on A to the counter's first advance
	// on B, by the Watcher.
	Downtime time.Duration
	// ArchiveBytes is the archive's size, AnonBytes the anonymous memory
	// the container held on A.
	ArchiveBytes, AnonBytes int64
	// Before is a count on A before the checkpoint, After one on B after
	// the restore.
	Before, After int
}

// MoveContainer runs the workload (Script, mib MiB) as container name on
// a, checkpoints it, removes it from a, restores the archive on b with
// `podman container restore --import` as name-b, and waits for it to
// count on there. A Watcher follows the container's pidfile, which both
// roots write at the same path.
func MoveContainer(tb testing.TB, a, b Root, name string, mib int, o MoveOptions) Move {
	tb.Helper()
	timer := o.Timer
	if timer == nil {
		timer = noTimer{}
	}
	timer.StopTimer()
	ck := o.Checkpoint
	if ck == nil {
		ck = PodmanCheckpoint
	}
	dir := tb.TempDir()
	// conmon's and the runtime's pidfiles outside the run root: podman
	// 4.3's restore --import keeps the paths the archive names unless they
	// are under the new container's own run directory, and A's run root
	// is not on B.
	pidfile := filepath.Join(dir, "pidfile")
	a.Run(tb, "--runtime", o.Runtime, "run", "--detach", "--network", "none", "--cgroup-parent", a.P.CgroupParent,
		"--conmon-pidfile", filepath.Join(dir, "conmon.pid"), "--pidfile", pidfile, "--name", name,
		runtimetest.BusyboxImage, "sh", "-c", Script(mib))
	defer func() {
		_ = a.Command("rm", "--force", "--time", "0", name).Run()
		_ = b.Command("rm", "--force", "--time", "0", name+"-b").Run()
	}()
	// Let it count a few times with its working set in place.
	var m Move
	m.Before = a.WaitCount(tb, name, 5)
	raw := a.Run(tb, "inspect", "--format", "{{.State.Pid}}", name)
	pid, err := strconv.Atoi(raw)
	if err != nil {
		tb.Fatalf("podman inspect %s: pid %q: %v", name, raw, err)
	}
	w := Watch("/proc", PIDFile(pidfile))
	defer w.Stop()
	if m.AnonBytes, err = TreeAnon("/proc", pid); err != nil {
		tb.Fatal(err)
	}
	if m.AnonBytes < int64(mib)<<20 {
		tb.Fatalf("container %s holds %d bytes of anonymous memory, below its %d MiB working set", name, m.AnonBytes, mib)
	}

	timer.StartTimer()
	from := time.Now()
	archive, frozen := ck(tb, a, name, dir)
	m.Checkpoint, m.Frozen = time.Since(from), frozen
	timer.StopTimer()
	to := time.Now()
	fi, err := os.Stat(archive)
	if err != nil {
		tb.Fatal(err)
	}
	m.ArchiveBytes = fi.Size()
	// The move: A's container goes (nodeshim leaves it running), only
	// the archive crosses to B.
	a.Run(tb, "rm", "--force", "--time", "0", name)

	timer.StartTimer()
	start := time.Now()
	// A new name gives the container a new ID and with it new paths on B
	// (under the old one podman reuses A's conmon pidfile path).
	b.Run(tb, "--runtime", o.Runtime, "container", "restore", "--import", archive, "--name", name+"-b")
	m.Restore = time.Since(start)
	timer.StopTimer()

	m.After = b.WaitCount(tb, name+"-b", m.Before)
	b.WaitCount(tb, name+"-b", m.After)
	rs := w.Stop()
	onA := OnPID(pid)
	freeze, ok := Freeze(rs, onA, from, to)
	if !ok {
		tb.Fatalf("%s: the counter was not seen to stop on A (%d readings)", name, len(rs))
	}
	_, resumed, ok := Resumed(rs, onA, freeze.N)
	if !ok {
		tb.Fatalf("%s: the counter was not seen to go on past %d on B (%d readings)", name, freeze.N, len(rs))
	}
	m.Downtime = resumed.At.Sub(freeze.At)
	return m
}

type noTimer struct{}

func (noTimer) StartTimer() {}
func (noTimer) StopTimer()  {}
