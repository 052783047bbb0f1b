package checkpoint

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestCheckpointContainerdPod checkpoints a container of a real containerd
// 1.6 CRI pod (its own network namespace on the CNI bridge, the pod's
// IPC and UTS namespaces joined by path) through the service, as kubelet's
// API asks: resolved by its Kubernetes names, dumped with the options runc
// passes. The container runs on and checkpointctl reads the archive.
func TestCheckpointContainerdPod(t *testing.T) {
	c := rt.Containerd(t)
	bin := criutest.Require(t)
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done"}})
	ref := criu.ContainerRef{Namespace: pod.Config.Metadata.Namespace, Pod: pod.Config.Metadata.Name, Container: ctr.Name}
	dir := t.TempDir()
	svc := containerdService(t, c, bin, dir, status.New(nil))
	res, err := svc.Checkpoint(context.Background(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of %s: %s, %d bytes, frozen %s, total %s", ref, res.Path, res.Size, res.Frozen, res.Total)
	// It counts on after the checkpoint (go test's -timeout bounds the wait).
	waitCount(t, ctr, count(t, ctr))
	ctl := testutil.RequireTool(t, "NODESHIM_CHECKPOINTCTL", "checkpointctl")
	out, err := exec.Command(ctl, "show", res.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "counter") {
		t.Errorf("checkpointctl show: %v:\n%s", err, out)
	}
	t.Logf("%s", out)
}

// containerdService is a checkpoint service enabled into dir, resolving
// through containerd c's CRI socket and dumping with bin; the test's
// cleanup closes it.
func containerdService(t *testing.T, c *runtimetest.Containerd, bin criu.Binary, dir string, model *status.Model) *Service {
	t.Helper()
	svc := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		// Beside dir, which the failure tests want left as it was.
		LockDir: filepath.Join(t.TempDir(), "locks"),
		Model:   model,
	})
	t.Cleanup(func() { svc.Close() })
	return svc
}
