package cgroup

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Clock tells the time; tests inject a fake one so that transition periods
// pass without sleeping.
type Clock interface {
	Now() time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// DefaultTransitionPeriod is kubelet's default
// --eviction-pressure-transition-period.
const DefaultTransitionPeriod = 5 * time.Minute

// ConditionFor maps a signal to the node condition it drives, as kubelet's
// signalToNodeCondition does.
func ConditionFor(s Signal) corev1.NodeConditionType {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return corev1.NodeMemoryPressure
	case SignalPIDAvailable:
		return corev1.NodePIDPressure
	default:
		return corev1.NodeDiskPressure
	}
}

// PressureConditions lists the conditions the Evaluator produces, in order.
var PressureConditions = [...]corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// Reasons of the pressure conditions. They follow kubelet's reasons
// (KubeletHasSufficientMemory...) without claiming to be kubelet.
var pressureReasons = map[corev1.NodeConditionType][2]string{
	corev1.NodeMemoryPressure: {"HasSufficientMemory", "HasInsufficientMemory"},
	corev1.NodeDiskPressure:   {"HasNoDiskPressure", "HasDiskPressure"},
	corev1.NodePIDPressure:    {"HasSufficientPID", "HasInsufficientPID"},
}

// ReasonSignalUnknown is the reason of a pressure condition whose status is
// Unknown because a signal it depends on could not be read.
const ReasonSignalUnknown = "SignalUnknown"

// Transition is a change of a condition's status.
type Transition struct {
	Condition corev1.NodeCondition
	// From is the previous status; empty for a condition's first evaluation.
	From corev1.ConditionStatus
}

// Evaluator turns observations into MemoryPressure, DiskPressure and
// PIDPressure with kubelet's polarity (True means pressure). A condition is
// set as soon as one of its thresholds is crossed and cleared only after no
// threshold has been crossed for the transition period, so it does not flap.
// An Evaluator is not safe for concurrent use.
type Evaluator struct {
	thresholds []Threshold
	period     time.Duration
	clock      Clock
	conds      map[corev1.NodeConditionType]*condState
}

type condState struct {
	cond        corev1.NodeCondition
	lastCrossed time.Time
	crossedMsg  string
}

// NewEvaluator returns an Evaluator for thresholds. A zero period means
// DefaultTransitionPeriod; a nil clock means RealClock.
func NewEvaluator(thresholds []Threshold, period time.Duration, clock Clock) *Evaluator {
	if period == 0 {
		period = DefaultTransitionPeriod
	}
	if clock == nil {
		clock = RealClock{}
	}
	return &Evaluator{thresholds: thresholds, period: period, clock: clock, conds: map[corev1.NodeConditionType]*condState{}}
}

// Update evaluates obs and returns every condition and the transitions it
// caused.
func (e *Evaluator) Update(obs Observations) ([]corev1.NodeCondition, []Transition) {
	now := e.clock.Now()
	mnow := metav1.NewTime(now)
	var out []corev1.NodeCondition
	var trans []Transition
	for _, ct := range PressureConditions {
		var crossed, unknown, fine []string
		for _, t := range e.thresholds {
			if ConditionFor(t.Signal) != ct {
				continue
			}
			o, ok := obs[t.Signal]
			switch {
			case !ok:
				unknown = append(unknown, fmt.Sprintf("%s unknown: not observed", t.Signal))
			case !o.Known():
				unknown = append(unknown, fmt.Sprintf("%s unknown: %v", t.Signal, o.Err))
			case t.Crossed(o):
				crossed = append(crossed, fmt.Sprintf("%s is %s, threshold %s", t.Signal, formatAmount(t.Signal, o.Available), t))
			default:
				fine = append(fine, fmt.Sprintf("%s is %s, threshold %s", t.Signal, formatAmount(t.Signal, o.Available), t))
			}
		}
		st := e.conds[ct]
		if st == nil {
			st = &condState{}
			e.conds[ct] = st
		}
		reasons := pressureReasons[ct]
		var status corev1.ConditionStatus
		var reason, msg string
		switch {
		case len(crossed) > 0:
			st.lastCrossed, st.crossedMsg = now, strings.Join(crossed, "; ")
			status, reason, msg = corev1.ConditionTrue, reasons[1], st.crossedMsg
		case !st.lastCrossed.IsZero() && now.Sub(st.lastCrossed) < e.period:
			status, reason = corev1.ConditionTrue, reasons[1]
			msg = fmt.Sprintf("%s at %s; held for the %s transition period", st.crossedMsg, st.lastCrossed.UTC().Format(time.RFC3339), e.period)
		case len(unknown) > 0:
			status, reason, msg = corev1.ConditionUnknown, ReasonSignalUnknown, strings.Join(unknown, "; ")
		default:
			status, reason = corev1.ConditionFalse, reasons[0]
			msg = strings.Join(fine, "; ")
			if msg == "" {
				msg = "no threshold configured for this condition"
			}
		}
		prev := st.cond.Status
		st.cond.Type, st.cond.Reason, st.cond.Message = ct, reason, msg
		st.cond.LastHeartbeatTime = mnow
		if prev != status {
			st.cond.Status, st.cond.LastTransitionTime = status, mnow
			trans = append(trans, Transition{Condition: st.cond, From: prev})
		}
		out = append(out, st.cond)
	}
	return out, trans
}

// formatAmount prints an available amount in the unit of its signal.
func formatAmount(s Signal, v uint64) string {
	switch s {
	case SignalNodeFsInodesFree, SignalImageFsInodesFree:
		return fmt.Sprintf("%d inodes", v)
	case SignalPIDAvailable:
		return fmt.Sprintf("%d pids", v)
	}
	if v > 1<<62 {
		return fmt.Sprintf("%d bytes", v)
	}
	return resource.NewQuantity(int64(v), resource.BinarySI).String()
}
