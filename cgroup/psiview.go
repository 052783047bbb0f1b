package cgroup

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Severity grades contention in a PSI view.
type Severity string

// The severities, from mild to severe.
const (
	SeverityNone    Severity = ""
	SeverityInfo    Severity = "Info"
	SeverityWarning Severity = "Warning"
	SeverityError   Severity = "Error"
)

// PSIThresholds are the `some` stall percentages at which contention of a
// resource is reported, by severity. Contention begins when both avg10 and
// avg60 reach Info and ends when avg60 falls below Info; while it lasts, the
// severity is the highest level both averages reach (at least Info).
type PSIThresholds struct {
	Info, Warning, Error Avg
}

// DefaultPSIThresholds: 10 %, 25 % and 50 % of wall time with some tasks
// stalled.
var DefaultPSIThresholds = PSIThresholds{Info: 1000, Warning: 2500, Error: 5000}

// PSIConditionType returns the positive-polarity condition type of a
// resource's PSI view, e.g. "MemoryContentionFree": True means no contention.
func PSIConditionType(r Resource) corev1.NodeConditionType {
	switch r {
	case Memory:
		return "MemoryContentionFree"
	case IO:
		return "IOContentionFree"
	}
	return corev1.NodeConditionType(string(r) + "ContentionFree")
}

// PSIViewResources are the resources with a PSI view. CPU is left out on
// purpose: one pod throttled by its own CPU limit raises the node's CPU
// pressure without the node being short of CPU, so CPU PSI is a metric.
var PSIViewResources = [...]Resource{Memory, IO}

// PSIView is a positive-polarity condition for one resource's pressure.
type PSIView struct {
	Resource  Resource
	Severity  Severity
	Condition corev1.NodeCondition
}

// PSITransition is a change of a PSI view's status or severity.
type PSITransition struct {
	View PSIView
	// From and FromSeverity are the previous status and severity; From is
	// empty for a view's first evaluation.
	From         corev1.ConditionStatus
	FromSeverity Severity
}

// PSIEvaluator keeps the PSI views of one scope (the node, or kubepods).
// It is not safe for concurrent use.
type PSIEvaluator struct {
	th    PSIThresholds
	clock Clock
	views map[Resource]*PSIView
}

// NewPSIEvaluator returns a PSIEvaluator; a nil clock means RealClock.
func NewPSIEvaluator(th PSIThresholds, clock Clock) *PSIEvaluator {
	if clock == nil {
		clock = RealClock{}
	}
	return &PSIEvaluator{th: th, clock: clock, views: map[Resource]*PSIView{}}
}

// Update evaluates one resource's pressure and returns its view and, when
// status or severity changed, the transition.
func (e *PSIEvaluator) Update(r Resource, p Pressure) (PSIView, *PSITransition) {
	now := metav1.NewTime(e.clock.Now())
	v := e.views[r]
	if v == nil {
		v = &PSIView{Resource: r}
		e.views[r] = v
	}
	prevStatus, prevSev := v.Condition.Status, v.Severity
	ct := PSIConditionType(r)
	var status corev1.ConditionStatus
	var sev Severity
	var reason, msg string
	s := p.PSI.Some
	switch {
	case p.Err != nil:
		status, reason, msg = corev1.ConditionUnknown, "PressureUnknown", fmt.Sprintf("%s pressure unknown: %v", r, p.Err)
	case (prevStatus == corev1.ConditionFalse && s.Avg60 >= e.th.Info) || (s.Avg10 >= e.th.Info && s.Avg60 >= e.th.Info):
		status, reason = corev1.ConditionFalse, string(ct[:len(ct)-len("Free")])
		both := min(s.Avg10, s.Avg60)
		switch {
		case both >= e.th.Error:
			sev = SeverityError
		case both >= e.th.Warning:
			sev = SeverityWarning
		default:
			sev = SeverityInfo
		}
		msg = fmt.Sprintf("%s pressure some avg10=%s%% avg60=%s%% (full avg10=%s%%), %s threshold %s%%", r, s.Avg10, s.Avg60, p.PSI.Full.Avg10, sev, e.levelOf(sev))
	default:
		status, reason = corev1.ConditionTrue, "No"+string(ct[:len(ct)-len("Free")])
		msg = fmt.Sprintf("%s pressure some avg10=%s%% avg60=%s%%, under %s%%", r, s.Avg10, s.Avg60, e.th.Info)
	}
	v.Severity = sev
	v.Condition.Type, v.Condition.Reason, v.Condition.Message = ct, reason, msg
	v.Condition.LastHeartbeatTime = now
	var tr *PSITransition
	if status != prevStatus || sev != prevSev {
		if status != prevStatus {
			v.Condition.LastTransitionTime = now
		}
		v.Condition.Status = status
		tr = &PSITransition{View: *v, From: prevStatus, FromSeverity: prevSev}
	}
	return *v, tr
}

func (e *PSIEvaluator) levelOf(s Severity) Avg {
	switch s {
	case SeverityError:
		return e.th.Error
	case SeverityWarning:
		return e.th.Warning
	}
	return e.th.Info
}
