package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/runtimetest"
	"github.com/nodeshim/nodeshim/internal/testutil"
)

var rt runtimetest.Env

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rt.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestRestorePodmanCLI is `nodeshim checkpoint --container-id` then
// `nodeshim restore` of a podman runc container, as a user runs them: the
// restored container is podman's again, at the pid restore prints, and
// its counter continues.
func TestRestorePodmanCLI(t *testing.T) {
	p := rt.Podman(t)
	if _, err := criu.Find("", nil); err != nil {
		testutil.Skip(t, "needs criu: %v", err)
	}
	const name = "nodeshim-cli-restore"
	if res := p.Run(t, runtimetest.RunOptions{Name: name, Detach: true, Runtime: runtimetest.RuntimeRunc,
		Command: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done"}}); res.ExitCode != 0 {
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
		for {
			if c := count(); c > n {
				return c
			}
			time.Sleep(50 * time.Millisecond)
		}
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
	restored := count()
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint", restored, before)
	}
	if next := waitPast(restored); next <= restored {
		t.Fatalf("restored container does not count on: %d then %d", restored, next)
	}
}
