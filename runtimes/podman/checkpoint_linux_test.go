package podman_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/runtimes/podman"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

var rt runtimetest.Env

func TestMain(m *testing.M) { os.Exit(rt.Main(m)) }

// counter is a busybox shell loop that counts in its memory and writes the
// count to /count in its writable layer and to its log.
var counter = []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; echo $i; sleep 0.1; done"}

// readCount reads /count in container name. A container restored a
// moment ago may not answer podman exec yet, and the shell truncates the
// file before it writes the next count: both are read again.
func readCount(t *testing.T, p *runtimetest.Podman, name string) int {
	t.Helper()
	var n int
	testutil.Eventually(t, "container "+name+" answers with its /count", func() error {
		out, err := p.Command("exec", name, "cat", "/count").CombinedOutput()
		if err != nil {
			return fmt.Errorf("podman exec %s cat /count: %v: %s", name, err, out)
		}
		if n, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
			return fmt.Errorf("/count of %s: %q", name, out)
		}
		return nil
	})
	return n
}

// waitCount waits until container name has counted past n and returns
// the count; go test's -timeout bounds the wait.
func waitCount(t *testing.T, p *runtimetest.Podman, name string, n int) int {
	t.Helper()
	for {
		if c := readCount(t, p, name); c > n {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkpointCounter runs counter as podman runc container name, lets it
// count past 20, and checkpoints it with nodeshim (leaving it running) into
// a temporary directory with the criu that podman's runc will find too.
func checkpointCounter(t *testing.T, p *runtimetest.Podman, name string) checkpointed {
	t.Helper()
	bin := criutest.RequireOnPath(t)
	if res := p.Run(t, runtimetest.RunOptions{Name: name, Detach: true, Runtime: runtimetest.RuntimeRunc, Command: counter}); res.ExitCode != 0 {
		t.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
	}
	before := waitCount(t, p, name, 20)
	target, err := podman.Target("/proc", p.Root, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := criu.Checkpoint(context.Background(), target, criu.Options{Binary: bin, ArchiveDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return checkpointed{bin: bin, target: target, res: res, before: before}
}

// checkpointed is what checkpointCounter did: the criu it used, the
// container it dumped, the checkpoint, and the count before it.
type checkpointed struct {
	bin    criu.Binary
	target criu.Target
	res    criu.Result
	before int
}

// TestCheckpointRestoredByPodman is the proof that nodeshim's archive of a
// podman container is podman's format: nodeshim (not podman) checkpoints a
// runc container started by podman, the container runs on, checkpointctl
// reads the archive, and `podman container restore --import` of it, after
// the original is removed, brings back a container whose counter continues
// from where it was, not from 1.
func TestCheckpointRestoredByPodman(t *testing.T) {
	p := rt.Podman(t)
	const name = "nodeshim-counter"
	ck := checkpointCounter(t, p, name)
	res, before := ck.res, ck.before
	t.Logf("checkpoint: %s, %d bytes, frozen %s, total %s", res.Path, res.Size, res.Frozen, res.Total)
	// Left running: it counts on.
	after := waitCount(t, p, name, before+5)

	ctl := testutil.RequireTool(t, "NODESHIM_CHECKPOINTCTL", "checkpointctl")
	out, err := exec.Command(ctl, "show", res.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), name) || !strings.Contains(string(out), "Podman") {
		t.Errorf("checkpointctl show: %v:\n%s", err, out)
	}

	if out, err := p.Command("rm", "--force", "--time", "0", name).CombinedOutput(); err != nil {
		t.Fatalf("podman rm: %v: %s", err, out)
	}
	start := time.Now()
	out, err = p.Command("container", "restore", "--import", res.Path).CombinedOutput()
	if err != nil {
		t.Fatalf("podman container restore --import %s: %v: %s\n%s", res.Path, err, out, runtimetest.RuntimeLog(string(out)))
	}
	t.Logf("podman restored %s in %s", strings.TrimSpace(string(out)), time.Since(start))
	t.Cleanup(func() { _ = p.Command("rm", "--force", "--time", "0", name).Run() })
	restored := readCount(t, p, name)
	// A fresh start would count from 1; the restored loop goes on from
	// its count at the checkpoint, which lies between before and after.
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	if next := waitCount(t, p, name, restored); next <= restored {
		t.Fatalf("restored container does not count on: %d then %d", restored, next)
	}
	t.Logf("count %d before the checkpoint, %d after it in the original, %d in the restored container", before, after, restored)
}

// TestRestore checkpoints a podman runc container with nodeshim, removes
// it, and brings it back with podman.Restore (what `nodeshim restore` runs
// for a podman archive): the restored container is podman's, runs at the
// pid Restore reports, and its counter continues.
func TestRestore(t *testing.T) {
	p := rt.Podman(t)
	const name = "nodeshim-restore"
	ck := checkpointCounter(t, p, name)
	bin, target, res, before := ck.bin, ck.target, ck.res, ck.before
	if out, err := p.Command("rm", "--force", "--time", "0", name).CombinedOutput(); err != nil {
		t.Fatalf("podman rm: %v: %s", err, out)
	}
	// podman exactly as the harness runs it: its binary, global flags and
	// environment (private storage and containers.conf).
	cmd := p.Command()
	r, err := podman.Restore(context.Background(), res.Path, podman.RestoreOptions{
		Podman: cmd.Path, GlobalFlags: cmd.Args[1:], Env: cmd.Env, Criu: bin,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Command("rm", "--force", "--time", "0", name).Run() })
	t.Logf("restored %s (%s) at pid %d in %s", r.Name, r.ID, r.Pid, r.Took)
	if r.Name != name || r.ID != target.ID {
		t.Errorf("restored %q (%s), want %q (%s)", r.Name, r.ID, name, target.ID)
	}
	st, err := podman.FindState(p.Root, podman.BackendDefault)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Lookup(r.ID, podman.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != "running" || c.Pid != r.Pid {
		t.Errorf("podman has %s %s at pid %d, Restore said pid %d", c.Name, c.State, c.Pid, r.Pid)
	}
	restored := readCount(t, p, name)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	if next := waitCount(t, p, name, restored); next <= restored {
		t.Fatalf("restored container does not count on: %d then %d", restored, next)
	}
}

// TestRestoreRefusesOtherEngines: podman is never run for an archive that
// is not a podman container's.
func TestRestoreRefusesOtherEngines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "process.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct{ name, body string }{
		{"config.dump", `{"runtime":"host"}`}, {"spec.dump", `{"annotations":{}}`},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(m.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := podman.Restore(context.Background(), path, podman.RestoreOptions{Podman: "/nonexistent/podman"})
	if !errors.Is(err, podman.ErrNotPodmanArchive) {
		t.Fatalf("error %v, want one wrapping ErrNotPodmanArchive", err)
	}
}
