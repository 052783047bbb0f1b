package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DefaultInterval is how often a Monitor re-evaluates without a pressure
// event; PSI events make it evaluate at once.
const DefaultInterval = time.Second

// MonitorConfig configures a Monitor. Zero fields take their defaults.
type MonitorConfig struct {
	Sources NodeSources
	// Thresholds default to DefaultHardThresholds.
	Thresholds       []Threshold
	TransitionPeriod time.Duration
	PSIThresholds    PSIThresholds
	Interval         time.Duration
	Trigger          Trigger
	Watch            WatchOptions
	// WatchPaths are the pressure files armed with Trigger. Empty means the
	// node's memory.pressure (the cgroup2 root's) and kubepods' when present.
	WatchPaths []string
	Clock      Clock
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
	Kind      EventKind
	Time      time.Time
	Condition *Transition
	PSIView   *PSITransition
	Pressure  *PressureEvent
}

// Snapshot is the outcome of one evaluation.
type Snapshot struct {
	Time         time.Time
	Observations Observations
	Conditions   []corev1.NodeCondition
	PSIViews     []PSIView
	// Pressure holds the node's PSI for every resource, CPU included: CPU
	// pressure is a metric, not a condition.
	Pressure [len(Resources)]Pressure
}

// WatcherStatus says how one pressure file is watched.
type WatcherStatus struct {
	Path string
	Mode WatchMode
	// Trigger is the trigger armed in trigger mode, as written to the file.
	Trigger        string
	FallbackReason string
}

// Monitor evaluates the node's signals periodically and whenever a PSI
// trigger (or its polling fallback) fires, and reports transitions.
type Monitor struct {
	cfg      MonitorConfig
	eval     *Evaluator
	psi      *PSIEvaluator
	watchers []*Watcher
	mu       sync.Mutex // guards reader, eval, psi: Evaluate may be called while Run runs
	reader   *Reader
}

// NewMonitor arms the watchers and returns a Monitor. Close releases them.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	if cfg.Thresholds == nil {
		cfg.Thresholds = MustDefaultThresholds()
	}
	if cfg.PSIThresholds == (PSIThresholds{}) {
		cfg.PSIThresholds = DefaultPSIThresholds
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Trigger == (Trigger{}) {
		cfg.Trigger = DefaultTrigger
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	paths := cfg.WatchPaths
	if len(paths) == 0 {
		paths = append(paths, filepath.Join(cfg.Sources.CgroupRoot, Memory.PressureFile()))
		if cfg.Sources.Kubepods != "" {
			paths = append(paths, filepath.Join(cfg.Sources.Kubepods, Memory.PressureFile()))
		}
	}
	m := &Monitor{
		cfg:    cfg,
		eval:   NewEvaluator(cfg.Thresholds, cfg.TransitionPeriod, cfg.Clock),
		psi:    NewPSIEvaluator(cfg.PSIThresholds, cfg.Clock),
		reader: NewReader(),
	}
	for _, p := range paths {
		w, err := NewWatcher(p, cfg.Trigger, cfg.Watch)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.watchers = append(m.watchers, w)
	}
	return m, nil
}

// Watchers reports how each pressure file is watched.
func (m *Monitor) Watchers() []WatcherStatus {
	out := make([]WatcherStatus, len(m.watchers))
	for i, w := range m.watchers {
		out[i] = WatcherStatus{Path: w.Path(), Mode: w.Mode()}
		if w.Mode() == ModeTrigger {
			out[i].Trigger = w.Armed().String()
		}
		if r := w.FallbackReason(); r != nil {
			out[i].FallbackReason = r.Error()
		}
	}
	return out
}

// Close releases the watchers' triggers. Run must have returned.
func (m *Monitor) Close() error {
	var errs []error
	for _, w := range m.watchers {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// Evaluate observes the node once and returns the snapshot and the
// transitions it caused.
func (m *Monitor) Evaluate() (Snapshot, []Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	s := Snapshot{Time: now, Observations: Observe(m.cfg.Sources, m.reader)}
	var events []Event
	var conds []Transition
	s.Conditions, conds = m.eval.Update(s.Observations)
	for i := range conds {
		events = append(events, Event{Kind: EventCondition, Time: now, Condition: &conds[i]})
	}
	var st Stats
	if err := m.reader.Read(m.cfg.Sources.CgroupRoot, StatPressure, &st); err != nil {
		for i := range st.Pressure {
			st.Pressure[i] = Pressure{Err: err}
		}
	}
	s.Pressure = st.Pressure
	for _, r := range PSIViewResources {
		v, tr := m.psi.Update(r, st.PressureOf(r))
		s.PSIViews = append(s.PSIViews, v)
		if tr != nil {
			events = append(events, Event{Kind: EventPSIView, Time: now, PSIView: tr})
		}
	}
	return s, events
}

// Run evaluates every Interval and on every pressure event, passing each
// event to emit, until ctx is done. It returns ctx's error, or the first
// watcher error. All goroutines it starts have ended when it returns; emit
// is called from Run's goroutine only.
func (m *Monitor) Run(ctx context.Context, emit func(Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pressure := make(chan PressureEvent, 16)
	errc := make(chan error, len(m.watchers))
	var wg sync.WaitGroup
	for _, w := range m.watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.Run(ctx, m.cfg.Clock, func(ev PressureEvent) {
				select {
				case pressure <- ev:
				case <-ctx.Done():
				}
			})
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				errc <- fmt.Errorf("watch %s: %w", w.Path(), err)
			}
		}()
	}
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	evaluate := func() {
		snap, evs := m.Evaluate()
		if m.cfg.OnEvaluate != nil {
			m.cfg.OnEvaluate(snap)
		}
		for _, e := range evs {
			emit(e)
		}
	}
	evaluate()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-tick.C:
			evaluate()
		case ev := <-pressure:
			emit(Event{Kind: EventPressure, Time: ev.Time, Pressure: &ev})
			evaluate()
		}
	}
}
