package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/internal/clustertest"
	"github.com/nodeshim/nodeshim/internal/runtimetest"
	"github.com/nodeshim/nodeshim/internal/testutil"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/reporter"
)

// TestNodeReady: this machine registers as a Node with kubelet's own
// conditions, all healthy, and kubelet's Lease.
func TestNodeReady(t *testing.T) {
	c := cluster.Cluster(t)
	t.Logf("control plane %v, node Ready %v after kubelet start", c.Timings.ControlPlane, c.Timings.NodeReady)
	cs := c.API.AdminClient(t)
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[corev1.NodeConditionType]corev1.ConditionStatus{
		corev1.NodeReady:          corev1.ConditionTrue,
		corev1.NodeMemoryPressure: corev1.ConditionFalse,
		corev1.NodeDiskPressure:   corev1.ConditionFalse,
		corev1.NodePIDPressure:    corev1.ConditionFalse,
	}
	for _, cond := range n.Status.Conditions {
		if w, ok := want[cond.Type]; ok {
			if cond.Status != w {
				t.Errorf("condition %s = %s (%s: %s), want %s", cond.Type, cond.Status, cond.Reason, cond.Message, w)
			}
			delete(want, cond.Type)
		}
	}
	if len(want) > 0 {
		t.Errorf("kubelet's conditions missing: %v", want)
	}
	if v := n.Status.NodeInfo.KubeletVersion; v == "" || v == "v0.0.0-master" {
		t.Errorf("kubelet version %q: not stamped", v)
	}
	// kubelet creates its Lease right after the Node is registered.
	for {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, c.NodeName, metav1.GetOptions{})
		if err == nil {
			if l.Spec.RenewTime == nil {
				t.Error("kubelet's Lease has no renew time")
			}
			break
		}
		if !apierrors.IsNotFound(err) {
			t.Fatalf("kubelet's Lease: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeshimImage is the image the test builds from the static binary and
// imports into the node's containerd.
const nodeshimImage = "localhost/nodeshim/nodeshim:test"

// nodeshimImageTar writes the nodeshim image, the Dockerfile's run stage
// without a registry: the static binary as /usr/bin/nodeshim, its
// entrypoint, and the reporter's as /usr/bin/nodeshim-reporter. CRIU is not in it (the machine's CRIU is a dynamically
// linked build with its own loader and libraries), so the test overlay
// leaves checkpoints disabled, as the base configuration does.
func nodeshimImageTar(t *testing.T, bin, reporterBin string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	reporterData, err := os.ReadFile(reporterBin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nodeshim.oci.tar")
	files := []runtimetest.ImageFile{{Name: "usr/bin/nodeshim", Mode: 0o755, Data: data},
		{Name: "usr/bin/nodeshim-reporter", Mode: 0o755, Data: reporterData}}
	if err := runtimetest.WriteImage(path, nodeshimImage, files, []string{"/usr/bin/nodeshim"}, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// hostPaths are the host side of the DaemonSet's volumes that a loopback
// single-node test cluster moves into its own directories.
type hostPaths struct {
	state, lock, kubelet, runtimeSocket, cniConf string
	apiPort                                      int
}

// writeOverlay writes deploy/'s files into dir/base and a kustomize overlay
// into dir/overlay, and returns the overlay's directory. The overlay
// changes only what a loopback single-node cluster needs: the image (the
// local one), the host paths of state, lock, kubelet root dir, CRI socket
// and CNI configuration (the test's own), and the API server's address
// for the reporter (no kube-proxy serves the kubernetes Service here).
func writeOverlay(t *testing.T, dir string, p hostPaths) string {
	t.Helper()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	err := fs.WalkDir(Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(base, path), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	k, err := ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 {
		t.Fatalf("kustomization.yaml sets %d images, want 1", len(k.Images))
	}
	ref, tag, _ := strings.Cut(nodeshimImage, ":")
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(overlay, "kustomization.yaml"), fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
images:
- name: %s
  newName: %s
  newTag: %s
patches:
- path: loopback.yaml
`, k.Images[0].NewName, ref, tag))
	writeFile(t, filepath.Join(overlay, "loopback.yaml"), fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nodeshim
  namespace: nodeshim
spec:
  template:
    spec:
      containers:
      - name: reporter
        env:
        - name: KUBERNETES_SERVICE_HOST
          value: 127.0.0.1
        - name: KUBERNETES_SERVICE_PORT
          value: %q
      volumes:
      - name: state
        hostPath:
          path: %s
      - name: lock
        hostPath:
          path: %s
      - name: kubelet
        hostPath:
          path: %s
      - name: runtime-socket
        hostPath:
          path: %s
      - name: cni-conf
        hostPath:
          path: %s
`, strconv.Itoa(p.apiPort), p.state, p.lock, p.kubelet, p.runtimeSocket, p.cniConf))
	return overlay
}

// TestDaemonSetOnRealNode applies deploy/ (with a loopback overlay) to a
// real single-node cluster (internal/clustertest): the DaemonSet's pod is
// scheduled on this machine and runs both containers from an image built
// here, the shim serves on its socket, the reporter publishes the NodeShim*
// conditions next to kubelet's (which stay as they were) and renews its
// Lease. Deleting the DaemonSet removes the pod, and the shim leaves no
// socket, held lock or mount on the host.
func TestDaemonSetOnRealNode(t *testing.T) {
	c := cluster.Cluster(t)
	bin, _ := buildStatic(t, "v0.0.0-cluster-test", "cluster")
	tarPath := nodeshimImageTar(t, bin, buildReporter(t, "v0.0.0-cluster-test", "cluster"))
	if out, err := c.Containerd.Ctr("images", "import", tarPath).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v: %s", err, out)
	}

	dir := t.TempDir()
	p := hostPaths{
		state:         filepath.Join(dir, "state"),
		lock:          filepath.Join(dir, "nodeshim.lock"),
		kubelet:       c.KubeletRootDir,
		runtimeSocket: c.Containerd.Address,
		cniConf:       filepath.Join(c.Containerd.Dir, "cni/net.d"),
		apiPort:       c.API.Port(),
	}
	overlay := writeOverlay(t, dir, p)
	kubeconfig := c.API.Kubeconfig(t, "e2e-admin", c.API.AdminConfig())
	cs := c.API.AdminClient(t)
	ctx := context.Background()

	before, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := runKubectl(t, kubeconfig, nil, "apply", "-k", overlay); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// The namespace and the cluster-scoped RBAC objects, so that other
		// tests of the package find the cluster as it was.
		if out, err := runKubectl(t, kubeconfig, nil, "delete", "--ignore-not-found", "--wait=true", "--timeout=2m", "-k", overlay); err != nil {
			t.Errorf("kubectl delete -k: %v\n%s", err, out)
		}
		// Nothing removes a stopped reporter's conditions: take them off,
		// so that a later test sees only what its own reporter publishes.
		if err := removeNodeShimConditions(ctx, cs, c.NodeName); err != nil {
			t.Error(err)
		}
	})
	diag := func() string {
		out, _ := runKubectl(t, kubeconfig, nil, "-n", "nodeshim", "describe", "pods")
		return out + "\nkubelet log:\n" + c.Log("kubelet")
	}

	pod := waitPodRunning(t, cs, diag)
	t.Logf("DaemonSet pod %s running %v after apply", pod.Name, time.Since(start).Round(time.Millisecond))
	if pod.Spec.NodeName != c.NodeName {
		t.Errorf("pod scheduled on %q, want %q", pod.Spec.NodeName, c.NodeName)
	}

	// The shim serves on its socket in the state directory.
	sock := filepath.Join(p.state, "nodeshim.sock")
	var status struct {
		Conditions []struct {
			Type string `json:"type"`
		} `json:"conditions"`
	}
	body := getStatus(t, sock)
	if err := json.Unmarshal(body, &status); err != nil || len(status.Conditions) == 0 {
		t.Fatalf("GET /status: no conditions (%v):\n%.2000s", err, body)
	}
	want := []corev1.NodeConditionType{reporter.TypeNodeShimReady}
	for _, cond := range status.Conditions {
		want = append(want, reporter.NodeConditionType(cond.Type))
	}

	// The reporter publishes the shim's conditions as NodeShim* and renews
	// its Lease; kubelet's conditions stay.
	node := waitNodeConditions(t, cs, c.NodeName, want, diag)
	t.Logf("NodeShim* conditions on the Node %v after apply", time.Since(start).Round(time.Millisecond))
	kubeletConds := func(n *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
		m := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		for _, cond := range n.Status.Conditions {
			if !strings.HasPrefix(string(cond.Type), reporter.TypePrefix) {
				m[cond.Type] = cond.Status
			}
		}
		return m
	}
	was, now := kubeletConds(before), kubeletConds(node)
	for typ, st := range was {
		if now[typ] != st {
			t.Errorf("kubelet's condition %s was %s, is %s after the reporter's patch", typ, st, now[typ])
		}
	}
	if !clustertest.Ready(node) {
		t.Error("the Node is not Ready after the reporter's patch")
	}
	lease, err := cs.CoordinationV1().Leases("nodeshim").Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the reporter's Lease: %v", err)
	} else if lease.Spec.RenewTime == nil {
		t.Error("the reporter's Lease has no renew time")
	}

	// Delete the DaemonSet: the pod goes, and nothing of the shim stays.
	del := time.Now()
	if out, err := runKubectl(t, kubeconfig, nil, "-n", "nodeshim", "delete", "daemonset", "nodeshim", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete daemonset: %v\n%s", err, out)
	}
	waitPodsGone(t, cs, diag)
	t.Logf("DaemonSet pod gone %v after delete", time.Since(del).Round(time.Millisecond))
	checkNoContainers(t, c.Containerd, string(pod.UID))
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("the shim left its socket %s", sock)
	}
	l, err := lock.Acquire(p.lock, lock.Options{})
	if err != nil {
		t.Errorf("the shim's lock is still held: %v", err)
	} else if err := l.Release(); err != nil {
		t.Error(err)
	}
	checkNoMounts(t, p.state, string(pod.UID))
}

// removeNodeShimConditions removes the NodeShim* conditions from the Node,
// leaving kubelet's.
func removeNodeShimConditions(ctx context.Context, cs kubernetes.Interface, node string) error {
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := n.Status.Conditions[:0]
		for _, cond := range n.Status.Conditions {
			if !strings.HasPrefix(string(cond.Type), reporter.TypePrefix) {
				kept = append(kept, cond)
			}
		}
		n.Status.Conditions = kept
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// waitPodRunning waits for the DaemonSet's one pod to run with both
// containers ready.
func waitPodRunning(t *testing.T, cs kubernetes.Interface, diag func() string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods("nodeshim").List(context.Background(), metav1.ListOptions{})
		if err == nil && len(pods.Items) == 1 {
			p := &pods.Items[0]
			ready := p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 2
			for _, s := range p.Status.ContainerStatuses {
				ready = ready && s.Ready
			}
			if ready {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DaemonSet's pod is not running within 3m (%v):\n%s", err, diag())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitPodsGone(t *testing.T, cs kubernetes.Interface, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods("nodeshim").List(context.Background(), metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DaemonSet's pod is still there 3m after the delete (%v):\n%s", err, diag())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNodeConditions waits for every condition type of want on the Node.
func waitNodeConditions(t *testing.T, cs kubernetes.Interface, node string, want []corev1.NodeConditionType, diag func() string) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		var missing []corev1.NodeConditionType
		if err == nil {
			have := map[corev1.NodeConditionType]bool{}
			for _, cond := range n.Status.Conditions {
				have[cond.Type] = true
			}
			for _, w := range want {
				if !have[w] {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 {
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("conditions %v missing on Node %s after 2m (%v):\n%s", missing, node, err, diag())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// getStatus reads GET /status from the shim's socket, as root, waiting
// for the shim to listen: a running container is not yet a serving shim.
func getStatus(t *testing.T, sock string) []byte {
	t.Helper()
	hc := testutil.UnixHTTPClient(sock)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := hc.Get("http://nodeshim/status")
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /status: %s: %s", resp.Status, body)
			}
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /status on %s: %v", sock, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNoContainers fails t if containerd still runs a container of the
// pod uid.
func checkNoContainers(t *testing.T, c *runtimetest.Containerd, uid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctrs, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range ctrs.Containers {
		t.Errorf("container %s of the deleted pod still runs", ctr.Metadata.Name)
	}
}

// checkNoMounts fails t if the host has a mount under the shim's state
// directory or one of the deleted pod's (its volumes under kubelet's pods
// directory).
func checkNoMounts(t *testing.T, state, uid string) {
	t.Helper()
	points, err := clustertest.MountsUnder(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range points {
		t.Errorf("mount left under the shim's state directory: %s", p)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, uid) {
			t.Errorf("mount of the deleted pod left: %s", l)
		}
	}
}
