package criu

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// kubeletName matches kubelet's archive name with nodeshim's optional
// collision suffix.
var kubeletName = regexp.MustCompile(`^checkpoint-[^_/]+_[^/]+-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ(-\d+)?\.tar$`)

// checkpointctl returns the checkpointctl that make installs, or one on PATH.
func checkpointctl(t *testing.T) string {
	t.Helper()
	return testutil.RequireTool(t, "NODESHIM_CHECKPOINTCTL", "checkpointctl")
}

// verifyArchive checks everything nodeshim promises about an archive: its
// name, owner and modes, its members, and that checkpointctl show and
// inspect --stats --ps-tree read it and find the target.
func verifyArchive(t *testing.T, path string, tg Target) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !kubeletName.MatchString(filepath.Base(path)) {
		t.Errorf("archive name %q is not kubelet's", filepath.Base(path))
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != 0o600 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("archive %s: mode %v uid %d gid %d, want -rw------- root:root", path, fi.Mode(), st.Uid, st.Gid)
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("checkpoints dir mode %v, want 0700", di.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	members := map[string]byte{}
	first := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if first == "" {
			first = h.Name
		}
		if strings.HasPrefix(h.Name, "./") || strings.HasPrefix(h.Name, "/") {
			t.Errorf("member %q has a prefix", h.Name)
		}
		members[h.Name] = h.Typeflag
	}
	if first != "checkpoint/" || members["checkpoint/"] != tar.TypeDir {
		t.Errorf("first member %q, want the directory checkpoint/", first)
	}
	for _, m := range []string{"checkpoint/inventory.img", "checkpoint/pstree.img", fmt.Sprintf("checkpoint/core-%d.img", tg.Pid), ConfigDump, SpecDump, StatusDump, DumpLog, StatsDump} {
		if members[m] != tar.TypeReg {
			t.Errorf("archive lacks %s", m)
		}
	}
	// Any tar lists it, with the same first member and no extended headers.
	list, err := exec.Command("tar", "-tvf", path).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -tvf %s: %v\n%s", path, err, list)
	}
	if !strings.HasPrefix(strings.Fields(string(list))[5], "checkpoint/") || strings.Contains(string(list), "PaxHeader") {
		t.Errorf("tar -tvf %s:\n%s", path, list)
	}
	if _, err := ValidateArchive(mustOpen(t, path)); err != nil {
		t.Errorf("nodeshim's own validation refuses its archive: %v", err)
	}
	ctl := checkpointctl(t)
	out, err := exec.Command(ctl, "show", path).CombinedOutput()
	if err != nil {
		t.Fatalf("checkpointctl show %s: %v\n%s", path, err, out)
	}
	// checkpointctl shortens ids to 12 characters, as container tools do.
	for _, want := range []string{tg.Ref.Container, tg.ID[:min(12, len(tg.ID))], tg.Runtime} {
		if !strings.Contains(string(out), want) {
			t.Errorf("checkpointctl show lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(ctl, "inspect", "--stats", "--ps-tree", path).CombinedOutput()
	if err != nil {
		t.Fatalf("checkpointctl inspect --stats --ps-tree %s: %v\n%s", path, err, out)
	}
	for _, want := range []string{"Frozen time", "Pages written", "Process tree", fmt.Sprintf("[%d]", tg.Pid)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("checkpointctl inspect lacks %q:\n%s", want, out)
		}
	}
}

func mustOpen(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// onlyArchives fails unless dir holds exactly want archives and nothing else
// (no temp file, no work directory).
func onlyArchives(t *testing.T, dir string, want int) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var archives []string
	for _, e := range ents {
		if !kubeletName.MatchString(e.Name()) {
			t.Errorf("%s holds %s, which is not an archive", dir, e.Name())
			continue
		}
		archives = append(archives, filepath.Join(dir, e.Name()))
	}
	if len(archives) != want {
		t.Errorf("%s holds %d archives, want %d", dir, len(archives), want)
	}
	return archives
}

func pidTarget(t *testing.T, pid int) Target {
	t.Helper()
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// TestCheckpointRestoreRoundTrip is the round trip: a counter is
// checkpointed while it runs (and runs on), then stopped, then restored
// from the archive, and goes on counting from the checkpointed count.
func TestCheckpointRestoreRoundTrip(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 4)
	before := testworkload.WaitCount(t, dir, 20)
	root := t.TempDir()
	tg := pidTarget(t, pid)
	res, err := Checkpoint(t.Context(), tg, Options{Binary: bin, RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	after := testworkload.Counts(t, dir)
	lo, hi := before[len(before)-1], after[len(after)-1]
	t.Logf("checkpoint %s: %d bytes, frozen %v, total %v; count between %d and %d", res.Path, res.Size, res.Frozen, res.Total, lo, hi)
	if !res.InPlace {
		t.Errorf("the archive was copied, not built around the pages image, on %s", root)
	}
	if res.Frozen <= 0 || res.Size <= 0 || res.PagesWritten == 0 {
		t.Errorf("result lacks statistics: %+v", res)
	}
	verifyArchive(t, res.Path, tg)
	// It keeps running after the checkpoint...
	testworkload.AssertRunning(t, pid, dir)
	testworkload.WaitCount(t, dir, len(after)+20)
	// ...then stops.
	testworkload.Kill(t, pid)
	stopped := testworkload.Counts(t, dir)
	last := stopped[len(stopped)-1]

	rr, err := Restore(t.Context(), res.Path, RestoreOptions{Binary: bin, RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testworkload.Kill(t, rr.Pid) })
	if rr.Pid != pid {
		t.Errorf("restored pid %d, want the original %d", rr.Pid, pid)
	}
	restored := testworkload.WaitCount(t, dir, len(stopped)+10)[len(stopped):]
	t.Logf("stopped at %d, restored counts %v", last, restored[:5])
	if first := restored[0]; first <= lo || first > hi+1 || first >= last {
		t.Errorf("restored counter resumed at %d, want the checkpointed count + 1, in (%d, %d], and below %d", first, lo, hi+1, last)
	}
	for i := 1; i < len(restored); i++ {
		if restored[i] != restored[i-1]+1 {
			t.Fatalf("restored counter jumps from %d to %d", restored[i-1], restored[i])
		}
	}
	if _, err := os.Stat(rr.WorkDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restore work dir %s left behind: %v", rr.WorkDir, err)
	}
	onlyArchives(t, filepath.Join(root, CheckpointsDir), 1)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestCheckpointFailuresLeaveTargetRunning runs every failure path of a
// checkpoint against a real counter and checks the same three things after
// each: an error that says what happened, the target running on, unfrozen
// and untraced, and no file left in the checkpoints directory.
func TestCheckpointFailuresLeaveTargetRunning(t *testing.T) {
	bin := requireCriu(t)
	cases := []struct {
		name     string
		workload string
		mib      int
		root     func(t *testing.T, anon int64) string
		opts     func(o *Options, cancel context.CancelFunc)
		wantErr  func(err error) bool
	}{
		{
			// CRIU refuses an established TCP connection without
			// --tcp-established; on kernels >= 6.16 CRIU 4.1.1 even fails
			// earlier, on any inet socket (getsockopt SO_PASSCRED returns
			// EOPNOTSUPP). Either way the dump fails inside CRIU after
			// it has seized the target.
			name: "criu error: a TCP connection", workload: "count-tcp", mib: 1,
			wantErr: func(err error) bool {
				return errors.Is(err, ErrCriu) && strings.Contains(err.Error(), "Dumping FAILED")
			},
		},
		{
			name: "cancelled mid-dump", workload: "count", mib: 192,
			opts: func(o *Options, cancel context.CancelFunc) {
				o.Progress = cancelOnFirstBytes(cancel)
			},
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
		{
			name: "timed out mid-dump, criu killed after the grace period", workload: "count", mib: 192,
			opts: func(o *Options, cancel context.CancelFunc) {
				o.KillGrace = time.Nanosecond
				o.Progress = cancelOnFirstBytes(cancel)
			},
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
		{
			name: "disk full while CRIU writes images", workload: "count", mib: 64,
			// A quarter of the target's memory: CRIU runs out of space.
			root:    func(t *testing.T, anon int64) string { return mountTmpfs(t, strconv.FormatInt(anon/4, 10)) },
			wantErr: func(err error) bool { return errors.Is(err, ErrCriu) },
		},
		{
			name: "disk full while the archive is written", workload: "count", mib: 32,
			// Room for the images (at most the target's memory) but not
			// for a second copy of them: tmpfs cannot insert a range, so
			// the archive is copied and runs out of space.
			root: func(t *testing.T, anon int64) string { return mountTmpfs(t, strconv.FormatInt(anon*3/2, 10)) },
			wantErr: func(err error) bool {
				return errors.Is(err, unix.ENOSPC) && !errors.Is(err, ErrCriu)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pid, dir := testworkload.Start(t, tc.workload, tc.mib)
			testworkload.WaitCount(t, dir, 5)
			root := t.TempDir()
			if tc.root != nil {
				root = tc.root(t, anonRSS(t, pid))
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			o := Options{Binary: bin, RootDir: root, ProgressInterval: 5 * time.Millisecond}
			if tc.opts != nil {
				tc.opts(&o, cancel)
			}
			res, err := Checkpoint(ctx, pidTarget(t, pid), o)
			if err == nil {
				t.Fatalf("checkpoint succeeded: %+v", res)
			}
			t.Logf("error: %v", err)
			if !tc.wantErr(err) {
				t.Errorf("unexpected error: %v", err)
			}
			if errors.Is(err, ErrTargetLost) {
				t.Fatalf("target lost: %v", err)
			}
			testworkload.AssertRunning(t, pid, dir)
			onlyArchives(t, filepath.Join(root, CheckpointsDir), 0)
		})
	}
}

// rss returns the resident memory of pid in bytes (VmRSS).
func rss(t *testing.T, pid int) int64 { return statusKiB(t, pid, "VmRSS:") }

// anonRSS is pid's resident anonymous memory (RssAnon), what CRIU writes as
// pages: the disk-full cases size their filesystems from it, since VmRSS
// also counts the file pages of the (test) binary, which vary with what of
// it has run and with the page cache (fault-around maps 64 KiB around each
// fault).
func anonRSS(t *testing.T, pid int) int64 { return statusKiB(t, pid, "RssAnon:") }

// statusKiB is the field of /proc/PID/status, in bytes.
func statusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s for pid %d", field, pid)
	return 0
}

// cancelOnFirstBytes cancels once CRIU has written its first image bytes,
// that is while the target is frozen and CRIU's parasite runs in it.
func cancelOnFirstBytes(cancel context.CancelFunc) func(Progress) {
	var once sync.Once
	return func(p Progress) {
		if p.Phase == "dumping" && p.Bytes > 0 {
			once.Do(cancel)
		}
	}
}

// TestCheckpointSIGKILLedMidDump kills a checkpointing nodeshim process
// with SIGKILL while CRIU writes images: the target must run on, unfrozen
// and untraced, and the next checkpoint removes what was left behind.
func TestCheckpointSIGKILLedMidDump(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 192)
	testworkload.WaitCount(t, dir, 5)
	hdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hdir, "target"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envWorkload+"=checkpoint", envWorkloadDir+"="+hdir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A checkpointing process left by a failed wait.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	killWhileDumping(t, cmd, hdir, pid)
	testworkload.AssertRunning(t, pid, dir)
	cpdir := filepath.Join(hdir, "root", CheckpointsDir)
	left, _ := os.ReadDir(cpdir)
	if len(left) == 0 {
		t.Fatalf("the killed process left no work directory in %s; was it killed mid-dump?", cpdir)
	}
	res, err := Checkpoint(t.Context(), pidTarget(t, pid), Options{Binary: bin, RootDir: filepath.Join(hdir, "root")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) == 0 {
		t.Errorf("the next checkpoint removed nothing; %s held %v", cpdir, left)
	}
	onlyArchives(t, cpdir, 1)
	verifyArchive(t, res.Path, pidTarget(t, pid))
	testworkload.AssertRunning(t, pid, dir)
}

// TestCheckpointNaming checks kubelet's name and nodeshim's collision rule:
// checkpoints of one container in the same second, and a file that already
// has the name, are never overwritten.
func TestCheckpointNaming(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 1)
	testworkload.WaitCount(t, dir, 3)
	root := t.TempDir()
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	o := Options{Binary: bin, RootDir: root, Now: func() time.Time { return at }}
	tg := pidTarget(t, pid)
	cpdir := filepath.Join(root, CheckpointsDir)
	if err := ensurePrivateDir(cpdir); err != nil {
		t.Fatal(err)
	}
	// Someone else's file under kubelet's name.
	squatter := filepath.Join(cpdir, ArchiveName(tg.Ref, at, 0))
	if err := os.WriteFile(squatter, []byte("not ours"), 0o600); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 3 {
		// Both ways of writing an archive obey the naming rules.
		o.CopyArchive = i%2 == 1
		res, err := Checkpoint(t.Context(), tg, o)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, res.Path)
		verifyArchive(t, res.Path, tg)
	}
	want := []string{
		fmt.Sprintf("checkpoint-pid%d_host-%s-2025-03-04T05:06:07Z-1.tar", pid, tg.Ref.Container),
		fmt.Sprintf("checkpoint-pid%d_host-%s-2025-03-04T05:06:07Z-2.tar", pid, tg.Ref.Container),
		fmt.Sprintf("checkpoint-pid%d_host-%s-2025-03-04T05:06:07Z-3.tar", pid, tg.Ref.Container),
	}
	for i := range want {
		if filepath.Base(paths[i]) != want[i] {
			t.Errorf("checkpoint %d named %s, want %s", i, filepath.Base(paths[i]), want[i])
		}
	}
	if b, err := os.ReadFile(squatter); err != nil || string(b) != "not ours" {
		t.Errorf("the existing file under kubelet's name was touched: %q, %v", b, err)
	}
	onlyArchives(t, cpdir, 4)
}

// mountExt4 makes an ext4 filesystem of size bytes in a file and mounts it
// through a loop device.
func mountExt4(t *testing.T, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mkfs := testutil.RequireBinary(t, "mkfs.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -o loop %s: %v: %s", img, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestCheckpointInPlaceNeedsOneCopy runs on an ext4 filesystem with room
// for the images but not for a second copy of them: the archive built
// around the pages image fits, a copied one runs out of space, and that
// failure too leaves the target running and nothing behind.
func TestCheckpointInPlaceNeedsOneCopy(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 48)
	testworkload.WaitCount(t, dir, 3)
	root := mountExt4(t, anonRSS(t, pid)*3/2)
	cpdir := filepath.Join(root, CheckpointsDir)
	tg := pidTarget(t, pid)

	_, err := Checkpoint(t.Context(), tg, Options{Binary: bin, RootDir: root, CopyArchive: true})
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("copied archive on a filesystem with room for one copy: %v, want ENOSPC", err)
	}
	testworkload.AssertRunning(t, pid, dir)
	onlyArchives(t, cpdir, 0)

	res, err := Checkpoint(t.Context(), tg, Options{Binary: bin, RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	if !res.InPlace {
		t.Error("the archive was not built in place on ext4")
	}
	verifyArchive(t, res.Path, tg)
	testworkload.AssertRunning(t, pid, dir)
	onlyArchives(t, cpdir, 1)
}

// TestCheckpointContainer checkpoints a process described as a Kubernetes
// container: the archive carries kubelet's name for the pod and the CRI
// annotations, and checkpointctl shows the container's name.
func TestCheckpointContainer(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 1)
	testworkload.WaitCount(t, dir, 3)
	ref := ContainerRef{Namespace: "default", Pod: "web-0", Container: "app"}
	tg := pidTarget(t, pid)
	tg.Ref, tg.ID, tg.Runtime = ref, "0123456789abcdef", "containerd"
	res, err := Checkpoint(t.Context(), tg, Options{Binary: bin, RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(res.Path), "checkpoint-web-0_default-app-") {
		t.Errorf("archive %s is not named for web-0 in default", res.Path)
	}
	verifyArchive(t, res.Path, tg)
	testworkload.AssertRunning(t, pid, dir)
}

// killWhileDumping SIGKILLs the checkpointing process cmd once it has
// signalled (the file "dumping" in hdir) that CRIU is dumping pid, and
// waits until pid is untraced and running: the orphaned CRIU finishes or
// fails on its own, and until it exits the target is legitimately traced.
func killWhileDumping(t *testing.T, cmd *exec.Cmd, hdir string, pid int) {
	t.Helper()
	testutil.Eventually(t, "the checkpointing process starts dumping", func() error {
		if cmd.ProcessState != nil {
			t.Fatalf("the checkpointing process exited: %v", cmd.ProcessState)
		}
		_, err := os.Stat(filepath.Join(hdir, "dumping"))
		return err
	})
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testutil.Eventually(t, "the target is untraced and running after the checkpointing process died", func() error {
		st, err := ReadProcState("/proc", pid)
		if err != nil {
			t.Fatalf("target after SIGKILL of the checkpointing process: %v", err)
		}
		if st.TracerPid != 0 || st.Stopped() {
			return fmt.Errorf("target %s", st)
		}
		return nil
	})
}
