package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The heartbeat of kubelet (1.33 to 1.37) with its defaults: the node Lease in
// kube-node-lease renewed every nodeLeaseDurationSeconds/4 (10 s) with
// jitter (pkg/kubelet/nodelease, 0.04), and the Node's status patched when
// it changes or every nodeStatusReportFrequency (5 min). kubelet reads its
// Node from its informer cache, not from the API server, between reports.
const (
	KubeletLeaseNamespace = "kube-node-lease"
	KubeletRenewInterval  = 10 * time.Second
	KubeletReportPeriod   = 5 * time.Minute
	kubeletLeaseDuration  = 40
	kubeletJitter         = 0.04
)

// KubeletHeartbeat is the reference load of one node's kubelet: its Lease
// renewals and its periodic status patches, with nothing else of kubelet.
type KubeletHeartbeat struct {
	// Node is the Node and the Lease's name.
	Node string
	// Client talks to the API server.
	Client kubernetes.Interface
	// FirstReport is the delay before the first status patch: a fleet's
	// kubelets started long ago report at phases spread over the period.
	FirstReport time.Duration
}

// Run renews the Lease and patches the status until ctx is done; errors
// are retried at the next tick, as kubelet does.
func (k *KubeletHeartbeat) Run(ctx context.Context) {
	var lease *coordinationv1.Lease
	renew := time.NewTimer(0)
	defer renew.Stop()
	report := time.NewTimer(k.FirstReport)
	defer report.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			l, err := k.renew(ctx, lease)
			if err == nil {
				lease = l
			} else {
				lease = nil
			}
			renew.Reset(time.Duration(float64(KubeletRenewInterval) * (1 + kubeletJitter*rand.Float64())))
		case <-report.C:
			// Errors are retried at the next period, as a missed report is
			// by kubelet's next status sync.
			_ = k.patchStatus(ctx)
			report.Reset(KubeletReportPeriod)
		}
	}
}

func (k *KubeletHeartbeat) renew(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := k.Client.CoordinationV1().Leases(KubeletLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	if lease == nil {
		l, err := leases.Get(ctx, k.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: k.Node, Namespace: KubeletLeaseNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.Node),
					LeaseDurationSeconds: ptr.To(int32(kubeletLeaseDuration)), RenewTime: &now},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("get lease %s: %w", k.Node, err)
		}
		lease = l
	}
	l := lease.DeepCopy()
	l.Spec.RenewTime = &now
	return leases.Update(ctx, l, metav1.UpdateOptions{})
}

// patchStatus sends what kubelet's unchanged status report sends: its
// conditions with a new heartbeat time.
func (k *KubeletHeartbeat) patchStatus(ctx context.Context) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": KubeletConditions(time.Now())}})
	if err != nil {
		return err
	}
	_, err = k.Client.CoreV1().Nodes().Patch(ctx, k.Node, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status of node %s: %w", k.Node, err)
	}
	return nil
}

// KubeletConditions are a healthy kubelet's conditions, heartbeat at.
func KubeletConditions(at time.Time) []corev1.NodeCondition {
	ts := metav1.NewTime(at).Rfc3339Copy()
	since := metav1.NewTime(at.Add(-24 * time.Hour)).Rfc3339Copy()
	c := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: ts, LastTransitionTime: since}
	}
	return []corev1.NodeCondition{
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
}
