package controller

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/reporter"
)

func TestMessage(t *testing.T) {
	renew := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.FixedZone("x", 3600)))
	cases := []struct {
		name  string
		lease *coordinationv1.Lease
		want  string
	}{
		{"no lease", nil, "the nodeshim reporter has no Lease nodeshim/n1"},
		{"never renewed", &coordinationv1.Lease{}, "the nodeshim reporter never renewed its Lease nodeshim/n1"},
		{"renewed", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &renew}},
			"the nodeshim reporter stopped renewing its Lease nodeshim/n1; last renewal at 2026-01-02T02:04:05.678901Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Message("nodeshim", "n1", tc.lease); got != tc.want {
				t.Errorf("Message = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUnknown(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(t0.Add(time.Hour))
	const msg = "silent"
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: message, LastHeartbeatTime: t0, LastTransitionTime: t0}
	}
	mark := func(typ corev1.NodeConditionType, at metav1.Time) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: corev1.ConditionUnknown, Reason: reporter.ReasonReporterStopped, Message: msg, LastTransitionTime: at}
	}
	kubelet := []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", ""),
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
		cond("OtherAgentCondition", corev1.ConditionTrue, "Fine", ""),
	}
	cases := []struct {
		name  string
		conds []corev1.NodeCondition
		want  []corev1.NodeCondition
	}{
		{"no nodeshim conditions", kubelet, nil},
		{"True and False turn Unknown now, sorted, kubelet's left alone",
			append([]corev1.NodeCondition{
				cond("NodeShimReady", corev1.ConditionTrue, "AllReady", ""),
				cond("NodeShimMemoryPressure", corev1.ConditionFalse, "NoPressure", ""),
			}, kubelet...),
			[]corev1.NodeCondition{mark("NodeShimMemoryPressure", now), mark("NodeShimReady", now)}},
		{"Unknown already (shim unreachable) keeps its transition time",
			[]corev1.NodeCondition{cond("NodeShimNetworkReady", corev1.ConditionUnknown, reporter.ReasonShimUnreachable, "x")},
			[]corev1.NodeCondition{mark("NodeShimNetworkReady", t0)}},
		{"marked already: nothing to write",
			[]corev1.NodeCondition{mark("NodeShimReady", t0)},
			nil},
		{"marked with another message: the message only",
			[]corev1.NodeCondition{{Type: "NodeShimReady", Status: corev1.ConditionUnknown, Reason: reporter.ReasonReporterStopped, Message: "older", LastTransitionTime: t0}},
			[]corev1.NodeCondition{mark("NodeShimReady", t0)}},
		{"Unknown without a transition time gets one",
			[]corev1.NodeCondition{{Type: "NodeShimReady", Status: corev1.ConditionUnknown, Reason: "NotFound"}},
			[]corev1.NodeCondition{mark("NodeShimReady", now)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Unknown(tc.conds, msg, now)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("Unknown =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

func TestStale(t *testing.T) {
	seen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		now   time.Time
		stale bool
		left  time.Duration
	}{
		{"just seen", seen, false, 40 * time.Second},
		{"within grace", seen.Add(39 * time.Second), false, time.Second},
		{"at the end of grace", seen.Add(40 * time.Second), true, 0},
		{"long after", seen.Add(time.Hour), true, 0},
		{"clock before the sighting", seen.Add(-time.Second), false, 41 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stale, left := Stale(seen, tc.now, 40*time.Second)
			if stale != tc.stale || left != tc.left {
				t.Errorf("Stale = %v, %v; want %v, %v", stale, left, tc.stale, tc.left)
			}
		})
	}
}

// TestObservations checks that staleness runs from when the controller saw
// a renewal, on its own clock, whatever time the Lease carries.
func TestObservations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(renew time.Time) *coordinationv1.Lease {
		r := metav1.NewMicroTime(renew)
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &r}}
	}
	// The node's clock is an hour behind: its renewals still count.
	skewed := t0.Add(-time.Hour)
	steps := []struct {
		name  string
		lease *coordinationv1.Lease
		now   time.Time
		want  time.Time
	}{
		{"first sighting", lease(skewed), t0, t0},
		{"same renewal later", lease(skewed), t0.Add(30 * time.Second), t0},
		{"renewed", lease(skewed.Add(10 * time.Second)), t0.Add(31 * time.Second), t0.Add(31 * time.Second)},
		{"gone", nil, t0.Add(40 * time.Second), t0.Add(40 * time.Second)},
		{"still gone", nil, t0.Add(50 * time.Second), t0.Add(40 * time.Second)},
		{"back with the same renewal", lease(skewed.Add(10 * time.Second)), t0.Add(60 * time.Second), t0.Add(60 * time.Second)},
		{"never renewed", &coordinationv1.Lease{}, t0.Add(70 * time.Second), t0.Add(70 * time.Second)},
		{"never renewed, later", &coordinationv1.Lease{}, t0.Add(80 * time.Second), t0.Add(70 * time.Second)},
	}
	var o observations
	for _, s := range steps {
		if got := o.observeLease("n1", s.lease, s.now); !got.Equal(s.want) {
			t.Errorf("%s: seen %v, want %v", s.name, got, s.want)
		}
	}
	if got := o.observeLease("n2", nil, t0); !got.Equal(t0) {
		t.Errorf("another node: seen %v, want %v", got, t0)
	}
	// A status patch from the reporter counts as a sighting too.
	hb := t0.Add(-time.Hour)
	if got := o.observeHeartbeat("n2", hb, t0.Add(time.Second)); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("first heartbeat: seen %v, want %v", got, t0.Add(time.Second))
	}
	if got := o.observeHeartbeat("n2", hb, t0.Add(2*time.Second)); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("same heartbeat: seen %v, want %v", got, t0.Add(time.Second))
	}
	if got := o.observeLease("n2", nil, t0.Add(3*time.Second)); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("still no Lease: seen %v, want %v", got, t0.Add(time.Second))
	}
	if got := o.observeHeartbeat("n2", hb.Add(time.Minute), t0.Add(4*time.Second)); !got.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("new heartbeat: seen %v, want %v", got, t0.Add(4*time.Second))
	}
	o.forget("n1")
	if got := o.observeLease("n1", lease(skewed), t0.Add(time.Hour)); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("after forget: seen %v, want a new sighting", got)
	}
}
