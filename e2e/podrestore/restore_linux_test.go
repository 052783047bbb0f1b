package podrestore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/image"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// cluster2 is a cluster whose kubelet runs on containerd 2.x.
var cluster2 = clustertest.Env{Containerd2: true}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := cluster2.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

const counterScript = "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done"

// TestPodFromCheckpointImage: on the single-node cluster with containerd
// 2.x as kubelet's runtime, nodeshim checkpoints a Pod's container
// (resolved by kubelet's labels through CRI), turns the archive into a
// checkpoint image and imports it with ctr; the Pod is deleted, and a new
// Pod whose container image is the checkpoint image starts restored
// through kubelet and CRI: its counter goes on from where it was.
func TestPodFromCheckpointImage(t *testing.T) {
	c := cluster2.Cluster(t)
	bin := criutest.Require(t)
	cs, err := kubernetes.NewForConfig(c.API.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	orig := counterPod("counter", runtimetest.BusyboxImage)
	runPod(t, cs, orig)
	before := c.Count(t, orig.Name, "counter", 5)

	dir := t.TempDir()
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Containerd.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		Model:    status.New(nil),
	})
	defer svc.Close()
	res, err := svc.Checkpoint(ctx, criu.ContainerRef{Namespace: orig.Namespace, Pod: orig.Name, Container: "counter"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref := "localhost/nodeshim/counter-checkpoint:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	file := filepath.Join(t.TempDir(), "counter.oci.tar")
	writeImage(t, res.Path, ref, file)
	if out, err := c.Containerd.Ctr("images", "import", file).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v: %s", file, err, out)
	}
	if err := c.Containerd.WaitImage(ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Containerd.Ctr("images", "rm", ref).Run() })
	clustertest.DeletePod(t, cs, orig.Name)

	start := time.Now()
	restored := counterPod("counter-restored", ref)
	runPod(t, cs, restored)
	running := time.Since(start)
	n := c.Count(t, restored.Name, "counter", 0)
	if n < before {
		t.Fatalf("Pod %s counts %d, below the %d seen before the checkpoint: it was not restored", restored.Name, n, before)
	}
	next := c.Count(t, restored.Name, "counter", n)
	t.Logf("%s: checkpoint %s (frozen %s, %d bytes); Pod from the checkpoint image Running in %s; count %d before, %d then %d",
		c.Containerd.Version, res.Total.Round(time.Millisecond), res.Frozen.Round(time.Millisecond), res.Size, running.Round(time.Millisecond), before, n, next)
}

// counterPod is a Pod of one container, "counter", counting in /count,
// with image (never pulled).
func counterPod(name, img string) *corev1.Pod {
	var grace int64
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "counter", Image: img, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", counterScript},
			}},
		},
	}
}

// runPod creates pod and waits until it is Running; go test's -timeout
// bounds the wait.
func runPod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clustertest.DeletePod(t, cs, pod.Name) })
	for {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			return
		case corev1.PodFailed, corev1.PodSucceeded:
			t.Fatalf("Pod %s is %s: %+v", pod.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		for _, st := range p.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
				t.Logf("Pod %s: %s: %s", pod.Name, w.Reason, w.Message)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeImage writes the checkpoint image ref of the archive to file.
func writeImage(t *testing.T, archive, ref, file string) {
	t.Helper()
	in, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(in, ref, out); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
