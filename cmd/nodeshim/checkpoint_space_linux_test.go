package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/internal/procfs"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestCheckpointPIDNeedsRoomForImagesAndArchive: `checkpoint --pid` of a
// shell holding 32 MiB, into a --root-dir on a filesystem with room for
// its archive once but not for CRIU's images and the archive together, is
// refused before anything is frozen, naming the directory, the need and
// the free space; nothing is left in the directory, the lock directory
// beside --socket is empty again, and the shell runs on untraced.
func TestCheckpointPIDNeedsRoomForImagesAndArchive(t *testing.T) {
	testutil.RequireRoot(t)
	criutest.Require(t)
	tmp := t.TempDir()
	pidFile := filepath.Join(tmp, "pid")
	// The shell keeps the string, so CRIU has its pages to write.
	script := fmt.Sprintf(`x=$(head -c %d /dev/zero | tr '\0' a); echo $$ > "$0"; while :; do sleep 1; done`, 32<<20)
	if err := exec.Command("setsid", "-f", "sh", "-c", script, pidFile).Run(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 1 {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() { stop(t, pid) })
	target, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	est, err := criu.EstimateSize("/proc", target)
	if err != nil {
		t.Fatal(err)
	}
	if est < 32<<20 {
		t.Fatalf("estimate %d bytes, want the shell's 32 MiB at least", est)
	}
	root := filepath.Join(tmp, "small")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", est*3/2)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", root, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	socket := filepath.Join(tmp, "run", "nodeshim.sock")

	_, _, err = runSplit(t, "checkpoint", "--pid", strconv.Itoa(pid), "--root-dir", root, "--socket", socket, "--timeout", "1m")
	if !errors.Is(err, checkpoint.ErrNoRoom) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("checkpoint --pid: %v, want ErrNoRoom", err)
	}
	dir := filepath.Join(root, criu.CheckpointsDir)
	for _, want := range []string{"does not fit in the filesystem of " + dir, "CRIU's images", "the archive", " free", "before freezing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s holds %v after the refusal", dir, ents)
	}
	if ents, err := os.ReadDir(filepath.Join(tmp, "run", workentry.LockDirName)); err != nil || len(ents) != 0 {
		t.Errorf("lock dir: %v, %v; want it there and empty", ents, err)
	}
	st, err := procfs.ReadStatus("/proc", pid)
	if err != nil || st.Gone() || st.Stopped() || st.TracerPid != 0 {
		t.Errorf("shell after the refusal: %v, %v; want it running untraced", st, err)
	}
}
