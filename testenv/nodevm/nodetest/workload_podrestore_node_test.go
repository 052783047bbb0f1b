//go:build nodevm

package nodetest

// The kubelet restore scenario's file sorts after the CRI scenarios' (see
// workload_node_test.go): it starts kubelet.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

var checkpointctlBin = filepath.Join(nodevm.NodeBin, "checkpointctl")

// counterPodSpec is a Burstable Pod of one container, counter, running
// counterCommand from img (never pulled) on the node.
func counterPodSpec(ns, name, img string) *corev1.Pod {
	noToken, grace := false, int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      nodevm.Hostname,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "counter",
				Image:           img,
				ImagePullPolicy: corev1.PullNever,
				Command:         counterCommand,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}},
		},
	}
}

// createRunningPod creates pod through the API server, deletes it when t
// ends (through the API, so that kubelet stops it), and waits until it is
// Running; it returns its container.
func createRunningPod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) *container {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, cs, pod.Namespace, pod.Name) })
	var id string
	testutil.Eventually(t, "pod "+pod.Namespace+"/"+pod.Name+" Running", func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s/%s is %s: %+v", pod.Namespace, pod.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		var ok bool
		if id, ok = strings.CutPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://"); !ok {
			return fmt.Errorf("container ID %q", p.Status.ContainerStatuses[0].ContainerID)
		}
		return nil
	})
	return &container{ID: id, Name: pod.Spec.Containers[0].Name}
}

// deletePod deletes a Pod through the API server and waits until it is
// gone (kubelet has stopped it and confirmed).
func deletePod(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s/%s: %v", ns, name, err)
		return
	}
	testutil.Eventually(t, "pod "+ns+"/"+name+" gone", func() error {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

// TestPodFromCheckpointImageOnKubeletNode: on the node's kubelet (systemd
// cgroup driver) and containerd 2.2, a counter Pod created through the API
// server is checkpointed through nodeshim serve's node API (`nodeshim
// checkpoint --namespace --pod --container`, resolved through CRI by
// kubelet's labels) and keeps counting; checkpointctl reads the archive
// (the container's name and engine, its process tree with the counting
// shell); `nodeshim checkpoint image` makes it a checkpoint image, which
// `ctr -n k8s.io images import` puts in kubelet's image store; the Pod is
// deleted, and a new Pod created through the API server with the
// checkpoint image as its container's image runs restored through
// kubelet's CreateContainer and StartContainer: its counter keeps its
// token and goes on from where it was. (containerd 2.4 has no restore
// through CreateContainer: docs/checkpoint.md says what restores there.)
func TestPodFromCheckpointImageOnKubeletNode(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	cs := startKubelet(t)
	waitNodeReady(t, cs)
	const ns = "nodeshim-restore"
	createNamespace(t, cs, ns)
	testutil.Eventually(t, "ServiceAccount "+ns+"/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	orig := counterPodSpec(ns, "counter", runtimetest.BusyboxImage)
	c := createRunningPod(t, cs, orig)
	token, before := c.waitCount(t, 5)

	start := time.Now()
	out, err := runErr(nodeshimBin, "checkpoint", "--namespace", ns, "--pod", orig.Name, "--container", c.Name,
		"--socket", nodeshimSock, "-o", "json")
	tCheckpoint := time.Since(start)
	if err != nil {
		diagnoseCheckpoint(t, c)
		t.Fatal(err)
	}
	var ck checkpointResult
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("nodeshim checkpoint -o json: %v: %s", err, out)
	}
	if ck.Path == "" || ck.FrozenSeconds <= 0 || ck.PagesWritten == 0 {
		t.Errorf("checkpoint through the node API: %+v; want an archive with its frozen time and pages", ck)
	}
	_, after := c.waitCount(t, before)

	// checkpointctl reads the archive as it reads containerd's and CRI-O's.
	show := run(t, checkpointctlBin, "show", ck.Path)
	if !strings.Contains(show, c.Name) || !strings.Contains(show, "containerd") {
		t.Errorf("checkpointctl show %s does not name the container %s and its engine containerd:\n%s", ck.Path, c.Name, show)
	}
	tree := run(t, checkpointctlBin, "inspect", "--ps-tree", ck.Path)
	if !strings.Contains(tree, "sh") {
		t.Errorf("checkpointctl inspect --ps-tree %s shows no counting shell:\n%s", ck.Path, tree)
	}

	ref := "localhost/nodeshim/counter-checkpoint:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	file := filepath.Join(t.TempDir(), "counter.oci.tar")
	start = time.Now()
	run(t, nodeshimBin, "checkpoint", "image", ck.Path, "--tag", ref, "--output", file, "-o", "json")
	tImage := time.Since(start)
	start = time.Now()
	run(t, ctrBin, "-n", runtimetest.CRINamespace, "images", "import", file)
	tImport := time.Since(start)
	t.Cleanup(func() { _, _ = runErr(ctrBin, "-n", runtimetest.CRINamespace, "images", "rm", ref) })
	deletePod(t, cs, ns, orig.Name)

	start = time.Now()
	rc := createRunningPod(t, cs, counterPodSpec(ns, "counter-restored", ref))
	tRestore := time.Since(start)
	restoredToken, first := rc.waitCount(t, 0)
	if restoredToken != token || first < before {
		t.Fatalf("the Pod from %s counts %d with token %s; before the checkpoint %d with token %s: it started afresh", ref, first, restoredToken, before, token)
	}
	_, next := rc.waitCount(t, first)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("counter %d before the checkpoint, %d after it, %d then %d in the Pod from the checkpoint image", before, after, first, next)
	t.Logf("checkpoint through the node API %s (frozen %.3fs, CRIU total %.3fs, %d pages); checkpoint image %s; ctr import %s; Pod from it Running %s after its creation",
		ms(tCheckpoint), ck.FrozenSeconds, ck.TotalSeconds, ck.PagesWritten, ms(tImage), ms(tImport), ms(tRestore))
}
