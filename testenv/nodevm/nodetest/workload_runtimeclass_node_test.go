//go:build nodevm

package nodetest

// The RuntimeClass scenario's file sorts after the CRI scenarios' (see
// workload_node_test.go): it starts kubelet.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// podContainers are the two counting containers of twoCounterPod.
var podContainers = []string{"counter", "sidecar"}

// twoCounterPod is a Burstable Pod of the two podContainers, each running
// counterCommand from the busybox test image (never pulled), under the
// RuntimeClass nodevm.RuntimeClassHandler, with annotations.
func twoCounterPod(ns, name string, annotations map[string]string) *corev1.Pod {
	noToken, grace, rc := false, int64(1), nodevm.RuntimeClassHandler
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      nodevm.Hostname,
			RuntimeClassName:              &rc,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
		},
	}
	for _, c := range podContainers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:            c,
			Image:           runtimetest.BusyboxImage,
			ImagePullPolicy: corev1.PullNever,
			Command:         counterCommand,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		})
	}
	return pod
}

// createRunningPodContainers creates pod through the API server, deletes
// it when t ends, and waits until every one of its containers runs; it
// returns them in the Pod's order. A container that kubelet reports
// waiting for any reason but its creation fails t with kubelet's message.
func createRunningPodContainers(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) []*container {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, cs, pod.Namespace, pod.Name) })
	var out []*container
	testutil.Eventually(t, "pod "+pod.Namespace+"/"+pod.Name+" Running", func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s/%s is %s: %+v", pod.Namespace, pod.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		ids := map[string]string{}
		for _, st := range p.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
				t.Fatalf("pod %s/%s container %s: %s: %s", pod.Namespace, pod.Name, st.Name, w.Reason, w.Message)
			}
			if st.State.Running == nil {
				return fmt.Errorf("container %s: %+v", st.Name, st.State)
			}
			id, ok := strings.CutPrefix(st.ContainerID, "containerd://")
			if !ok {
				return fmt.Errorf("container %s's ID %q", st.Name, st.ContainerID)
			}
			ids[st.Name] = id
		}
		out = out[:0]
		for _, c := range pod.Spec.Containers {
			if ids[c.Name] == "" {
				return fmt.Errorf("phase %s, container %s not running yet", p.Status.Phase, c.Name)
			}
			out = append(out, &container{ID: ids[c.Name], Name: c.Name})
		}
		return nil
	})
	return out
}

// podCheckpointResult is the part of `nodeshim checkpoint --namespace NS
// --pod POD -o json` read here.
type podCheckpointResult struct {
	Path          string   `json:"path"`
	FrozenSeconds float64  `json:"frozenSeconds"`
	TotalSeconds  float64  `json:"totalSeconds"`
	Containers    []string `json:"containers"`
}

// TestRuntimeClassRestoresPodOnNode: on the node's kubelet (systemd
// cgroup driver) and containerd 2.2, with nodeshim-runc installed in
// /opt/nodeshim/bin as containerd's `nodeshim` runtime handler (the
// stanza of docs/runtimeclass.md) and the RuntimeClass nodeshim created
// through the API server, a two-container counter Pod under the
// RuntimeClass runs fresh and then restored from its pod checkpoint
// (testRuntimeClassRestore).
func TestRuntimeClassRestoresPodOnNode(t *testing.T) {
	requireNode(t)
	testRuntimeClassRestore(t, "nodeshim-runtimeclass", nodeContainerdVersion(t, nodevm.NodeBin))
}

// TestRuntimeClassRestoresPodOnContainerd24Node is
// TestRuntimeClassRestoresPodOnNode on containerd v2.4, which has no
// restore of its own: its containerd.service runs v2.4's binaries
// (nodevm.Containerd24DropIn) with a root and state of their own, the
// same socket, handlers and kubelet, as an operator's upgrade would; the
// node's own containerd is put back afterwards.
func TestRuntimeClassRestoresPodOnContainerd24Node(t *testing.T) {
	requireNode(t)
	version := nodeContainerdVersion(t, nodevm.Containerd24Bin)
	if !strings.HasPrefix(version, "v2.4.") {
		t.Fatalf("%s holds containerd %s, not v2.4", nodevm.Containerd24Bin, version)
	}
	useContainerd24(t, version)
	testRuntimeClassRestore(t, "nodeshim-runtimeclass-24", version)
}

// nodeContainerdVersion is the version of dir's containerd, as
// `containerd --version` says it ("containerd github.com/containerd/
// containerd/v2 v2.2.9": "v2.2.9").
func nodeContainerdVersion(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "containerd")
	if _, err := os.Stat(bin); err != nil {
		testutil.Skip(t, "no containerd in %s (nodevm without -containerd24?): %v", dir, err)
	}
	f := strings.Fields(run(t, bin, "--version"))
	if len(f) < 3 {
		t.Fatalf("%s --version: %q", bin, f)
	}
	return f[2]
}

// serverVersion is the version the containerd answering on the node's
// socket gives, from `ctr version`.
func serverVersion() (string, error) {
	out, err := runErr(ctrBin, "--address", nodevm.ContainerdSocket, "version")
	if err != nil {
		return "", err
	}
	_, server, ok := strings.Cut(out, "Server:")
	if !ok {
		return "", fmt.Errorf("ctr version: no server in %q", out)
	}
	for _, line := range strings.Split(server, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("ctr version: no server version in %q", out)
}

// restartContainerd restarts containerd.service (kubelet stopped) and
// waits until the containerd that answers is want.
func restartContainerd(t *testing.T, want string) {
	t.Helper()
	if out, err := runErr("systemctl", "daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, out)
	}
	if out, err := runErr("systemctl", "restart", "containerd"); err != nil {
		t.Fatalf("systemctl restart containerd: %v %s", err, out)
	}
	testutil.Eventually(t, "containerd "+want+" answering on "+nodevm.ContainerdSocket, func() error {
		v, err := serverVersion()
		if err == nil && v != want {
			err = fmt.Errorf("containerd %s answers", v)
		}
		return err
	})
}

// useContainerd24 puts containerd v2.4 (version) in place of the node's
// containerd until t ends, kubelet stopped: containerd.service's drop-in
// nodevm.Containerd24DropIn, the test images imported into its store.
// The node's containerd is restarted in its place when t ends, after
// kubelet stops.
func useContainerd24(t *testing.T, version string) {
	t.Helper()
	own, err := serverVersion()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runErr("systemctl", "is-active", nodevm.KubeletUnitName); err == nil {
		t.Fatalf("kubelet is %s: a scenario before this one left it running", strings.TrimSpace(out))
	}
	dropIn := filepath.Join(nodevm.ContainerdDropInDir, "50-containerd-2.4.conf")
	if err := os.MkdirAll(nodevm.ContainerdDropInDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte(nodevm.Containerd24DropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dropIn); err != nil {
			t.Error(err)
		}
		restartContainerd(t, own)
	})
	restartContainerd(t, version)
	if err := importTestImages(filepath.Join(nodevm.Containerd24Bin, "ctr")); err != nil {
		t.Fatal(err)
	}
}

// testRuntimeClassRestore: on the node's kubelet and the containerd
// (version) that answers on its socket, with the RuntimeClass nodeshim
// created through the API server, a two-container counter Pod in ns under
// the RuntimeClass runs fresh; nodeshim serve's node API (`nodeshim
// checkpoint --namespace --pod`) takes a pod checkpoint of it, one
// freeze for both containers, into serve's checkpoint directory, the one
// nodeshim-runc.json names; the Pod is deleted, and a new Pod under the
// RuntimeClass, annotated restore.nodeshim.io/checkpoint with the pod
// checkpoint's name, runs restored through an unmodified kubelet: both
// counters keep their tokens and go on from where they were.
func testRuntimeClassRestore(t *testing.T, ns, version string) {
	ctx := context.Background()
	cs := startKubelet(t)
	waitNodeReady(t, cs)
	testutil.Eventually(t, "node "+nodevm.Hostname+" on containerd "+version, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err == nil && n.Status.NodeInfo.ContainerRuntimeVersion != "containerd://"+strings.TrimPrefix(version, "v") {
			err = fmt.Errorf("kubelet reports %s", n.Status.NodeInfo.ContainerRuntimeVersion)
		}
		return err
	})
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: nodevm.RuntimeClassHandler}, Handler: nodevm.RuntimeClassHandler}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	createNamespace(t, cs, ns)
	testutil.Eventually(t, "ServiceAccount "+ns+"/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	orig := twoCounterPod(ns, "shop", nil)
	start := time.Now()
	ctrs := createRunningPodContainers(t, cs, orig)
	tFresh := time.Since(start)
	tokens, before := make([]string, len(ctrs)), make([]int, len(ctrs))
	for i, c := range ctrs {
		tokens[i], before[i] = c.waitCount(t, 5)
	}

	start = time.Now()
	out, err := runErr(nodeshimBin, "checkpoint", "--namespace", ns, "--pod", orig.Name, "--socket", nodeshimSock, "-o", "json")
	tCheckpoint := time.Since(start)
	if err != nil {
		t.Fatalf("nodeshim checkpoint --namespace %s --pod %s: %v\n%s", ns, orig.Name, err, out)
	}
	var ck podCheckpointResult
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("nodeshim checkpoint -o json: %v: %s", err, out)
	}
	if ck.Path == "" || ck.FrozenSeconds <= 0 || strings.Join(ck.Containers, ",") != strings.Join(podContainers, ",") {
		t.Fatalf("pod checkpoint through the node API: %+v; want a pod checkpoint of %v with its frozen time", ck, podContainers)
	}
	if dir := filepath.Join(nodevm.NodeshimRoot, "checkpoints"); filepath.Dir(ck.Path) != dir {
		t.Fatalf("pod checkpoint %s is not in serve's checkpoint directory %s", ck.Path, dir)
	}
	t.Cleanup(func() { _, _ = runErr("rm", "-rf", ck.Path) })
	deletePod(t, cs, ns, orig.Name)

	restored := twoCounterPod(ns, "shop-restored", map[string]string{restoring.AnnotationCheckpoint: filepath.Base(ck.Path)})
	start = time.Now()
	rctrs := createRunningPodContainers(t, cs, restored)
	tRestore := time.Since(start)
	for i, c := range rctrs {
		token, first := c.waitCount(t, 0)
		if token != tokens[i] || first < before[i] {
			t.Fatalf("Pod %s's %s counts %d with token %s; before the checkpoint %d with token %s: it started afresh", restored.Name, c.Name, first, token, before[i], tokens[i])
		}
		_, next := c.waitCount(t, first)
		t.Logf("%s: count %d before the pod checkpoint, %d restored, then %d (token %s kept)", c.Name, before[i], first, next, token)
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("containerd %s: fresh Pod under RuntimeClass %s Running %s after its creation; pod checkpoint through the node API %s (frozen %.3fs, total %.3fs); restored Pod Running %s after its creation",
		version, nodevm.RuntimeClassHandler, ms(tFresh), ms(tCheckpoint), ck.FrozenSeconds, ck.TotalSeconds, ms(tRestore))
}
