package eviction

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
)

// PSIThresholds are the `some` stall percentages at which contention of a
// resource is reported, by severity. Contention begins when both avg10 and
// avg60 reach Info and ends when avg60 falls below Info; while it lasts, the
// severity is the highest level both averages reach (at least Info).
type PSIThresholds struct {
	Info, Warning, Error cgroup.Avg
}

// DefaultPSIThresholds: 10 %, 25 % and 50 % of wall time with some tasks
// stalled.
var DefaultPSIThresholds = PSIThresholds{Info: 1000, Warning: 2500, Error: 5000}

// PSIConditionType returns the positive-polarity condition type of a
// resource's PSI view, e.g. "MemoryContentionFree": True means no contention.
func PSIConditionType(r cgroup.Resource) string {
	switch r {
	case cgroup.Memory:
		return "MemoryContentionFree"
	case cgroup.IO:
		return "IOContentionFree"
	}
	return string(r) + "ContentionFree"
}

// PSIViewResources are the resources with a PSI view. CPU is left out on
// purpose: one pod throttled by its own CPU limit raises the node's CPU
// pressure without the node being short of CPU, so CPU PSI is a metric.
var PSIViewResources = [...]cgroup.Resource{cgroup.Memory, cgroup.IO}

// PSIEvaluator keeps the PSI views of one scope (the node, or kubepods):
// positive-polarity conditions, False with a severity while the resource
// is contended. It is not safe for concurrent use.
type PSIEvaluator struct {
	th    PSIThresholds
	views map[cgroup.Resource]*condition.Condition
}

// NewPSIEvaluator returns a PSIEvaluator.
func NewPSIEvaluator(th PSIThresholds) *PSIEvaluator {
	return &PSIEvaluator{th: th, views: map[cgroup.Resource]*condition.Condition{}}
}

// Update evaluates one resource's pressure, read at now, and returns its
// view and, when status or severity changed, the transition.
func (e *PSIEvaluator) Update(now time.Time, r cgroup.Resource, p cgroup.Pressure) (condition.Condition, *Transition) {
	v := e.views[r]
	if v == nil {
		v = &condition.Condition{}
		e.views[r] = v
	}
	prevStatus, prevSev := v.Status, v.Severity
	ct := PSIConditionType(r)
	var status metav1.ConditionStatus
	var sev condition.Severity
	var reason, msg string
	s := p.PSI.Some
	switch {
	case p.Err != nil:
		status, reason, msg = condition.Unknown, "PressureUnknown", fmt.Sprintf("%s pressure unknown: %v", r, p.Err)
	case (prevStatus == condition.False && s.Avg60 >= e.th.Info) || (s.Avg10 >= e.th.Info && s.Avg60 >= e.th.Info):
		status, reason = condition.False, ct[:len(ct)-len("Free")]
		both := min(s.Avg10, s.Avg60)
		switch {
		case both >= e.th.Error:
			sev = condition.SeverityError
		case both >= e.th.Warning:
			sev = condition.SeverityWarning
		default:
			sev = condition.SeverityInfo
		}
		msg = fmt.Sprintf("%s pressure some avg10=%s%% avg60=%s%% (full avg10=%s%%), %s threshold %s%%", r, s.Avg10, s.Avg60, p.PSI.Full.Avg10, sev, e.levelOf(sev))
	default:
		status, reason = condition.True, "No"+ct[:len(ct)-len("Free")]
		msg = fmt.Sprintf("%s pressure some avg10=%s%% avg60=%s%%, under %s%%", r, s.Avg10, s.Avg60, e.th.Info)
	}
	v.Type, v.Reason, v.Message = ct, reason, msg
	var tr *Transition
	if status != prevStatus || sev != prevSev {
		if status != prevStatus {
			v.LastTransitionTime = metav1.NewTime(now)
		}
		v.Status, v.Severity = status, sev
		tr = &Transition{Condition: *v, From: prevStatus, FromSeverity: prevSev}
	}
	return *v, tr
}

func (e *PSIEvaluator) levelOf(s condition.Severity) cgroup.Avg {
	switch s {
	case condition.SeverityError:
		return e.th.Error
	case condition.SeverityWarning:
		return e.th.Warning
	}
	return e.th.Info
}
