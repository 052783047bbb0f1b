package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

// runKubectl runs kubectl with the kubeconfig and returns its combined
// output and error.
func runKubectl(t *testing.T, kubeconfig string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectl(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Dir = "."
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestServerDryRun runs `kubectl apply --dry-run=server -k deploy/` against a
// real kube-apiserver (testenv/kubetest), with strict server-side field
// validation: every object passes the API server's validation and
// admission, and nothing is stored. A broken overlay of the same
// directory must be refused, so that the dry run is known to validate.
func TestServerDryRun(t *testing.T) {
	kubectl(t)
	c := kubetest.Start(t)
	admin := c.Kubeconfig(t, "admin", c.AdminConfig())
	ctx := context.Background()
	cs := c.AdminClient(t)

	// A server dry run stores nothing, so the namespaced objects of a
	// first install cannot find their Namespaces: they must exist, bare, as
	// after `kubectl create namespace nodeshim`.
	for _, ns := range []string{namespace, controllerNamespace} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runKubectl(t, admin, nil, "apply", "--dry-run=server", "--validate=strict", "-k", ".")
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k deploy/: %v\n%s", err, out)
	}
	t.Logf("kubectl apply --dry-run=server --validate=strict -k deploy/:\n%s", out)
	created := regexp.MustCompile(`(?m)^\S+ created \(server dry run\)$`).FindAllString(out, -1)
	configured := regexp.MustCompile(`(?m)^namespace/nodeshim(-controller)? configured \(server dry run\)$`).FindAllString(out, -1)
	if want := len(objects(t)) - 2; len(created) != want || len(configured) != 2 {
		t.Errorf("%d objects created and %d configured (server dry run), want %d and the 2 Namespaces", len(created), len(configured), want)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Labels) > 1 { // kubernetes.io/metadata.name only
		t.Errorf("the dry run stored the Namespace's labels: %v", ns.Labels)
	}
	if _, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, "nodeshim", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet after a dry run: %v, want NotFound", err)
	}

	// An overlay that breaks what only the server checks: a hostPath type
	// that does not exist.
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, abs) // kustomize refuses absolute bases
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(overlay, "kustomization.yaml"), `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- `+base+`
patches:
- target:
    kind: DaemonSet
    name: nodeshim
  patch: |
    - op: replace
      path: /spec/template/spec/volumes/0/hostPath/type
      value: NotAType
`)
	out, err = runKubectl(t, admin, nil, "apply", "--dry-run=server", "--validate=strict", "-k", overlay)
	if err == nil || !strings.Contains(out, "NotAType") {
		t.Errorf("a DaemonSet with hostPath type NotAType passed the server dry run: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReporterRBACOnAPIServer applies deploy/ for real and asks the API
// server's RBAC authorizer, as the reporter's ServiceAccount with a token
// from the TokenRequest API, what it may do: exactly the rights of
// rbac.yaml, nothing around them. It then exercises the rights the reporter
// relies on (a condition and an annotation through nodes/status, a Lease,
// an Event) and checks that a patch of the Node itself, a spec change
// through the status subresource and a Lease elsewhere get nowhere.
func TestReporterRBACOnAPIServer(t *testing.T) {
	kubectl(t)
	c := kubetest.Start(t)
	admin := c.Kubeconfig(t, "admin", c.AdminConfig())
	if out, err := runKubectl(t, admin, nil, "apply", "--validate=strict", "-k", "."); err != nil {
		t.Fatalf("kubectl apply -k deploy/: %v\n%s", err, out)
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := c.AdminClient(t).CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := only[*corev1.ServiceAccount](t, reporterObjects(t))
	reporter := c.Kubeconfig(t, "reporter", c.ServiceAccountConfig(t, sa.Namespace, sa.Name))

	checkCanI(t, reporter, "reporter", []canI{
		{"get nodes/node-a", true},
		{"patch nodes/node-a --subresource=status", true},
		{"create events -n default", true},
		{"patch events -n default", false},
		{"get leases.coordination.k8s.io -n nodeshim", true},
		{"create leases.coordination.k8s.io -n nodeshim", true},
		{"update leases.coordination.k8s.io -n nodeshim", true},

		{"list nodes", false},
		{"watch nodes", false},
		{"patch nodes/node-a", false},
		{"update nodes/node-a --subresource=status", false},
		{"delete nodes/node-a", false},
		{"create nodes", false},
		{"get events -n default", false},
		{"delete events -n default", false},
		{"list leases.coordination.k8s.io -n nodeshim", false},
		{"delete leases.coordination.k8s.io -n nodeshim", false},
		{"get leases.coordination.k8s.io -n kube-node-lease", false},
		{"create leases.coordination.k8s.io -n default", false},
		{"get secrets -n nodeshim", false},
		{"get configmaps -n nodeshim", false},
		{"list pods --all-namespaces", false},
		{"create serviceaccounts/token -n nodeshim", false},
		{"patch daemonsets.apps -n nodeshim", false},
		{"create events.events.k8s.io -n default", false},
	})

	// The rights at work, as the reporter does it with client-go: a
	// strategic-merge patch of nodes/status (no get of nodes/status first,
	// unlike kubectl patch), a Lease created and renewed, an Event.
	rc, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, sa.Namespace, sa.Name))
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"nodeshim.io/report":"sha256:0 v1"}},"status":{"conditions":[{"type":"NodeShimReady","status":"True","reason":"ShimReachable","message":"test","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if _, err := rc.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("patch nodes/status as the reporter: %v", err)
	}
	got, err := c.AdminClient(t).CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations["nodeshim.io/report"] != "sha256:0 v1" {
		t.Errorf("the annotation sent through nodes/status was not kept: %v", got.Annotations)
	}
	var cond bool
	for _, c := range got.Status.Conditions {
		cond = cond || (c.Type == "NodeShimReady" && c.Status == corev1.ConditionTrue)
	}
	if !cond {
		t.Errorf("the condition sent through nodes/status was not kept: %+v", got.Status.Conditions)
	}
	label := []byte(`{"metadata":{"labels":{"nodeshim.io/x":"y"}}}`)
	if _, err := rc.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, label, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("patch of the Node itself as the reporter: %v, want Forbidden", err)
	}
	spec := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := rc.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, spec, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("patch of spec through nodes/status: %v", err)
	} else if n, err := c.AdminClient(t).CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if n.Spec.Unschedulable {
		t.Error("a spec change sent through nodes/status was kept: the status subresource must reset spec")
	}

	holder, dur := "node-a", int32(40)
	if _, err := rc.CoordinationV1().Leases(namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Lease as the reporter: %v", err)
	}
	lease, err := rc.CoordinationV1().Leases(namespace).Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the Lease as the reporter: %v", err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	if _, err := rc.CoordinationV1().Leases(namespace).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Errorf("renew the Lease as the reporter: %v", err)
	}
	if _, err := rc.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a Lease outside the reporter's namespace: %v, want Forbidden", err)
	}
	if _, err := rc.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "node-a.nodeshim-test"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-a", UID: types.UID("node-a")},
		Reason:         "NodeShimReady", Message: "test", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "nodeshim-reporter"},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create an Event as the reporter: %v", err)
	}
}

// canI is one `kubectl auth can-i` question and whether the answer must
// be yes.
type canI struct {
	args    string
	allowed bool
}

// checkCanI asks the API server each question as the user of kubeconfig
// (who names it in failures): an allowed one must be answered yes, any
// other no.
func checkCanI(t *testing.T, kubeconfig, who string, cases []canI) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			out, err := runKubectl(t, kubeconfig, nil, append([]string{"auth", "can-i"}, strings.Fields(tc.args)...)...)
			// The answer is the last line; kubectl may warn before it.
			lines := strings.Split(strings.TrimSpace(out), "\n")
			got := strings.TrimSpace(lines[len(lines)-1])
			switch {
			case tc.allowed && (err != nil || got != "yes"):
				t.Errorf("the %s may not %s: %q %v", who, tc.args, got, err)
			case !tc.allowed && (err == nil || !strings.HasPrefix(got, "no")):
				t.Errorf("the %s may %s: %q %v", who, tc.args, got, err)
			}
		})
	}
}
