package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestRestorePodmanCLI is `nodeshim checkpoint --container-id` then
// `nodeshim restore` of a podman runc container, as a user runs them: the
// restored container is podman's again, at the pid restore prints, and
// its counter continues.
func TestRestorePodmanCLI(t *testing.T) {
	p := rt.Podman(t)
	criutest.Require(t)
	const name = "nodeshim-cli-restore"
	if res := p.Run(t, runtimetest.RunOptions{Name: name, Detach: true, Runtime: runtimetest.RuntimeRunc,
		Command: criCounter}); res.ExitCode != 0 {
		t.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
	}
	count := func() int {
		out, err := p.Command("exec", name, "cat", "/count").CombinedOutput()
		n, cerr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || cerr != nil {
			return -1
		}
		return n
	}
	waitPast := func(n int) int {
		var c int
		testutil.Eventually(t, fmt.Sprintf("container %s counts past %d", name, n), func() error {
			if c = count(); c <= n {
				return fmt.Errorf("it counts %d (-1: /count cannot be read)", c)
			}
			return nil
		})
		return c
	}
	before := waitPast(10)

	dir := t.TempDir()
	out, _, err := runSplit(t, "checkpoint", "--container-id", name, "--podman-root", p.Root, "--root-dir", dir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ck checkpointOutput
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if out, err := p.Command("rm", "--force", "--time", "0", name).CombinedOutput(); err != nil {
		t.Fatalf("podman rm: %v: %s", err, out)
	}
	// podman's private configuration, as the harness runs it.
	cmd := p.Command()
	for _, kv := range cmd.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "CONTAINERS_") {
			t.Setenv(k, v)
		}
	}
	out, stderr, err := runSplit(t, "restore", "--podman", cmd.Path, "--podman-root", p.Root, "--podman-runroot", p.RunRoot, "-o", "json", ck.Path)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr)
	}
	t.Cleanup(func() { _ = p.Command("rm", "--force", "--time", "0", name).Run() })
	var rs restoreOutput
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	t.Logf("restore: %+v", rs)
	if rs.Engine != string(criu.EnginePodman) || rs.Name != name || rs.Pid <= 0 {
		t.Fatalf("restore output %+v", rs)
	}
	ins, err := p.Command("container", "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil || strings.TrimSpace(string(ins)) != strconv.Itoa(rs.Pid) {
		t.Errorf("podman has %s at pid %q (%v), restore said %d", name, ins, err, rs.Pid)
	}
	// On a loaded machine the restored container may not answer podman
	// exec the instant the restore returns.
	restored := waitPast(-1)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint", restored, before)
	}
	if next := waitPast(restored); next <= restored {
		t.Fatalf("restored container does not count on: %d then %d", restored, next)
	}
}

// TestRestoreContainerdCLI is `nodeshim restore` of an archive that the
// checkpoint service wrote for a containerd CRI container: it comes back
// as a runc container in its pod, where restore says, and counts on.
func TestRestoreContainerdCLI(t *testing.T) {
	c := rt.Containerd(t)
	bin := criutest.Require(t)
	runc := testutil.RequireBinary(t, "runc")
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: criCounter})
	waitCRICount(t, ctr, 0)
	dir := t.TempDir()
	svc := criCheckpointService(t, c, bin, dir)
	ref := criu.ContainerRef{Namespace: pod.Config.Metadata.Namespace, Pod: pod.Config.Metadata.Name, Container: ctr.Name}
	res, err := svc.Checkpoint(context.Background(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctr.Stop(t, 0)
	ctr.Remove(t)

	runcRoot := t.TempDir()
	out, stderr, err := runSplit(t, "restore", "--runc", runc, "--runc-root", runcRoot, "--ctr", c.Ctr().Path,
		"--containerd-address", c.Address, "--restore-dir", t.TempDir(), "-o", "json", res.Path)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr)
	}
	var rs restoreOutput
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(runc, "--root", runcRoot, "delete", "--force", rs.ContainerID).CombinedOutput(); err != nil {
			t.Errorf("runc delete %s: %v: %s", rs.ContainerID, err, out)
		}
		if out, err := c.Ctr("images", "unmount", "--rm", rs.Rootfs).CombinedOutput(); err != nil {
			t.Errorf("ctr images unmount %s: %v: %s", rs.Rootfs, err, out)
		}
	})
	t.Logf("restore: %+v", rs)
	if rs.Engine != string(criu.EngineContainerd) || rs.Pid <= 0 || rs.RuncRoot != runcRoot {
		t.Fatalf("restore output %+v", rs)
	}
	st, err := exec.Command(runc, "--root", runcRoot, "state", rs.ContainerID).Output()
	if err != nil || !strings.Contains(string(st), `"status": "running"`) || !strings.Contains(string(st), fmt.Sprintf(`"pid": %d`, rs.Pid)) {
		t.Errorf("runc state %s: %v: %s", rs.ContainerID, err, st)
	}
}
