//go:build nodevm

package nodetest

// The RuntimeClass scenario's file sorts after the CRI scenarios' (see
// workload_node_test.go): it starts kubelet.

import (
	"context"
	"encoding/json"
	"fmt"
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
// RuntimeClass runs fresh; nodeshim serve's node API (`nodeshim
// checkpoint --namespace --pod`) takes a pod checkpoint of it, one
// freeze for both containers, into serve's checkpoint directory, the one
// nodeshim-runc.json names; the Pod is deleted, and a new Pod under the
// RuntimeClass, annotated restore.nodeshim.io/checkpoint with the pod
// checkpoint's name, runs restored through an unmodified kubelet: both
// counters keep their tokens and go on from where they were.
func TestRuntimeClassRestoresPodOnNode(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	cs := startKubelet(t)
	waitNodeReady(t, cs)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: nodevm.RuntimeClassHandler}, Handler: nodevm.RuntimeClassHandler}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const ns = "nodeshim-runtimeclass"
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
	t.Logf("fresh Pod under RuntimeClass %s Running %s after its creation; pod checkpoint through the node API %s (frozen %.3fs, total %.3fs); restored Pod Running %s after its creation",
		nodevm.RuntimeClassHandler, ms(tFresh), ms(tCheckpoint), ck.FrozenSeconds, ck.TotalSeconds, ms(tRestore))
}
