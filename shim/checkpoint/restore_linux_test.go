package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestRestoreContainerd checkpoints a container of a real containerd 1.6
// CRI pod through the service, removes it, and restores the archive with
// RestoreContainerd into a runc container in the same pod: a fresh root
// from the container's image with the archive's changes, and the counter
// goes on from where it was.
func TestRestoreContainerd(t *testing.T) {
	c := rt.Containerd(t)
	bin := criutest.Require(t)
	runc := testutil.RequireBinary(t, "runc")
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: workload(0)})
	before := waitCount(t, ctr, 10)
	ref := criu.ContainerRef{Namespace: pod.Config.Metadata.Namespace, Pod: pod.Config.Metadata.Name, Container: ctr.Name}
	dir := t.TempDir()
	svc := containerdService(t, c, bin, dir, status.New(nil))
	res, err := svc.Checkpoint(context.Background(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctr.Stop(t, 0)
	ctr.Remove(t)

	runcRoot := t.TempDir()
	r, err := RestoreContainerd(context.Background(), res.Path, RestoreOptions{
		Criu: bin, Runc: runc, RuncRoot: runcRoot, Ctr: c.Ctr().Path, ContainerdAddress: c.Address, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(runc, "--root", runcRoot, "delete", "--force", r.ID).CombinedOutput(); err != nil {
			t.Errorf("runc delete %s: %v: %s", r.ID, err, out)
		}
		if out, err := c.Ctr("images", "unmount", "--rm", r.Rootfs).CombinedOutput(); err != nil {
			t.Errorf("ctr images unmount %s: %v: %s", r.Rootfs, err, out)
		}
	})
	t.Logf("restored %s at pid %d in %s (bundle %s)", r.ID, r.Pid, r.Took, r.Bundle)
	read := func() int {
		for {
			// The shell truncates /count before it writes the next
			// number: an empty read is retried.
			b, err := os.ReadFile(filepath.Join(r.Rootfs, "count"))
			if err != nil {
				t.Fatalf("/count of the restored container: %v", err)
			}
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	restored := read()
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	next := read()
	for ; next <= restored; next = read() {
		if st, err := criu.ReadProcState("/proc", r.Pid); err != nil || st.Gone() {
			t.Fatalf("restored container stopped counting at %d: %v %v", next, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("count %d before the checkpoint, %d then %d in the restored container", before, restored, next)
	// It runs in the namespaces it shared with its pod (network, IPC,
	// UTS), as the original did.
	b, err := os.ReadFile(filepath.Join(r.Bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	nsFile := map[specs.LinuxNamespaceType]string{specs.NetworkNamespace: "net", specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts"}
	joined := 0
	for _, ns := range spec.Linux.Namespaces {
		name, ok := nsFile[ns.Type]
		if !ok || ns.Path == "" {
			continue
		}
		joined++
		var want, got unix.Stat_t
		if err := unix.Stat(ns.Path, &want); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(filepath.Join("/proc", strconv.Itoa(r.Pid), "ns", name), &got); err != nil {
			t.Fatal(err)
		}
		if got.Ino != want.Ino {
			t.Errorf("restored container in %s namespace %d, its pod's is %d (%s)", ns.Type, got.Ino, want.Ino, ns.Path)
		}
	}
	if joined != len(nsFile) {
		t.Errorf("spec joins %d of the pod's network, IPC and UTS namespaces by path, want all", joined)
	}
}

// TestRestoreContainerdRefusesOtherEngines: nothing runs for an archive of
// another engine.
func TestRestoreContainerdRefusesOtherEngines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.tar")
	cmd := exec.Command("tar", "-C", "testdata/process-archive", "-cf", path, "checkpoint", "config.dump", "spec.dump")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	_, err := RestoreContainerd(context.Background(), path, RestoreOptions{Runc: "/nonexistent", Ctr: "/nonexistent", Dir: t.TempDir()})
	if !errors.Is(err, ErrNotContainerdArchive) {
		t.Fatalf("error %v, want one wrapping ErrNotContainerdArchive", err)
	}
}
