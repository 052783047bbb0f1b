package deploy

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
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
// without a registry (imageFiles: the static binary as /usr/bin/nodeshim,
// its entrypoint, the reporter's binary reporterBin, and CRIU with its
// libraries and loader from criuRoot), and logs its size and that of the
// same image without CRIU.
func nodeshimImageTar(t *testing.T, bin, reporterBin, criuRoot string) string {
	t.Helper()
	files := imageFiles(t, bin, reporterBin, criuRoot)
	dir := t.TempDir()
	path := filepath.Join(dir, "nodeshim.oci.tar")
	if err := runtimetest.WriteImage(path, nodeshimImage, files, []string{"/usr/bin/nodeshim"}, nil); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare.oci.tar")
	if err := runtimetest.WriteImage(bare, nodeshimImage, files[:2], []string{"/usr/bin/nodeshim"}, nil); err != nil {
		t.Fatal(err)
	}
	size := func(p string) string {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20))
	}
	t.Logf("image (OCI tar, uncompressed layer): %s with CRIU, %s without", size(path), size(bare))
	return path
}

// hostPaths are the host side of the DaemonSet's volumes that a loopback
// single-node test cluster moves into its own directories.
type hostPaths struct {
	state, lock, kubelet, runtimeSocket, runtimeRoot, cniConf string
	apiPort                                                   int
}

// writeOverlay writes deploy/'s files into dir/base and a kustomize overlay
// into dir/overlay, and returns the overlay's directory. The overlay
// changes only what a loopback single-node cluster needs: the image (the
// local one), the host paths of state, lock, kubelet root dir, CRI socket
// and CNI configuration (the test's own), containerd's root (the test's
// own, mounted at its host path as the base mounts /var/lib/containerd),
// and the API server's address for the reporter (no kube-proxy serves the
// kubernetes Service here).
func writeOverlay(t *testing.T, dir string, p hostPaths) string {
	t.Helper()
	ds := daemonSet(t)
	shim := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "shim" })
	if shim < 0 {
		t.Fatal("the DaemonSet has no shim container")
	}
	rootMount := slices.IndexFunc(ds.Spec.Template.Spec.Containers[shim].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "runtime-root" })
	if rootMount < 0 {
		t.Fatal("the shim mounts no runtime-root volume")
	}
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
# Before loopback.yaml, whose strategic merge reorders the containers.
- target:
    kind: DaemonSet
    name: nodeshim
  patch: |
    - op: test
      path: /spec/template/spec/containers/%[4]d/volumeMounts/%[5]d/name
      value: runtime-root
    - op: replace
      path: /spec/template/spec/containers/%[4]d/volumeMounts/%[5]d/mountPath
      value: %[6]s
- path: loopback.yaml
`, k.Images[0].NewName, ref, tag, shim, rootMount, p.runtimeRoot))
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
      - name: runtime-root
        hostPath:
          path: %s
      - name: cni-conf
        hostPath:
          path: %s
`, strconv.Itoa(p.apiPort), p.state, p.lock, p.kubelet, p.runtimeSocket, p.runtimeRoot, p.cniConf))
	return overlay
}

// TestDaemonSetOnRealNode applies deploy/ (with a loopback overlay) to a
// real single-node cluster (testenv/clustertest): the DaemonSet's pod is
// scheduled on this machine and runs both containers from an image built
// here, the shim serves on its socket, the reporter publishes the NodeShim*
// conditions next to kubelet's (which stay as they were), renews its Lease
// and sends Events, and a pod's container is checkpointed through the
// shim's API with the image's CRIU (checkpointOnNode). Deleting the
// DaemonSet removes the pod, and the shim leaves no socket, held lock or
// mount on the host.
func TestDaemonSetOnRealNode(t *testing.T) {
	c := cluster.Cluster(t)
	root := criuRoot(t)
	bin, _ := buildStatic(t, "v0.0.0-cluster-test", "cluster")
	tarPath := nodeshimImageTar(t, bin, buildReporter(t, "v0.0.0-cluster-test", "cluster"), root)
	if out, err := c.Containerd.Ctr("images", "import", tarPath).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v: %s", err, out)
	}

	dir := t.TempDir()
	p := hostPaths{
		state:         filepath.Join(dir, "state"),
		lock:          filepath.Join(dir, "nodeshim.lock"),
		kubelet:       c.KubeletRootDir,
		runtimeSocket: c.Containerd.Address,
		runtimeRoot:   filepath.Join(c.Containerd.Dir, "root"),
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

	checkpointOnNode(t, c, cs, kubeconfig, p.state, diag)

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

// counterScript counts in the container's writable layer, so that the
// archive carries a rootfs diff and a resumed count shows the container
// kept running.
const counterScript = `i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done`

// checkpointOnNode runs a busybox counter pod, checkpoints its container
// through POST /checkpoint on the DaemonSet shim's socket (state is the
// shim's state directory on the host), and checks that the archive is
// under the host's checkpoint directory, that checkpointctl reads it,
// that the container keeps counting, and that the reporter publishes the
// checkpoint condition and sends condition-change Events for the Node.
func checkpointOnNode(t *testing.T, c *clustertest.Cluster, cs kubernetes.Interface, kubeconfig, state string, diag func() string) {
	ctl := testutil.RequireTool(t, "NODESHIM_CHECKPOINTCTL", "checkpointctl")
	ctx := context.Background()
	const ns, name = "default", "counter"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: name, Image: runtimetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", counterScript},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not running within 2m (%v):\n%s", ns, name, err, diag())
		}
		time.Sleep(100 * time.Millisecond)
	}
	count := func() int {
		t.Helper()
		for {
			out, err := runKubectl(t, kubeconfig, nil, "-n", ns, "exec", name, "--", "cat", "/tmp/count")
			if n, perr := strconv.Atoi(strings.TrimSpace(out)); err == nil && perr == nil {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl exec cat /tmp/count: %v: %s", err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	count() // the counter has started

	hc := testutil.UnixHTTPClient(filepath.Join(state, "nodeshim.sock"))
	start := time.Now()
	resp, err := hc.Post("http://nodeshim/checkpoint/"+ns+"/"+name+"/"+name, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		out, _ := runKubectl(t, kubeconfig, nil, "-n", "nodeshim", "logs", "daemonset/nodeshim", "-c", "shim", "--tail=40")
		t.Fatalf("POST /checkpoint/%s/%s/%s: %s: %s\nshim log:\n%s", ns, name, name, resp.Status, body, out)
	}
	var res struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Items) != 1 {
		t.Fatalf("POST /checkpoint: %v: %s", err, body)
	}
	t.Logf("checkpoint of %s/%s/%s through the shim's API: %v, archive %s", ns, name, name, took.Round(time.Millisecond), res.Items[0])

	// The archive, named by its path in the shim's container, is in the
	// host's checkpoint directory under the state directory.
	rel, ok := strings.CutPrefix(res.Items[0], "/var/lib/nodeshim/")
	if !ok {
		t.Fatalf("archive %s is not under the shim's state directory /var/lib/nodeshim", res.Items[0])
	}
	archive := filepath.Join(state, rel)
	if st, err := os.Stat(archive); err != nil {
		t.Fatalf("the archive on the host: %v", err)
	} else {
		t.Logf("archive %.1f MiB", float64(st.Size())/(1<<20))
	}
	// The writable layer's diff (the counter's /tmp/count) came from
	// containerd's root, mounted at its host path.
	if names := archiveEntries(t, archive); !slices.Contains(names, "rootfs-diff.tar") {
		t.Errorf("the archive has no rootfs-diff.tar: %v", names)
	}
	if out, err := exec.Command(ctl, "show", archive).CombinedOutput(); err != nil || !strings.Contains(string(out), name) {
		t.Errorf("checkpointctl show %s: %v:\n%s", archive, err, out)
	}
	if out, err := exec.Command(ctl, "inspect", "--ps-tree", archive).CombinedOutput(); err != nil || !strings.Contains(string(out), "sleep") && !strings.Contains(string(out), "sh") {
		t.Errorf("checkpointctl inspect --ps-tree %s: %v:\n%s", archive, err, out)
	}

	// The container runs on: its count goes up after the checkpoint.
	before := count()
	testutil.Eventually(t, fmt.Sprintf("the counter counts past %d after the checkpoint", before), func() error {
		if after := count(); after <= before {
			return fmt.Errorf("it counts %d", after)
		}
		return nil
	})

	// The reporter publishes the checkpoint's outcome as a Node condition,
	// and an Event for each condition change of the Node.
	typ := reporter.NodeConditionType(status.TypeCheckpoint)
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err == nil {
			if i := slices.IndexFunc(n.Status.Conditions, func(cond corev1.NodeCondition) bool { return cond.Type == typ }); i >= 0 && n.Status.Conditions[i].Status == corev1.ConditionTrue {
				t.Logf("%s on the Node %v after the checkpoint: %s", typ, time.Since(start).Round(time.Millisecond), n.Status.Conditions[i].Message)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not True on the Node within 2m of the checkpoint (%v):\n%s", typ, err, diag())
		}
		time.Sleep(200 * time.Millisecond)
	}
	events, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		if e.Source.Component == reporter.Component && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == c.NodeName {
			reasons = append(reasons, e.Reason)
		}
	}
	if len(reasons) == 0 {
		t.Errorf("no Event from %s about Node %s", reporter.Component, c.NodeName)
	}
	// Transition Events are rate-limited (a burst at start, then one per
	// 30 s): the checkpoint's own may wait for a token.
	t.Logf("the reporter's Events about the Node, by reason: %v", reasons)
}

// archiveEntries lists the names in the tar at path.
func archiveEntries(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		names = append(names, h.Name)
	}
}
