package criu

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// mountsUnder returns the mount points at or below dir, in the mount
// namespace of the calling thread, as the sweep reads them.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// TestSealedCheckpointSIGKILLedMidDump kills a process checkpointing into
// an encrypted archive with SIGKILL while CRIU writes its images into the
// tmpfs mounted on the work directory: the tmpfs stays mounted, holding
// the plain images. The next checkpoint's sweep unmounts and removes it
// (its maker is gone), so that no mount, work directory or memory is
// left, and the target runs on.
func TestSealedCheckpointSIGKILLedMidDump(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 128)
	testworkload.WaitCount(t, dir, 5)
	hdir := t.TempDir()
	keys := sealtest.NodeKeys(t, filepath.Join(hdir, "keys"), "node-a")
	for name, data := range map[string]string{
		"target": strconv.Itoa(pid),
		"seal":   keys.Recipient + "\n" + keys.SigningKeyFile,
	} {
		if err := os.WriteFile(filepath.Join(hdir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envWorkload+"=checkpoint", envWorkloadDir+"="+hdir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	killWhileDumping(t, cmd, hdir, pid)
	cpdir := filepath.Join(hdir, "root", CheckpointsDir)
	left, _ := os.ReadDir(cpdir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, cpdir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
	mounts := mountsUnder(t, cpdir)
	t.Logf("left by the killed checkpoint: %v, mounts %v", names, mounts)
	if len(mounts) == 0 {
		t.Fatalf("the killed checkpoint left no tmpfs mounted in %s (%v); was it killed mid-dump?", cpdir, names)
	}

	res, err := Checkpoint(t.Context(), pidTarget(t, pid), Options{Binary: bin, RootDir: filepath.Join(hdir, "root")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) == 0 {
		t.Errorf("the next checkpoint removed nothing; %s held %v", cpdir, names)
	}
	if m := mountsUnder(t, cpdir); len(m) != 0 {
		t.Errorf("after the sweep, still mounted: %v", m)
	}
	onlyArchives(t, cpdir, 1)
	testworkload.AssertRunning(t, pid, dir)
}
