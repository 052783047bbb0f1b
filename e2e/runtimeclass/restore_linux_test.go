// Package runtimeclass_test runs nodeshim's RuntimeClass on a single-node
// cluster whose kubelet runs on containerd 2.2, 2.3 and 2.4: a Pod with
// runtimeClassName nodeshim and the restore.nodeshim.io/checkpoint
// annotation starts restored through an unmodified kubelet.
package runtimeclass_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// handler is the containerd runtime handler and RuntimeClass name.
const handler = "nodeshim"

// envContainerd22 and envContainerd24 name the directories of containerd
// v2.2.9's and v2.4.2's binaries (mk/runtime.mk builds them).
const (
	envContainerd22 = "NODESHIM_CONTAINERD22"
	envContainerd24 = "NODESHIM_CONTAINERD24"
)

var (
	// handlers are containerd's runtime handlers beside runc: nodeshim's.
	handlers []runtimetest.Handler
	// ckptDir is the handler's checkpoint directory.
	ckptDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeshim-runtimeclass-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins := filepath.Join(dir, "bin")
	ckptDir = filepath.Join(dir, "checkpoints")
	for _, d := range []string{bins, ckptDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for _, b := range restoring.Binaries {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bins, b), "github.com/nodeshim/nodeshim/cmd/"+b).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b, err, out)
			return 1
		}
	}
	if runc, err := exec.LookPath(runtimetest.RuntimeRunc); err == nil {
		b, _ := json.Marshal(restoring.Config{Runtime: runc, CheckpointDir: ckptDir, WorkDir: filepath.Join(dir, "work"), Criu: os.Getenv("NODESHIM_CRIU")})
		if err := os.WriteFile(restoring.ConfigPath(filepath.Join(bins, "nodeshim-runc")), b, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	handlers = []runtimetest.Handler{{
		Name: handler, Binary: filepath.Join(bins, "nodeshim-runc"), PodAnnotations: []string{"restore.nodeshim.io/*"},
	}}
	return m.Run()
}

// TestPodRestoredUnderRuntimeClass runs testPodRestored on a cluster whose
// kubelet runs on containerd v2.2.9, then 2.3.7 (NODESHIM_CONTAINERD2),
// then v2.4.2, which has no restore of its own; one cluster at a time,
// each closed (a leak fails the test) before the next starts.
func TestPodRestoredUnderRuntimeClass(t *testing.T) {
	for _, tc := range []struct{ name, env, version string }{
		{"containerd-2.2", envContainerd22, "v2.2."},
		{"containerd-2.3", runtimetest.EnvContainerd2, "v2.3."},
		{"containerd-2.4", envContainerd24, "v2.4."},
	} {
		env := &clustertest.Env{Containerd2: true, Handlers2: handlers, Containerd2Dir: os.Getenv(tc.env)}
		t.Run(tc.name, func(t *testing.T) {
			if env.Containerd2Dir == "" {
				testutil.Skip(t, "needs containerd %sx: %s names the directory of its binaries (make test builds it under .tools)", tc.version, tc.env)
			}
			testPodRestored(t, env, tc.version)
		})
		if err := env.Close(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

const counterScript = "i=0; while true; do i=$((i+1)); echo $i > /count.new; mv /count.new /count; sleep 0.1; done"

// testPodRestored: nodeshim takes a pod checkpoint of a
// two-container Pod into the checkpoint directory; the Pod is deleted, and
// a new Pod with runtimeClassName nodeshim, the same containers and
// images, and the annotation naming the pod checkpoint, reaches Running
// through kubelet with both counters going on from where they were. The checkpointed Pod ran under the
// RuntimeClass without the annotation, fresh; one naming a file outside
// the checkpoint directory is refused with the reason in its status.
func testPodRestored(t *testing.T, env *clustertest.Env, version string) {
	c := env.Cluster(t)
	if !strings.Contains(c.Containerd.Version, " "+version) {
		t.Fatalf("kubelet's containerd is %s, want %s", c.Containerd.Version, version)
	}
	bin := criutest.Require(t)
	cs, err := kubernetes.NewForConfig(c.API.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: handler}, Handler: handler}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	orig := counterPod("counter", nil)
	runPod(t, cs, orig)
	var before []int
	for _, ctr := range containers {
		before = append(before, c.Count(t, orig.Name, ctr, 5))
	}
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: ckptDir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Containerd.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    status.New(nil),
	})
	defer svc.Close()
	res, err := svc.CheckpointPod(ctx, checkpoint.PodRef{Namespace: orig.Namespace, Name: orig.Name}, checkpoint.PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(res.Path) })
	clustertest.DeletePod(t, cs, orig.Name)

	start := time.Now()
	restored := counterPod("counter-restored", map[string]string{restoring.AnnotationCheckpoint: filepath.Base(res.Path)})
	runPod(t, cs, restored)
	running := time.Since(start)
	for i, ctr := range containers {
		n := c.Count(t, restored.Name, ctr, 0)
		if n < before[i] {
			t.Fatalf("Pod %s's %s counts %d, below the %d seen before the checkpoint: it was not restored", restored.Name, ctr, n, before[i])
		}
		next := c.Count(t, restored.Name, ctr, n)
		t.Logf("%s: count %d before, %d then %d", ctr, before[i], n, next)
	}
	t.Logf("%s: pod checkpoint %s (frozen %s); Pod under RuntimeClass %s Running restored in %s",
		c.Containerd.Version, res.Total.Round(time.Millisecond), res.Frozen.Round(time.Millisecond), handler, running.Round(time.Millisecond))

	hostile := counterPod("counter-hostile", map[string]string{restoring.AnnotationCheckpoint: "/etc/passwd"})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, hostile, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clustertest.DeletePod(t, cs, hostile.Name) })
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, hostile.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// kubelet counts a container waiting to be restarted as running in
		// the Pod's phase: what the container is decides.
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Running != nil {
				t.Fatalf("Pod %s naming /etc/passwd runs: %+v", hostile.Name, st)
			}
		}
		if sts := p.Status.ContainerStatuses; len(sts) > 0 && sts[0].State.Waiting != nil &&
			strings.Contains(sts[0].State.Waiting.Message, "not under the checkpoint directory") {
			t.Logf("Pod %s: %s: %s", hostile.Name, sts[0].State.Waiting.Reason, sts[0].State.Waiting.Message)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containers are the two containers of the counter Pod.
var containers = []string{"counter", "sidecar"}

// counterPod is a Pod of two containers counting in /count, under the
// nodeshim RuntimeClass, with annotations.
func counterPod(name string, annotations map[string]string) *corev1.Pod {
	var grace int64
	rc := handler
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &rc,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: containers[0], Image: runtimetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", counterScript},
			}, {
				Name: containers[1], Image: runtimetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
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
				t.Fatalf("Pod %s: %s: %s", pod.Name, w.Reason, w.Message)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}
