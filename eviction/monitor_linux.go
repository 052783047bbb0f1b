package eviction

import (
	"context"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
)

// MonitorConfig configures a Monitor. Zero fields take their defaults.
type MonitorConfig struct {
	// Read configures the cgroup.Monitor that reads the node. Its
	// OnEvaluate is the Monitor's own: set OnEvaluate below instead.
	Read cgroup.MonitorConfig
	// Thresholds default to DefaultHardThresholds.
	Thresholds []Threshold
	// TransitionPeriod defaults to DefaultTransitionPeriod.
	TransitionPeriod time.Duration
	// PSIThresholds default to DefaultPSIThresholds.
	PSIThresholds PSIThresholds
	// OnEvaluate, when set, is called by Run after every evaluation with
	// its snapshot (the live values a status model shows between
	// transitions), from Run's goroutine, before the events are emitted.
	OnEvaluate func(Snapshot)
}

// EventKind tells what an Event reports.
type EventKind string

// The kinds of events.
const (
	EventCondition EventKind = "Condition"
	EventPSIView   EventKind = "PSIView"
	EventPressure  EventKind = "Pressure"
)

// Event is one item of a Monitor's event stream. Exactly one of Condition,
// PSIView and Pressure is set, as Kind says.
type Event struct {
	Kind EventKind
	Time time.Time
	// Condition is a transition of MemoryPressure, DiskPressure or
	// PIDPressure.
	Condition *Transition
	// PSIView is a transition of MemoryContentionFree or IOContentionFree.
	PSIView  *Transition
	Pressure *cgroup.PressureEvent
}

// Snapshot is the outcome of one evaluation: what was read of the node,
// and the conditions it gives.
type Snapshot struct {
	cgroup.Snapshot
	// Observations are the available amounts by signal.
	Observations Observations
	// Conditions are MemoryPressure, DiskPressure and PIDPressure, in
	// that order.
	Conditions []condition.Condition
	// PSIViews are the views of PSIViewResources, in that order.
	PSIViews []condition.Condition
}

// Monitor evaluates the policy on every snapshot of a cgroup.Monitor (at
// an interval, and at once when PSI says pressure happens) and reports the
// transitions.
type Monitor struct {
	cfg  MonitorConfig
	read *cgroup.Monitor
	mu   sync.Mutex // guards eval, psi: Evaluate may be called while Run runs
	eval *Evaluator
	psi  *PSIEvaluator
	// emit is set by Run before the cgroup.Monitor runs, and called from
	// its goroutine (Run's) only.
	emit func(Event)
}

// NewMonitor arms the watchers of the cgroup.Monitor and returns a
// Monitor. Close releases them.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	if cfg.Thresholds == nil {
		cfg.Thresholds = MustDefaultThresholds()
	}
	if cfg.PSIThresholds == (PSIThresholds{}) {
		cfg.PSIThresholds = DefaultPSIThresholds
	}
	m := &Monitor{cfg: cfg, eval: NewEvaluator(cfg.Thresholds, cfg.TransitionPeriod), psi: NewPSIEvaluator(cfg.PSIThresholds)}
	rc := cfg.Read
	rc.OnEvaluate = m.onSnapshot
	read, err := cgroup.NewMonitor(rc)
	if err != nil {
		return nil, err
	}
	m.read = read
	return m, nil
}

// Watchers reports how each pressure file is watched.
func (m *Monitor) Watchers() []cgroup.WatcherStatus { return m.read.Watchers() }

// Close releases the watchers' triggers. Run must have returned.
func (m *Monitor) Close() error { return m.read.Close() }

// Evaluate reads the node once and returns the snapshot and the
// transitions it caused.
func (m *Monitor) Evaluate() (Snapshot, []Event) {
	return m.evaluate(m.read.Evaluate())
}

func (m *Monitor) evaluate(cs cgroup.Snapshot) (Snapshot, []Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Snapshot: cs, Observations: Observe(cs.Available)}
	var events []Event
	var trans []Transition
	s.Conditions, trans = m.eval.Update(cs.Time, s.Observations)
	for i := range trans {
		events = append(events, Event{Kind: EventCondition, Time: cs.Time, Condition: &trans[i]})
	}
	for _, r := range PSIViewResources {
		v, tr := m.psi.Update(cs.Time, r, cs.PressureOf(r))
		s.PSIViews = append(s.PSIViews, v)
		if tr != nil {
			events = append(events, Event{Kind: EventPSIView, Time: cs.Time, PSIView: tr})
		}
	}
	return s, events
}

// onSnapshot evaluates a snapshot of the running cgroup.Monitor.
func (m *Monitor) onSnapshot(cs cgroup.Snapshot) {
	s, events := m.evaluate(cs)
	if m.cfg.OnEvaluate != nil {
		m.cfg.OnEvaluate(s)
	}
	for _, e := range events {
		m.emit(e)
	}
}

// Run evaluates every Interval and on every pressure event, passing each
// event to emit, until ctx is done. It returns ctx's error, or the first
// watcher error. All goroutines it starts have ended when it returns; emit
// is called from Run's goroutine only. Run is called at most once at a
// time.
func (m *Monitor) Run(ctx context.Context, emit func(Event)) error {
	m.emit = emit
	return m.read.Run(ctx, func(e cgroup.PressureEvent) {
		emit(Event{Kind: EventPressure, Time: e.Time, Pressure: &e})
	})
}
