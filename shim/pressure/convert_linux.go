package pressure

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// FromSnapshot converts a pressure monitor snapshot and its watchers into
// the document's Pressure.
func FromSnapshot(s cgroup.Snapshot, watchers []cgroup.WatcherStatus) status.Pressure {
	p := status.Pressure{ObservedAt: s.Time}
	for _, name := range cgroup.Signals {
		o, ok := s.Observations[name]
		sig := status.Signal{Name: string(name)}
		switch {
		case !ok:
			sig.Unknown = "not observed"
		case o.Err != nil:
			sig.Unknown = o.Err.Error()
		default:
			sig.Available, sig.Capacity, sig.Source = o.Available, o.Capacity, o.Source
		}
		p.Signals = append(p.Signals, sig)
	}
	for i, r := range cgroup.Resources {
		pr := s.Pressure[i]
		v := status.PSI{Resource: string(r)}
		if pr.Err != nil {
			v.Unknown = pr.Err.Error()
		} else {
			v.Some = psiLine(pr.PSI.Some)
			if pr.PSI.HasFull {
				f := psiLine(pr.PSI.Full)
				v.Full = &f
			}
		}
		p.PSI = append(p.PSI, v)
	}
	for _, w := range watchers {
		p.Watchers = append(p.Watchers, status.PressureWatcher{Path: w.Path, Mode: string(w.Mode), Trigger: w.Trigger, FallbackReason: w.FallbackReason})
	}
	return p
}

func psiLine(l cgroup.PSILine) status.PSILine {
	return status.PSILine{Avg10: l.Avg10.Percent(), Avg60: l.Avg60.Percent(), Avg300: l.Avg300.Percent(), TotalMicroseconds: l.Total}
}

// KubeletCondition converts one of kubelet's pressure conditions as the
// cgroup Evaluator computes it (True means pressure): a condition under
// pressure gets Severity Warning, kubelet's signal that it starts evicting.
func KubeletCondition(nc corev1.NodeCondition) condition.Condition {
	c := condition.Condition{
		Type:    string(nc.Type),
		Status:  condition.Unknown,
		Reason:  nc.Reason,
		Message: nc.Message,
	}
	switch nc.Status {
	case corev1.ConditionTrue:
		c.Status, c.Severity = condition.True, condition.SeverityWarning
	case corev1.ConditionFalse:
		c.Status = condition.False
	}
	return c
}

// ViewCondition converts a positive-polarity PSI view
// (MemoryContentionFree, IOContentionFree) with its severity.
func ViewCondition(v cgroup.PSIView) condition.Condition {
	c := KubeletCondition(v.Condition)
	c.Severity = ""
	if c.Status == condition.False {
		switch v.Severity {
		case cgroup.SeverityError:
			c.Severity = condition.SeverityError
		case cgroup.SeverityWarning:
			c.Severity = condition.SeverityWarning
		default:
			c.Severity = condition.SeverityInfo
		}
	}
	return c
}
