//go:build nodevm

package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// preDumpScript holds %d bytes in a shell variable (anonymous memory, most
// of it written by the first pre-dump round alone) and counts in %s every
// 20 ms.
const preDumpScript = `x=$(head -c %d /dev/zero | tr '\000' a); i=0
while :; do i=$((i+1)); echo $i > %s; sleep 0.02; done`

// readCount reads the counter's file.
func readCount(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// TestPreDumpCheckpointRestoreContinues: the node's 6.12 kernel tracks
// dirty memory, so a checkpoint with two pre-dump rounds runs there: a
// counting shell, the init of its own PID namespace (so that its restore
// on this node gets a namespace of its own), is checkpointed with
// PreDump 2 and runs on; the archive holds both rounds under
// checkpoint/parent; once the original is killed, the restored shell
// counts on from the checkpointed count.
func TestPreDumpCheckpointRestoreContinues(t *testing.T) {
	requireNode(t)
	bin, err := criu.Find("", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := criu.CheckPreDump(t.Context(), bin); err != nil {
		t.Fatalf("the node's kernel (CONFIG_MEM_SOFT_DIRTY=y) refuses pre-dump: %v", err)
	}
	unshare := testutil.RequireBinary(t, "unshare")
	count := filepath.Join(t.TempDir(), "count")
	cmd := exec.Command(unshare, "--pid", "--fork", "setsid", "sh", "-c", fmt.Sprintf(preDumpScript, 64<<20, count))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	var pid int
	testutil.Eventually(t, "the counting shell runs in its PID namespace", func() error {
		c, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
		if err != nil || len(strings.Fields(string(c))) == 0 {
			return fmt.Errorf("unshare has no child yet: %v", err)
		}
		if n, err := readCount(count); err != nil || n < 5 {
			return fmt.Errorf("count %d: %v", n, err)
		}
		pid, err = strconv.Atoi(strings.Fields(string(c))[0])
		return err
	})

	tg, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	lo, err := readCount(count)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	res, err := criu.Checkpoint(t.Context(), tg, criu.Options{Binary: bin, RootDir: root, PreDump: 2})
	if err != nil {
		t.Fatal(err)
	}
	hi, err := readCount(count)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint with 2 pre-dump rounds: %s, %d bytes, frozen %v (the rounds %v), %d pages written while frozen", res.Path, res.Size, res.Frozen, res.PreDumpFrozen, res.PagesWritten)
	if res.PreDumpFrozen <= 0 {
		t.Errorf("the rounds' own frozen time %v; want CRIU's statistics of both rounds", res.PreDumpFrozen)
	}
	// It runs on, well past the checkpoint, so that the restored count
	// (from the checkpoint's) is told from the original's last.
	testutil.Eventually(t, "the checkpointed shell runs on", func() error {
		if n, err := readCount(count); err != nil || n <= hi+250 {
			return fmt.Errorf("count %d, not past %d: %v", n, hi+250, err)
		}
		return nil
	})

	f, err := os.Open(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := archive.Validate(f)
	f.Close()
	if err != nil {
		t.Fatalf("archive %s: %v", res.Path, err)
	}
	rounds := map[string]bool{}
	for _, e := range entries {
		if dir, file := filepath.Split(e.Name); strings.HasPrefix(dir, archive.ImagesDir+"/"+archive.ParentDir) && strings.HasPrefix(file, "pages-") {
			rounds[dir] = true
		}
	}
	if len(rounds) != 2 {
		t.Errorf("archive holds pages of %d pre-dump rounds (%v), want 2", len(rounds), rounds)
	}

	// The move: the original goes (unshare ends with its child), the
	// archive is restored.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	stopped, err := readCount(count)
	if err != nil {
		t.Fatal(err)
	}
	rst, err := criu.Restore(t.Context(), res.Path, criu.RestoreOptions{Binary: bin, WorkRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(rst.Pid, syscall.SIGKILL) })
	// The restored shell rewrites the file from the checkpointed count
	// on: first a value in (lo, hi+1], below where the original stopped.
	var first int
	testutil.Eventually(t, "the restored shell counts", func() error {
		n, err := readCount(count)
		if err != nil {
			return err
		}
		if n >= stopped {
			return fmt.Errorf("count %d, not yet below the original's last %d", n, stopped)
		}
		first = n
		return nil
	})
	if first <= lo {
		t.Errorf("restored shell counts from %d, want past the checkpointed %d and below the original's last %d", first, lo, stopped)
	}
	testutil.Eventually(t, "the restored shell counts on", func() error {
		if n, err := readCount(count); err != nil || n < first+10 {
			return fmt.Errorf("count %d, want %d: %v", n, first+10, err)
		}
		return nil
	})
}
