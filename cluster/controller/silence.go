package controller

import (
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/reporter"
)

// Message is what a marked condition says: which Lease went silent and
// when it was last renewed. It depends only on the Lease, so that every
// replica, before and after a restart, writes the same words and a node
// that is marked already is not written again.
func Message(namespace, name string, lease *coordinationv1.Lease) string {
	switch {
	case lease == nil:
		return fmt.Sprintf("the nodeshim reporter has no Lease %s/%s", namespace, name)
	case lease.Spec.RenewTime == nil:
		return fmt.Sprintf("the nodeshim reporter never renewed its Lease %s/%s", namespace, name)
	}
	return fmt.Sprintf("the nodeshim reporter stopped renewing its Lease %s/%s; last renewal at %s",
		namespace, name, lease.Spec.RenewTime.UTC().Format(metav1.RFC3339Micro))
}

// Unknown returns what marking a node silent changes among its conditions
// conds: each nodeshim condition (reporter.Owned, never kubelet's) that is
// not already Unknown with reason ReporterStopped and message, as it must
// become. lastTransitionTime moves to now only for a condition whose status
// was not Unknown already; lastHeartbeatTime is left out (it is the
// reporter's). The result is sorted by type; empty when there is nothing to
// write.
func Unknown(conds []corev1.NodeCondition, message string, now metav1.Time) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range reporter.Published(conds) {
		if c.Status == corev1.ConditionUnknown && c.Reason == reporter.ReasonReporterStopped && c.Message == message {
			continue
		}
		m := corev1.NodeCondition{Type: c.Type, Status: corev1.ConditionUnknown, Reason: reporter.ReasonReporterStopped,
			Message: message, LastTransitionTime: c.LastTransitionTime}
		if c.Status != corev1.ConditionUnknown || c.LastTransitionTime.IsZero() {
			m.LastTransitionTime = now
		}
		out = append(out, m)
	}
	return out
}

// Stale reports whether a Lease whose renewal was last seen to change at
// seen is stale at now for grace, and otherwise how long until it would be.
func Stale(seen, now time.Time, grace time.Duration) (bool, time.Duration) {
	if left := seen.Add(grace).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// observation is what the controller last saw of a node's reporter (its
// Lease, and the heartbeat time of the conditions it published) and when it
// first saw it so, on its own clock.
type observation struct {
	present   bool
	renew     time.Time
	heartbeat time.Time
	seen      time.Time
}

// observations are the controller's sightings of the reporters' Leases by
// node name, kept by every replica, leader or not.
type observations struct {
	mu sync.Mutex
	m  map[string]observation
}

// observeLease records l (nil: no Lease) for name at now, and returns the
// time since which the controller has seen the reporter as it is: now when
// the Lease's presence or renewTime changed, the earlier sighting
// otherwise.
func (o *observations) observeLease(name string, l *coordinationv1.Lease, now time.Time) time.Time {
	var renew time.Time
	if l != nil && l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	return o.update(name, now, func(ob *observation) bool {
		changed := ob.present != (l != nil) || !ob.renew.Equal(renew)
		ob.present, ob.renew = l != nil, renew
		return changed
	})
}

// observeHeartbeat records the lastHeartbeatTime of the nodeshim conditions
// on the Node name, which only the reporter writes, as observeLease records
// the Lease: a reporter whose status patch arrives before its Lease renewal
// (one just restarted) is alive, as kube-controller-manager counts a
// kubelet's status update as well as its Lease.
func (o *observations) observeHeartbeat(name string, heartbeat, now time.Time) time.Time {
	return o.update(name, now, func(ob *observation) bool {
		changed := !ob.heartbeat.Equal(heartbeat)
		ob.heartbeat = heartbeat
		return changed
	})
}

// update applies change to name's observation; the sighting moves to now
// when change reports a change, or when name is new.
func (o *observations) update(name string, now time.Time, change func(*observation) bool) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]observation{}
	}
	ob, ok := o.m[name]
	if change(&ob) || !ok {
		ob.seen = now
	}
	o.m[name] = ob
	return ob.seen
}

// heartbeat is the latest lastHeartbeatTime among the nodeshim conditions
// of conds.
func heartbeat(conds []corev1.NodeCondition) time.Time {
	var hb time.Time
	for _, c := range reporter.Published(conds) {
		if c.LastHeartbeatTime.After(hb) {
			hb = c.LastHeartbeatTime.Time
		}
	}
	return hb
}

// forget drops name (its Node is gone).
func (o *observations) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, name)
}
