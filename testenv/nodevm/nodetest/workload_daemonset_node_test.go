//go:build nodevm

package nodetest

// The DaemonSet scenario's file sorts after the CRI scenarios' (see
// workload_node_test.go): it starts kubelet.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/deploy"
	shimstatus "github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

var kubectlBin = filepath.Join(nodevm.NodeBin, "kubectl")

// daemonSetState is the host directory the DaemonSet's shim keeps its
// state and socket in on the node: not the systemd unit's
// nodevm.NodeshimRoot, whose configuration snapshots and checkpoints are
// that unit's.
const daemonSetState = "/var/lib/nodeshim-daemonset"

// writeDaemonSetOverlay writes deploy/'s manifests into dir/base, as they
// are in the repository, and a kustomize overlay into dir/overlay, and
// returns the overlay's directory. The overlay changes what this node
// needs and nothing else: the image (nodevm.NodeshimImage, imported: no
// registry is reachable), the API server's address for the reporter (no
// kube-proxy serves the kubernetes Service's ClusterIP on this node),
// the shim's state directory (daemonSetState), and no replica of the
// controller's Deployment, which is not under test and would take the
// node's two emulated CPUs.
func writeDaemonSetOverlay(t *testing.T, dir string) string {
	t.Helper()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	err := fs.WalkDir(deploy.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := deploy.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(base, path), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	k, err := deploy.ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 {
		t.Fatalf("kustomization.yaml sets %d images, want 1", len(k.Images))
	}
	name, tag, _ := strings.Cut(nodevm.NodeshimImage, ":")
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
images:
- name: %s
  newName: %s
  newTag: %s
patches:
- path: node.yaml
- target:
    kind: Deployment
    name: nodeshim-controller
  patch: |
    - op: replace
      path: /spec/replicas
      value: 0
`, k.Images[0].NewName, name, tag),
		"node.yaml": fmt.Sprintf(`apiVersion: apps/v1
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
          value: %q
        - name: KUBERNETES_SERVICE_PORT
          value: %q
      volumes:
      - name: state
        hostPath:
          path: %s
`, nodevm.APIServerAddress, strconv.Itoa(nodevm.APIServerPort), daemonSetState),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return overlay
}

// kubectl runs the node's kubectl with the admin kubeconfig.
func kubectl(args ...string) (string, error) {
	return runErr(kubectlBin, append([]string{"--kubeconfig", nodevm.AdminKubeconfig}, args...)...)
}

// stopNodeshimUnit stops the node's nodeshim.service, whose lock file
// (/var/run/nodeshim.lock, the DaemonSet's too) makes a second shim on the
// node refuse to start, and starts it again when t ends, waiting until it
// answers, for the scenarios after t.
func stopNodeshimUnit(t *testing.T) {
	t.Helper()
	run(t, "systemctl", "stop", "nodeshim.service")
	t.Cleanup(func() {
		if out, err := runErr("systemctl", "start", "nodeshim.service"); err != nil {
			t.Errorf("start nodeshim.service again: %v %s", err, out)
			return
		}
		start := time.Now()
		testutil.Eventually(t, "the node's nodeshim.service answering again", func() error {
			return getJSON(t, "/status", &map[string]any{})
		})
		t.Logf("nodeshim.service answering again %s after its start", time.Since(start).Round(100*time.Millisecond))
	})
}

// peerPID is the pid of the process that listens on the unix socket
// sock, as the kernel gives it to a client (SO_PEERCRED).
func peerPID(sock string) (int, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("SO_PEERCRED of %s: %w", sock, credErr)
	}
	return int(cred.Pid), nil
}

// TestDaemonSetOnKubeletNode: deploy/ applied as an operator applies it
// (`kubectl apply -k` of an overlay that sets the image and what this
// node lacks, through the API server on the host) runs the DaemonSet's pod
// on the node's kubelet (systemd cgroup driver, containerd 2.2): kube-
// scheduler binds it, both containers start from nodeshim's image (built
// on the host as the Dockerfile makes it, imported into containerd's
// k8s.io namespace) and become ready; the shim in it (the process behind
// the socket, in the pod's own cgroup under kubepods.slice) answers GET
// /status; the reporter in it publishes each of the shim's conditions on
// the Node as NodeShim<Type> with NodeShimReady, beside kubelet's, which
// stay as they were (Ready from KubeletReady), and renews its Lease; the
// shim's OOM watcher attaches in the pod and NodeShimReady turns True; an
// OOM kill in a Pod created through the API becomes the reporter's
// OOMKilling Event about that Pod's container.
// Deleting the manifests takes the pod away.
func TestDaemonSetOnKubeletNode(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	cs := startKubelet(t)
	var before *corev1.Node
	testutil.Eventually(t, "node "+nodevm.Hostname+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("conditions %v", conditionSummary(n))
		}
		before = n
		return nil
	})
	if out, err := runErr(ctrBin, "-n", "k8s.io", "images", "ls", "-q", "name=="+nodevm.NodeshimImage); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("nodeshim's image %s is not in containerd's k8s.io namespace: %v %q", nodevm.NodeshimImage, err, out)
	}
	stopNodeshimUnit(t)

	overlay := writeDaemonSetOverlay(t, t.TempDir())
	diag := func() string {
		out, _ := kubectl("-n", "nodeshim", "describe", "pods")
		ps, _ := runErr(crictlBin, "ps", "-a", "--label", "io.kubernetes.pod.namespace=nodeshim")
		out += "\ncrictl ps -a of namespace nodeshim:\n" + ps
		for _, c := range []string{"shim", "reporter"} {
			id, _ := runErr(crictlBin, "ps", "-a", "-q", "--label", "io.kubernetes.pod.namespace=nodeshim", "--name", "^"+c+"$")
			if f := strings.Fields(id); len(f) > 0 {
				logs := combinedOutput(crictlBin, "logs", "--tail", "30", f[0])
				out += "\n" + c + "'s log (last lines):\n" + logs
			}
		}
		return out
	}
	start := time.Now()
	if out, err := kubectl("apply", "-k", overlay); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		del := time.Now()
		if out, err := kubectl("delete", "--ignore-not-found", "--wait=true", "--timeout=3m", "-k", overlay); err != nil {
			t.Errorf("kubectl delete -k: %v\n%s", err, out)
		}
		defer func() {
			t.Logf("kubectl delete -k and the pod gone in %s", time.Since(del).Round(100*time.Millisecond))
		}()
		testutil.Eventually(t, "the DaemonSet's pod gone", func() error {
			pods, err := cs.CoreV1().Pods("nodeshim").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d pods left", len(pods.Items))
			}
			return nil
		})
		// Nothing takes a stopped reporter's conditions off the Node.
		if err := removeNodeShimConditions(ctx, cs); err != nil {
			t.Error(err)
		}
	})

	var pod corev1.Pod
	testutil.Eventually(t, "the DaemonSet's pod Running with both containers ready", func() error {
		pods, err := cs.CoreV1().Pods("nodeshim").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		p := pods.Items[0]
		ready := p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 2
		var states []string
		for _, s := range p.Status.ContainerStatuses {
			ready = ready && s.Ready
			states = append(states, fmt.Sprintf("%s ready=%v restarts=%d %+v", s.Name, s.Ready, s.RestartCount, s.State))
		}
		if !ready {
			return fmt.Errorf("phase %s on %q, containers %v", p.Status.Phase, p.Spec.NodeName, states)
		}
		pod = p
		return nil
	})
	tRunning := time.Since(start)
	if pod.Spec.NodeName != nodevm.Hostname {
		t.Errorf("the DaemonSet's pod is on %q, want %s", pod.Spec.NodeName, nodevm.Hostname)
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Image != nodevm.NodeshimImage && !strings.HasSuffix(s.Image, "/"+nodevm.NodeshimImage) {
			t.Errorf("container %s runs image %s, want %s", s.Name, s.Image, nodevm.NodeshimImage)
		}
		if s.RestartCount != 0 {
			t.Errorf("container %s restarted %d times:\n%s", s.Name, s.RestartCount, diag())
		}
	}

	// serve in the pod answers on its socket, and the process behind the
	// socket is the pod's.
	sock := filepath.Join(daemonSetState, "nodeshim.sock")
	var status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	}
	testutil.Eventually(t, "GET /status from the DaemonSet's shim", func() error {
		resp, err := testutil.UnixHTTPClient(sock).Get("http://nodeshim/status")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		if err := json.Unmarshal(body, &status); err != nil || len(status.Conditions) == 0 {
			return fmt.Errorf("no conditions (%v): %.500s", err, body)
		}
		return nil
	})
	pid, err := peerPID(sock)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := readFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	podSlice := "-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice/cri-containerd-"
	if !strings.HasPrefix(cg, "0::/kubepods.slice/") || !strings.Contains(cg, podSlice) {
		t.Errorf("the socket's server, pid %d, is in %q; want the DaemonSet pod's %s under kubepods.slice", pid, cg, podSlice)
	}
	comm, _ := readFile(fmt.Sprintf("/proc/%d/comm", pid))
	t.Logf("DaemonSet pod %s Running and ready %s after kubectl apply; its shim (%s, pid %d in %s) answers GET /status with %d conditions",
		pod.Name, tRunning.Round(100*time.Millisecond), comm, pid, cg, len(status.Conditions))

	// The reporter publishes the shim's conditions beside kubelet's.
	want := []corev1.NodeConditionType{reporter.TypeNodeShimReady}
	for _, c := range status.Conditions {
		want = append(want, reporter.NodeConditionType(c.Type))
	}
	var node *corev1.Node
	testutil.Eventually(t, "the shim's conditions on the Node", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		have := map[corev1.NodeConditionType]bool{}
		for _, c := range n.Status.Conditions {
			have[c.Type] = true
		}
		var missing []corev1.NodeConditionType
		for _, w := range want {
			if !have[w] {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing %v of %v", missing, conditionSummary(n))
		}
		node = n
		return nil
	})
	kubelets := func(n *corev1.Node) map[corev1.NodeConditionType]corev1.NodeCondition {
		m := map[corev1.NodeConditionType]corev1.NodeCondition{}
		for _, c := range n.Status.Conditions {
			if !strings.HasPrefix(string(c.Type), reporter.TypePrefix) {
				m[c.Type] = c
			}
		}
		return m
	}
	was, now := kubelets(before), kubelets(node)
	if len(now) != len(was) {
		t.Errorf("kubelet's conditions were %v, are %v", conditionSummary(before), conditionSummary(node))
	}
	for typ, c := range was {
		if n := now[typ]; n.Status != c.Status || n.Reason != c.Reason {
			t.Errorf("kubelet's %s was %s (%s), is %s (%s) beside the reporter's", typ, c.Status, c.Reason, n.Status, n.Reason)
		}
	}
	if r := now[corev1.NodeReady]; r.Status != corev1.ConditionTrue || r.Reason != "KubeletReady" {
		t.Errorf("kubelet's Ready is %s (%s) beside the reporter's conditions", r.Status, r.Reason)
	}
	// The privileged shim in the pod comes up whole: its OOM watcher
	// attached (eBPF against the node's BTF, mounted into the pod), and
	// NodeShimReady True on the Node.
	testutil.Eventually(t, "NodeShimReady and NodeShimOOMWatcherReady True on the Node", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, typ := range []corev1.NodeConditionType{reporter.TypeNodeShimReady, reporter.NodeConditionType(shimstatus.TypeOOMWatcher)} {
			if c := nodeCondition(n, typ); c == nil || c.Status != corev1.ConditionTrue {
				return fmt.Errorf("%s is %+v", typ, c)
			}
		}
		if !nodeReady(n) {
			return fmt.Errorf("kubelet's Ready lost: %v", conditionSummary(n))
		}
		node = n
		return nil
	})
	var shim []string
	for _, c := range node.Status.Conditions {
		if strings.HasPrefix(string(c.Type), reporter.TypePrefix) {
			shim = append(shim, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
		}
	}
	testutil.Eventually(t, "the reporter's Lease nodeshim/"+nodevm.Hostname, func() error {
		l, err := cs.CoordinationV1().Leases("nodeshim").Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil {
			return fmt.Errorf("lease %+v not held", l.Spec)
		}
		return nil
	})
	t.Logf("the DaemonSet's reporter put %d NodeShim conditions on the Node %s after kubectl apply: %s",
		len(shim), time.Since(start).Round(100*time.Millisecond), strings.Join(shim, " "))

	// An OOM kill in a Pod created through the API becomes, through the
	// shim and the reporter in the DaemonSet's pod, an OOMKilling Event
	// about that Pod's container.
	ev := oomEventThroughDaemonSet(t, cs)
	t.Logf("OOMKilling Event from %s: %s", ev.Source.Component, ev.Message)
}

// oomEventThroughDaemonSet creates a Pod whose container is OOM-killed
// and waits for the reporter's OOMKilling Event about it.
func oomEventThroughDaemonSet(t *testing.T, cs kubernetes.Interface) corev1.Event {
	t.Helper()
	ctx := context.Background()
	const ns = "nodeshim-ds-oom"
	createNamespace(t, cs, ns)
	testutil.Eventually(t, "ServiceAccount "+ns+"/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	noToken, grace := false, int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      nodevm.Hostname,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "hog",
				Image:           runtimetest.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; sleep 3600"},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
			}},
		},
	}
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, cs, ns, pod.Name) })
	var ev corev1.Event
	testutil.Eventually(t, "an OOMKilling Event about pod "+ns+"/"+pod.Name, func() error {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var reasons []string
		for _, e := range list.Items {
			reasons = append(reasons, e.Reason)
			if e.Reason == "OOMKilling" && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod.Name {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("events in %s: %v", ns, reasons)
	})
	if ev.Source.Component != reporter.Component || ev.InvolvedObject.FieldPath != "spec.containers{hog}" || !strings.Contains(ev.Message, "in container hog of pod "+ns+"/hog") {
		t.Errorf("OOM Event from %s about %s, %q: want the reporter's, about the container hog of pod %s/hog", ev.Source.Component, ev.InvolvedObject.FieldPath, ev.Message, ns)
	}
	t.Logf("OOMKilling Event %s after the Pod's creation", time.Since(start).Round(100*time.Millisecond))
	return ev
}

// combinedOutput runs a program and returns its standard output and
// error together.
func combinedOutput(name string, args ...string) string {
	out, err := osexec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s%v", out, err)
	}
	return string(out)
}

// nodeCondition is n's condition of type typ, or nil.
func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// removeNodeShimConditions takes the NodeShim conditions off the Node,
// leaving kubelet's.
func removeNodeShimConditions(ctx context.Context, cs kubernetes.Interface) error {
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := n.Status.Conditions[:0]
		for _, c := range n.Status.Conditions {
			if !strings.HasPrefix(string(c.Type), reporter.TypePrefix) {
				kept = append(kept, c)
			}
		}
		n.Status.Conditions = kept
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}
