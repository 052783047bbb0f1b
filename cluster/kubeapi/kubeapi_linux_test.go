package kubeapi

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kubetest.ClientLoops()...)
}

// TestAgainstAPIServer makes each of the reporter's requests with the
// small scheme of ForConfig against a real kube-apiserver.
func TestAgainstAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	api, err := ForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := api.GetNode(ctx, "node-k"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetNode of a missing Node: %v, want NotFound", err)
	}
	if _, err := c.AdminClient(t).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-k"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"conditions":[{"type":"NodeShimReady","status":"True","reason":"AllReady","message":""}]}}`)
	if err := api.PatchNodeStatus(ctx, "node-k", patch, "nodeshim-reporter"); err != nil {
		t.Fatal(err)
	}
	n, err := api.GetNode(ctx, "node-k")
	if err != nil || len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != "NodeShimReady" {
		t.Fatalf("GetNode after the patch: %+v, %v", n.Status.Conditions, err)
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "node-k.1", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-k", UID: n.UID},
		Reason:         "Test", Message: "m", Type: corev1.EventTypeNormal, FirstTimestamp: now, LastTimestamp: now, Count: 1}
	if err := api.CreateEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := api.CreateEvent(ctx, ev); !apierrors.IsAlreadyExists(err) {
		t.Errorf("CreateEvent twice: %v, want AlreadyExists", err)
	}
	if _, err := api.GetLease(ctx, metav1.NamespaceDefault, "node-k"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetLease of a missing Lease: %v, want NotFound", err)
	}
	renew := metav1.NewMicroTime(time.Now().Truncate(time.Second))
	l, err := api.CreateLease(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-k", Namespace: metav1.NamespaceDefault},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-k"), RenewTime: &renew}}, "nodeshim-reporter")
	if err != nil || l.ResourceVersion == "" {
		t.Fatalf("CreateLease: %+v, %v", l, err)
	}
	later := metav1.NewMicroTime(renew.Add(10 * time.Second))
	l.Spec.RenewTime = &later
	u, err := api.UpdateLease(ctx, l, "nodeshim-reporter")
	if err != nil || !u.Spec.RenewTime.Equal(&later) {
		t.Fatalf("UpdateLease: %+v, %v", u, err)
	}
	if _, err := api.UpdateLease(ctx, l, "nodeshim-reporter"); !apierrors.IsConflict(err) {
		t.Errorf("UpdateLease with a stale resourceVersion: %v, want Conflict", err)
	}
	g, err := api.GetLease(ctx, metav1.NamespaceDefault, "node-k")
	if err != nil || g.ResourceVersion != u.ResourceVersion {
		t.Fatalf("GetLease: %+v, %v", g, err)
	}

	// The controller's informers: list, then watch from the list's
	// resourceVersion, with selectors encoded by the small scheme.
	nodes, err := api.ListNodes(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-k"})
	if err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "node-k" || nodes.ResourceVersion == "" {
		t.Fatalf("ListNodes: %+v, %v", nodes, err)
	}
	if nodes, err := api.ListNodes(ctx, metav1.ListOptions{FieldSelector: "metadata.name=none"}); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("ListNodes with a selector of no Node: %+v, %v", nodes, err)
	}
	leases, err := api.ListLeases(ctx, metav1.NamespaceDefault, metav1.ListOptions{})
	if err != nil || len(leases.Items) != 1 || leases.Items[0].ResourceVersion != u.ResourceVersion {
		t.Fatalf("ListLeases: %+v, %v", leases, err)
	}
	if leases, err := api.ListLeases(ctx, metav1.NamespaceSystem, metav1.ListOptions{LabelSelector: "x=y"}); err != nil || len(leases.Items) != 0 {
		t.Fatalf("ListLeases in another namespace: %+v, %v", leases, err)
	}
	lw, err := api.WatchLeases(ctx, metav1.NamespaceDefault, metav1.ListOptions{ResourceVersion: leases.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Stop()
	nw, err := api.WatchNodes(ctx, metav1.ListOptions{ResourceVersion: nodes.ResourceVersion, TimeoutSeconds: ptr.To[int64](60)})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Stop()
	latest := metav1.NewMicroTime(later.Add(10 * time.Second))
	g.Spec.RenewTime = &latest
	if _, err := api.UpdateLease(ctx, g, "nodeshim-reporter"); err != nil {
		t.Fatal(err)
	}
	if ev := <-lw.ResultChan(); ev.Type != watch.Modified || !ev.Object.(*coordinationv1.Lease).Spec.RenewTime.Equal(&latest) {
		t.Errorf("Lease watch event %s %+v, want the renewal", ev.Type, ev.Object)
	}
	if err := api.PatchNodeStatus(ctx, "node-k", []byte(`{"status":{"conditions":[{"type":"NodeShimReady","status":"False","reason":"R","message":""}]}}`), "nodeshim-reporter"); err != nil {
		t.Fatal(err)
	}
	if ev := <-nw.ResultChan(); ev.Type != watch.Modified || ev.Object.(*corev1.Node).Status.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("Node watch event %s %+v, want the patch", ev.Type, ev.Object)
	}
}
