//go:build nodevm

package nodetest

// The kubelet scenario's file sorts after the others on purpose: go test
// runs the files' tests in name order, and a running kubelet kills every
// pod of the runtime that the API server does not list, which is what the
// CRI scenarios' pods are. It starts kubelet itself and stops it at its end.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// startKubelet starts the node's kubelet (systemd, the systemd cgroup
// driver) and returns an admin client of the API server it joins; kubelet
// is stopped when t ends, after t's own cleanups have deleted its pods.
func startKubelet(t *testing.T) kubernetes.Interface {
	t.Helper()
	if _, err := os.Stat(nodevm.AdminKubeconfig); err != nil {
		testutil.Skip(t, "the node has no control plane to join (nodevm without -kubelet): %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", nodevm.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = time.Minute
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, "systemctl", "start", nodevm.KubeletUnitName)
	t.Cleanup(func() {
		if out, err := runErr("systemctl", "stop", nodevm.KubeletUnitName); err != nil {
			t.Errorf("stop kubelet: %v %s", err, out)
		}
		if t.Failed() {
			out, _ := runErr("journalctl", "--no-pager", "-u", nodevm.KubeletUnitName, "-n", "80")
			t.Logf("kubelet's journal (last lines):\n%s", out)
		}
	})
	return cs
}

// TestKubeletJoinsRunsPodUnderKubepods: kubelet (cgroupDriver systemd,
// failCgroupV1 at its default) registers the node with the API server on
// the host and reports it Ready with kubelet's own conditions, its version
// and containerd's; a Pod created through the API (its image imported,
// imagePullPolicy Never) runs in
// kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
// cri-containerd-<id>.scope with its memory limit, and nodeshim serve's
// GET /pods lists it by its Kubernetes namespace and name with its own
// PSI.
func TestKubeletJoinsRunsPodUnderKubepods(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	start := time.Now()
	cs := startKubelet(t)

	var node *corev1.Node
	testutil.Eventually(t, "node "+nodevm.Hostname+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conditionSummary(n))
	})
	tReady := time.Since(start)
	conds := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		conds[c.Type] = c
	}
	if c := conds[corev1.NodeReady]; c.Reason != "KubeletReady" {
		t.Errorf("Ready: %+v; want kubelet's KubeletReady", c)
	}
	for _, ct := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c, ok := conds[ct]; !ok || c.Status != corev1.ConditionFalse || !strings.HasPrefix(c.Reason, "KubeletHas") {
			t.Errorf("%s: %+v; want kubelet's False", ct, c)
		}
	}
	kubeletVersion := strings.TrimPrefix(strings.TrimSpace(run(t, filepath.Join(nodevm.NodeBin, "kubelet"), "--version")), "Kubernetes ")
	// "containerd github.com/containerd/containerd/v2 v2.2.9"; CRI says
	// "2.2.9".
	ctrdVersion := strings.Fields(run(t, filepath.Join(nodevm.NodeBin, "containerd"), "--version"))
	info := node.Status.NodeInfo
	if info.KubeletVersion != kubeletVersion || len(ctrdVersion) < 3 || info.ContainerRuntimeVersion != "containerd://"+strings.TrimPrefix(ctrdVersion[2], "v") {
		t.Errorf("node info kubelet %q, runtime %q; want %q and containerd %v", info.KubeletVersion, info.ContainerRuntimeVersion, kubeletVersion, ctrdVersion)
	}
	internal := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != nodevm.NodeIP {
		t.Errorf("node addresses %v; want InternalIP %s", node.Status.Addresses, nodevm.NodeIP)
	}
	t.Logf("node %s Ready %s after kubelet's start: kubelet %s, %s, kernel %s, cgroup driver systemd",
		node.Name, tReady.Round(100*time.Millisecond), info.KubeletVersion, info.ContainerRuntimeVersion, info.KernelVersion)

	ns := "nodeshim-kubelet"
	createNamespace(t, cs, ns)
	// The controller manager on the host makes each namespace's default
	// ServiceAccount, without which the API server admits no pod.
	testutil.Eventually(t, "ServiceAccount "+ns+"/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	const limit = 64 << 20
	noToken, grace := false, int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "counter", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      nodevm.Hostname,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "counter",
				Image:           runtimetest.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         counterCommand,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(limit, resource.BinarySI)},
				},
			}},
		},
	}
	podStart := time.Now()
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Deleted through the API while kubelet runs, so that kubelet
		// stops it and confirms the deletion.
		if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s/%s: %v", ns, pod.Name, err)
			return
		}
		testutil.Eventually(t, "pod "+ns+"/"+pod.Name+" gone", func() error {
			_, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	})
	var running *corev1.Pod
	testutil.Eventually(t, "pod "+ns+"/"+pod.Name+" Running", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return fmt.Errorf("phase %s, conditions %v, containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
		running = p
		return nil
	})
	tPod := time.Since(podStart)
	if running.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("QoS class %s, want Burstable", running.Status.QOSClass)
	}
	id, ok := strings.CutPrefix(running.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if !ok {
		t.Fatalf("container ID %q: want containerd's", running.Status.ContainerStatuses[0].ContainerID)
	}
	uid := string(created.UID)
	slice := "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	podDir := filepath.Join(cgroupRoot, "kubepods.slice", "kubepods-burstable.slice", slice)
	scope := filepath.Join(podDir, "cri-containerd-"+id+".scope")
	c := &container{ID: id, Name: "counter"}
	in := c.inspect(t)
	cg, err := readFile(fmt.Sprintf("/proc/%d/cgroup", in.Info.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::" + strings.TrimPrefix(scope, cgroupRoot); cg != want {
		t.Errorf("/proc/%d/cgroup of the pod's container is %q, want %q", in.Info.Pid, cg, want)
	}
	if got, err := readFile(filepath.Join(scope, "memory.max")); err != nil || got != fmt.Sprint(limit) {
		t.Errorf("%s/memory.max: %q, %v; want %d", scope, got, err, limit)
	}
	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure", "memory.events", "cgroup.freeze"} {
		if _, err := os.Stat(filepath.Join(podDir, f)); err != nil {
			t.Errorf("the pod's own %s: %v", f, err)
		}
	}

	var item status.PodPressure
	testutil.Eventually(t, "nodeshim serve's GET /pods lists the kubelet's pod by name", func() error {
		pp, err := getPods(t)
		if err != nil {
			return err
		}
		for _, it := range pp.Items {
			if it.UID == uid {
				item = it
				if it.Name == "" {
					return fmt.Errorf("pod %s listed without its name yet: %+v", uid, it)
				}
				return nil
			}
		}
		return fmt.Errorf("%d pods listed, not %s", len(pp.Items), uid)
	})
	if item.Namespace != ns || item.Name != pod.Name {
		t.Errorf("GET /pods names pod %s %s/%s, want %s/%s", uid, item.Namespace, item.Name, ns, pod.Name)
	}
	if strings.ToLower(item.QOS) != "burstable" || !strings.HasSuffix(item.Cgroup, slice) {
		t.Errorf("GET /pods: QoS %q, cgroup %q; want burstable in %s", item.QOS, item.Cgroup, podDir)
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		if psi := psiOf(item, res); psi == nil || psi.Unknown != "" {
			t.Errorf("GET /pods: pod %s %s PSI %+v; want its own", pod.Name, res, psi)
		}
	}
	if item.Memory.LimitBytes == nil || *item.Memory.LimitBytes != limit {
		t.Errorf("GET /pods: pod %s memory %+v; want the limit %d", pod.Name, item.Memory, limit)
	}
	t.Logf("pod %s/%s (uid %s) Running %s after its creation through the API, in %s; nodeshim lists it by name",
		ns, pod.Name, uid, tPod.Round(100*time.Millisecond), scope)
}

// conditionSummary is the node's conditions as Type=Status(Reason).
func conditionSummary(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return out
}

const reporterUID = nodevm.ReporterUID

// TestReporterOnKubeletNode: `nodeshim reporter`, unprivileged (uid
// nobody, a read-only peer of serve's socket) and authenticated as the
// node with kubelet's kubeconfig, publishes nodeshim's conditions on the
// Node beside kubelet's, which stay as kubelet wrote them, and renews its
// Lease (in its own namespace, through a Role bound to the node's user: the
// Node authorizer grants a node only its kubelet's Lease); an OOM kill in a Pod created through the API becomes an
// OOMKilling Event about that Pod on the API server.
func TestReporterOnKubeletNode(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	cs := startKubelet(t)
	waitNodeReady(t, cs)
	const leaseNS = "nodeshim"
	for _, ns := range []string{leaseNS, "nodeshim-oom"} {
		createNamespace(t, cs, ns)
	}

	leaseRole := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeshim-reporter-lease", Namespace: leaseNS},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}},
	}
	if _, err := cs.RbacV1().Roles(leaseNS).Create(ctx, leaseRole, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeshim-reporter-lease", Namespace: leaseNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: leaseRole.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: nodevm.NodeUser}},
	}
	if _, err := cs.RbacV1().RoleBindings(leaseNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// The node's kubeconfig, readable by the reporter's user alone.
	dir, err := os.MkdirTemp("/run", "nodeshim-reporter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kc, err := os.ReadFile(nodevm.KubeletKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o400); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, kubeconfig} {
		if err := os.Chown(p, reporterUID, reporterUID); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(nodeshimBin, "reporter", "--node-name", nodevm.Hostname, "--namespace", leaseNS,
		"--kubeconfig", kubeconfig, "--socket", nodeshimSock, "--metrics-addr", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: reporterUID, Gid: reporterUID}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("reporter: %v", err)
		}
		if t.Failed() {
			t.Logf("reporter's output:\n%s", out.String())
		}
	})

	var node *corev1.Node
	testutil.Eventually(t, "NodeShimReady on the Node", func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the reporter exited: %v: %s", err, out.String())
		default:
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == "NodeShimReady" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conditionSummary(n))
	})
	tConditions := time.Since(start)
	var shim []string
	for _, c := range node.Status.Conditions {
		if strings.HasPrefix(string(c.Type), "NodeShim") {
			shim = append(shim, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
		}
		if c.Type == corev1.NodeReady && (c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady") {
			t.Errorf("kubelet's Ready is %s (%s) beside the reporter's conditions", c.Status, c.Reason)
		}
	}
	if !nodeReady(node) {
		t.Errorf("the Node lost kubelet's Ready: %v", conditionSummary(node))
	}
	testutil.Eventually(t, "the reporter's Lease "+leaseNS+"/"+nodevm.Hostname, func() error {
		l, err := cs.CoordinationV1().Leases(leaseNS).Get(ctx, nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil {
			return fmt.Errorf("lease %+v not held", l.Spec)
		}
		return nil
	})
	t.Logf("the reporter (uid %d, as %s) put %d NodeShim conditions on the Node %s after its start: %s",
		reporterUID, nodevm.NodeUser, len(shim), tConditions.Round(100*time.Millisecond), strings.Join(shim, " "))

	// An OOM kill in a Pod created through the API.
	noToken, grace, never := false, int64(1), corev1.RestartPolicyNever
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: "nodeshim-oom"},
		Spec: corev1.PodSpec{
			NodeName:                      nodevm.Hostname,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 never,
			Containers: []corev1.Container{{
				Name:            "hog",
				Image:           runtimetest.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				// With kubelet's default on cgroup v2 the kill takes the
				// whole container (memory.oom.group), and with it the
				// victim's cgroup, before nodeshim looks the victim up.
				Command: []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; sleep 3600"},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
			}},
		},
	}
	testutil.Eventually(t, "ServiceAccount nodeshim-oom/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	oomStart := time.Now()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
			return
		}
		testutil.Eventually(t, "pod "+pod.Namespace+"/"+pod.Name+" gone", func() error {
			if _, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
	})
	var ev corev1.Event
	testutil.Eventually(t, "an OOMKilling Event about pod "+pod.Namespace+"/"+pod.Name, func() error {
		list, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
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
		return fmt.Errorf("events in %s: %v", pod.Namespace, reasons)
	})
	if ev.InvolvedObject.FieldPath != "spec.containers{hog}" || !strings.Contains(ev.Message, "in container hog of pod nodeshim-oom/hog") {
		t.Errorf("OOM Event about %s, %q: want the container hog of pod nodeshim-oom/hog", ev.InvolvedObject.FieldPath, ev.Message)
	}
	tEvent := time.Since(oomStart)
	// Every task the group kill took is named, whatever the runtime
	// reports of the container's exit.
	var (
		named []string
		kills []status.OOMKill
	)
	testutil.Eventually(t, "every OOM kill since the Pod's creation named in GET /status", func() error {
		var doc status.Document
		if err := getJSON(t, "/status", &doc); err != nil {
			return err
		}
		named, kills = named[:0], kills[:0]
		for _, k := range doc.OOMKills.Recent {
			if k.Time.Before(oomStart) {
				continue
			}
			if c := k.Container; c == nil || c.Namespace != pod.Namespace || c.Pod != pod.Name || c.Container != "hog" {
				return fmt.Errorf("kill of %d (%s) named %+v (%s)", k.PID, k.Comm, k.Container, k.Unresolved)
			}
			named = append(named, fmt.Sprintf("%d (%s) by %s", k.PID, k.Comm, k.Container.ResolvedBy))
			kills = append(kills, k)
		}
		// kubelet's default takes the whole container: dd and the
		// container's shell.
		if !slices.ContainsFunc(kills, func(k status.OOMKill) bool { return k.Comm == "dd" }) ||
			!slices.ContainsFunc(kills, func(k status.OOMKill) bool { return k.Comm == "sh" }) {
			return fmt.Errorf("kills since %s: %v; want dd and sh", oomStart, named)
		}
		return nil
	})
	// Each task is one kill, though the kernel marks the chosen victim
	// twice in a group kill.
	pids := map[uint32]int{}
	for _, k := range kills {
		pids[k.PID]++
	}
	for pid, n := range pids {
		if n > 1 {
			t.Errorf("task %d listed as %d kills: %s", pid, n, strings.Join(named, ", "))
		}
	}
	var exit string
	testutil.Eventually(t, "container hog terminated by the group kill", func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Terminated != nil {
				exit = fmt.Sprintf("%s (exit %d)", st.State.Terminated.Reason, st.State.Terminated.ExitCode)
				return nil
			}
		}
		return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
	})
	t.Logf("OOMKilling Event %s after the Pod's creation: %s; kills named: %s; the container exited %s",
		tEvent.Round(100*time.Millisecond), ev.Message, strings.Join(named, ", "), exit)
}

// nodeReady says whether kubelet reports n Ready.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitNodeReady waits until the node's kubelet has its Node Ready.
func waitNodeReady(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	testutil.Eventually(t, "node "+nodevm.Hostname+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), nodevm.Hostname, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("conditions %v", conditionSummary(n))
		}
		return nil
	})
}

// createNamespace creates the namespace ns, which may exist already.
func createNamespace(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
