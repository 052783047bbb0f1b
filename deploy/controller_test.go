package deploy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

// TestControllerRBACLeastPrivilege compares the controller's rights with
// exactly the list it needs, per namespace: the Nodes through an informer
// and their status subresource, Events, the reporters' Leases read-only
// where the reporters renew them, and its election Lease in its own
// namespace only.
func TestControllerRBACLeastPrivilege(t *testing.T) {
	objs := controllerObjects(t)
	sa := only[*corev1.ServiceAccount](t, objs)
	if sa.Namespace != controllerNamespace {
		t.Errorf("the controller's ServiceAccount is in %q, want %q", sa.Namespace, controllerNamespace)
	}
	cr := only[*rbacv1.ClusterRole](t, objs)
	wantCluster := []string{
		"core/events create",
		"core/nodes list",
		"core/nodes watch",
		"core/nodes/status patch",
	}
	if got := flatten(t, "ClusterRole "+cr.Name, cr.Rules); !slices.Equal(got, wantCluster) {
		t.Errorf("ClusterRole %s grants\n  %s\nwant exactly\n  %s", cr.Name, strings.Join(got, "\n  "), strings.Join(wantCluster, "\n  "))
	}
	if cr.AggregationRule != nil {
		t.Error("the ClusterRole aggregates other roles")
	}
	wantRoles := map[string][]string{
		namespace:           {"coordination.k8s.io/leases list", "coordination.k8s.io/leases watch"},
		controllerNamespace: {"coordination.k8s.io/leases create", "coordination.k8s.io/leases get", "coordination.k8s.io/leases update"},
	}
	roles := all[*rbacv1.Role](objs)
	if len(roles) != len(wantRoles) {
		t.Fatalf("%d Roles, want one per namespace %v", len(roles), wantRoles)
	}
	for _, r := range roles {
		want, ok := wantRoles[r.Namespace]
		if !ok {
			t.Errorf("Role %s in namespace %q", r.Name, r.Namespace)
			continue
		}
		if got := flatten(t, "Role "+r.Name, r.Rules); !slices.Equal(got, want) {
			t.Errorf("Role %s/%s grants\n  %s\nwant exactly\n  %s", r.Namespace, r.Name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		var bound int
		for _, b := range all[*rbacv1.RoleBinding](objs) {
			if b.Namespace == r.Namespace && b.RoleRef.Name == r.Name {
				bound++
				checkBinding(t, "RoleBinding "+b.Name, b.RoleRef, b.Subjects, "Role", r.Name, sa)
			}
		}
		if bound != 1 {
			t.Errorf("Role %s/%s has %d bindings, want 1", r.Namespace, r.Name, bound)
		}
	}
	crbs := all[*rbacv1.ClusterRoleBinding](objs)
	if len(crbs) != 1 || len(all[*rbacv1.RoleBinding](objs)) != len(wantRoles) {
		t.Fatalf("%d ClusterRoleBindings and %d RoleBindings, want 1 and %d", len(crbs), len(all[*rbacv1.RoleBinding](objs)), len(wantRoles))
	}
	checkBinding(t, "ClusterRoleBinding "+crbs[0].Name, crbs[0].RoleRef, crbs[0].Subjects, "ClusterRole", cr.Name, sa)
}

// TestControllerDeployment checks the controller's pod: the restricted Pod
// Security profile its namespace enforces, its ServiceAccount, the
// reporters' namespace it watches, and two replicas for the election.
func TestControllerDeployment(t *testing.T) {
	objs := controllerObjects(t)
	d := only[*corev1.Namespace](t, objs)
	if d.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s enforces %q, want restricted", d.Name, d.Labels["pod-security.kubernetes.io/enforce"])
	}
	dep := deployment(t)
	spec := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("replicas %v, want at least 2 (a standby for the election)", dep.Spec.Replicas)
	}
	if spec.ServiceAccountName != only[*corev1.ServiceAccount](t, objs).Name {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC || len(spec.Volumes) != 0 {
		t.Error("the controller's pod shares a host namespace or mounts a volume")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and the RuntimeDefault seccomp profile", psc)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v: want no privilege escalation, a read-only root and every capability dropped", sc)
	}
	if len(c.Args) == 0 || c.Args[0] != "controller" || !slices.Contains(c.Args, "--reporter-namespace="+namespace) {
		t.Errorf("args %v, want the controller watching the reporters' namespace %s", c.Args, namespace)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("limits.cpu is set")
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Error("requests.memory is not set")
	}
}

// TestControllerRBACOnAPIServer applies deploy/ for real and, as the
// controller's ServiceAccount with a token from the TokenRequest API, does
// the controller's work (list and watch Nodes and the reporters' Leases,
// patch a NodeShim condition through nodes/status, hold its election
// Lease, record an Event) and asks the API server's RBAC authorizer about
// everything around it: forbidden.
func TestControllerRBACOnAPIServer(t *testing.T) {
	kubectl(t)
	c := kubetest.Start(t)
	admin := c.Kubeconfig(t, "admin", c.AdminConfig())
	if out, err := runKubectl(t, admin, nil, "apply", "--validate=strict", "-k", "."); err != nil {
		t.Fatalf("kubectl apply -k deploy/: %v\n%s", err, out)
	}
	ctx := context.Background()
	if _, err := c.AdminClient(t).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := only[*corev1.ServiceAccount](t, controllerObjects(t))
	kc := c.Kubeconfig(t, "controller", c.ServiceAccountConfig(t, sa.Namespace, sa.Name))
	lease := "leases.coordination.k8s.io"
	checkCanI(t, kc, "controller", []canI{
		{"list nodes", true},
		{"watch nodes", true},
		{"patch nodes/node-a --subresource=status", true},
		{"create events -n default", true},
		{"list " + lease + " -n nodeshim", true},
		{"watch " + lease + " -n nodeshim", true},
		{"get " + lease + " -n nodeshim-controller", true},
		{"create " + lease + " -n nodeshim-controller", true},
		{"update " + lease + " -n nodeshim-controller", true},

		{"get nodes/node-a", false},
		{"patch nodes/node-a", false},
		{"update nodes/node-a --subresource=status", false},
		{"delete nodes/node-a", false},
		{"create nodes", false},
		{"patch events -n default", false},
		{"get events -n default", false},
		{"get " + lease + " -n nodeshim", false},
		{"create " + lease + " -n nodeshim", false},
		{"update " + lease + " -n nodeshim", false},
		{"delete " + lease + " -n nodeshim", false},
		{"list " + lease + " -n nodeshim-controller", false},
		{"delete " + lease + " -n nodeshim-controller", false},
		{"list " + lease + " -n kube-node-lease", false},
		{"list " + lease + " --all-namespaces", false},
		{"get secrets -n nodeshim-controller", false},
		{"list pods --all-namespaces", false},
		{"patch daemonsets.apps -n nodeshim", false},
		{"create serviceaccounts/token -n nodeshim", false},
	})

	// The rights at work, as the controller uses them with client-go.
	cc, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, sa.Namespace, sa.Name))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("list nodes as the controller: %v (%d)", err, len(nodes.Items))
	}
	w, err := cc.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: nodes.ResourceVersion})
	if err != nil {
		t.Fatalf("watch the reporters' Leases as the controller: %v", err)
	}
	w.Stop()
	if _, err := cc.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list the reporters' Leases as the controller: %v", err)
	}
	patch := []byte(`{"metadata":{"resourceVersion":"` + nodes.Items[0].ResourceVersion + `"},"status":{"conditions":[{"type":"NodeShimReady","status":"Unknown","reason":"ReporterStopped","message":"test","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if _, err := cc.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeshim-controller"}, "status"); err != nil {
		t.Errorf("patch nodes/status as the controller: %v", err)
	}
	holder := "controller-0"
	el := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "nodeshim-controller", Namespace: controllerNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	if el, err = cc.CoordinationV1().Leases(controllerNamespace).Create(ctx, el, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the election Lease as the controller: %v", err)
	}
	now := metav1.NewMicroTime(time.Now())
	el.Spec.RenewTime = &now
	if _, err := cc.CoordinationV1().Leases(controllerNamespace).Update(ctx, el, metav1.UpdateOptions{}); err != nil {
		t.Errorf("renew the election Lease as the controller: %v", err)
	}
	if _, err := cc.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "node-a.nodeshim-controller-test"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-a"},
		Reason:         "ReporterStopped", Message: "test", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "nodeshim-controller"},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create an Event as the controller: %v", err)
	}
	// Beyond: a forged heartbeat, and a change to the Node itself.
	if _, err := cc.CoordinationV1().Leases(namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a reporter Lease created by the controller: %v, want Forbidden", err)
	}
	if _, err := cc.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("patch of the Node itself as the controller: %v, want Forbidden", err)
	}
}
