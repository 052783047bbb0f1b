package clustertest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var env Env

func TestMain(m *testing.M) {
	code := m.Run()
	if err := env.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestNodeReady: this machine registers as a Node with kubelet's own
// conditions, all healthy, and kubelet's Lease.
func TestNodeReady(t *testing.T) {
	c := env.Cluster(t)
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
