package pressure

import (
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/shim/status"
)

// FromSnapshot converts a pressure monitor snapshot and its watchers into
// the document's Pressure.
func FromSnapshot(s eviction.Snapshot, watchers []cgroup.WatcherStatus) status.Pressure {
	p := status.Pressure{ObservedAt: s.Time}
	for _, name := range eviction.Signals {
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
