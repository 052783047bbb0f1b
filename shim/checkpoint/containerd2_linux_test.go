package checkpoint

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestContainerd2RestoresNodeshimArchive checkpoints a container of a real
// containerd 2.3.7 CRI pod through the service, then has containerd itself
// restore it through CRI: CreateContainer in a new pod with the archive's
// path as the image, then StartContainer; the counter goes on from where
// it was. (cmd/nodeshim's TestCheckpointImageRestoredByContainerd2 does
// the same from a checkpoint image.)
func TestContainerd2RestoresNodeshimArchive(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: workload(0)})
	before := waitCount(t, ctr, 10)
	ref := criu.ContainerRef{Namespace: pod.Config.Metadata.Namespace, Pod: pod.Config.Metadata.Name, Container: ctr.Name}
	svc := containerdService(t, c, bin, t.TempDir(), status.New(nil))
	res, err := svc.Checkpoint(context.Background(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: checkpoint %s, %d bytes, frozen %s, total %s", c.Version, res.Path, res.Size, res.Frozen, res.Total)
	checkStatusDump(t, res.Path, ctr)
	ctl := testutil.RequireTool(t, "NODESHIM_CHECKPOINTCTL", "checkpointctl")
	if out, err := exec.Command(ctl, "show", res.Path).CombinedOutput(); err != nil || !strings.Contains(string(out), "counter") {
		t.Errorf("checkpointctl show: %v:\n%s", err, out)
	}
	// The original is gone before any copy of it runs.
	ctr.Stop(t, 0)
	ctr.Remove(t)

	restoreThroughCRI(t, c, res.Path, before)
}

// restoreThroughCRI creates a container from the checkpoint image (an
// archive's path or an image name) in a new pod of c, starts it, and
// checks that it counts on from at least before.
func restoreThroughCRI(t *testing.T, c *runtimetest.Containerd, img string, before int) {
	t.Helper()
	restoreNamedThroughCRI(t, c, "counter", img, before)
}

// restoreNamedThroughCRI is restoreThroughCRI of a container named name.
func restoreNamedThroughCRI(t *testing.T, c *runtimetest.Containerd, name, img string, before int) {
	t.Helper()
	pod := c.RunPod(t, runtimetest.PodOptions{})
	start := time.Now()
	ctr := pod.CreateContainer(t, runtimetest.ContainerOptions{Name: name, Image: img})
	created := time.Since(start)
	ctr.Start(t)
	t.Logf("CreateContainer %s, StartContainer (CRIU restore) %s", created, time.Since(start)-created)
	st := ctr.Status(t)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("restored container is %v", st.State)
	}
	if st.Image.GetImage() != runtimetest.BusyboxImage {
		t.Errorf("restored container's image %q, want the checkpointed container's %q", st.Image.GetImage(), runtimetest.BusyboxImage)
	}
	// The first count it has written (/count is empty between the
	// shell's truncate and its write).
	restored := waitCount(t, ctr, -1)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	next := waitCount(t, ctr, restored)
	t.Logf("count %d before the checkpoint, %d then %d in the restored container", before, restored, next)
	ctr.Stop(t, 0)
	ctr.Remove(t)
}

// checkStatusDump checks the archive's status.dump: the CRI status of
// the container, which containerd's restore reads its name, labels and
// image from.
func checkStatusDump(t *testing.T, path string, ctr *runtimetest.Container) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("archive has no %s: %v", criu.StatusDump, err)
		}
		if h.Name != criu.StatusDump {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		var st runtimeapi.ContainerStatus
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", criu.StatusDump, err)
		}
		if st.Id != ctr.ID || st.GetMetadata().GetName() != ctr.Name || st.Labels[runtimetest.LabelPodName] != ctr.Pod.Config.Metadata.Name {
			t.Errorf("%s is not the container's status: %s", criu.StatusDump, b)
		}
		return
	}
}
