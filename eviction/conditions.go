package eviction

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/condition"
)

// DefaultTransitionPeriod is kubelet's default
// --eviction-pressure-transition-period.
const DefaultTransitionPeriod = 5 * time.Minute

// ConditionFor maps a signal to the condition type it drives, as kubelet's
// signalToNodeCondition does.
func ConditionFor(s Signal) string {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return condition.TypeMemoryPressure
	case SignalPIDAvailable:
		return condition.TypePIDPressure
	default:
		return condition.TypeDiskPressure
	}
}

// PressureConditions lists the conditions the Evaluator produces, in order.
var PressureConditions = [...]string{condition.TypeMemoryPressure, condition.TypeDiskPressure, condition.TypePIDPressure}

// Reasons of the pressure conditions. They follow kubelet's reasons
// (KubeletHasSufficientMemory...) without claiming to be kubelet.
var pressureReasons = map[string][2]string{
	condition.TypeMemoryPressure: {"HasSufficientMemory", "HasInsufficientMemory"},
	condition.TypeDiskPressure:   {"HasNoDiskPressure", "HasDiskPressure"},
	condition.TypePIDPressure:    {"HasSufficientPID", "HasInsufficientPID"},
}

// ReasonSignalUnknown is the reason of a pressure condition whose status is
// Unknown because a signal it depends on could not be read.
const ReasonSignalUnknown = "SignalUnknown"

// Transition is a change of a condition's status or severity.
type Transition struct {
	Condition condition.Condition
	// From and FromSeverity are the previous status and severity; From is
	// empty for a condition's first evaluation.
	From         metav1.ConditionStatus
	FromSeverity condition.Severity
}

// Evaluator turns observations into MemoryPressure, DiskPressure and
// PIDPressure with kubelet's polarity (True means pressure). A condition is
// set as soon as one of its thresholds is crossed and cleared only after no
// threshold has been crossed for the transition period, so it does not flap.
// Under pressure a condition has Severity Warning: kubelet starts evicting.
// An Evaluator is not safe for concurrent use.
type Evaluator struct {
	thresholds []Threshold
	period     time.Duration
	conds      map[string]*condState
}

type condState struct {
	cond        condition.Condition
	lastCrossed time.Time
	crossedMsg  string
}

// NewEvaluator returns an Evaluator for thresholds. A zero period means
// DefaultTransitionPeriod.
func NewEvaluator(thresholds []Threshold, period time.Duration) *Evaluator {
	if period == 0 {
		period = DefaultTransitionPeriod
	}
	return &Evaluator{thresholds: thresholds, period: period, conds: map[string]*condState{}}
}

// Update evaluates obs, observed at now, and returns every condition and
// the transitions it caused.
func (e *Evaluator) Update(now time.Time, obs Observations) ([]condition.Condition, []Transition) {
	mnow := metav1.NewTime(now)
	var out []condition.Condition
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
		var status metav1.ConditionStatus
		var sev condition.Severity
		var reason, msg string
		switch {
		case len(crossed) > 0:
			st.lastCrossed, st.crossedMsg = now, strings.Join(crossed, "; ")
			status, sev, reason, msg = condition.True, condition.SeverityWarning, reasons[1], st.crossedMsg
		case !st.lastCrossed.IsZero() && now.Sub(st.lastCrossed) < e.period:
			status, sev, reason = condition.True, condition.SeverityWarning, reasons[1]
			msg = fmt.Sprintf("%s at %s; held for the %s transition period", st.crossedMsg, st.lastCrossed.UTC().Format(time.RFC3339), e.period)
		case len(unknown) > 0:
			status, reason, msg = condition.Unknown, ReasonSignalUnknown, strings.Join(unknown, "; ")
		default:
			status, reason = condition.False, reasons[0]
			msg = strings.Join(fine, "; ")
			if msg == "" {
				msg = "no threshold configured for this condition"
			}
		}
		prev, prevSev := st.cond.Status, st.cond.Severity
		st.cond.Type, st.cond.Reason, st.cond.Message = ct, reason, msg
		if prev != status || prevSev != sev {
			if prev != status {
				st.cond.LastTransitionTime = mnow
			}
			st.cond.Status, st.cond.Severity = status, sev
			trans = append(trans, Transition{Condition: st.cond, From: prev, FromSeverity: prevSev})
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
