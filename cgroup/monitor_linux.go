package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// DefaultInterval is how often a Monitor re-evaluates without a pressure
// event; PSI events make it evaluate at once.
const DefaultInterval = time.Second

// MonitorConfig configures a Monitor. Zero fields take their defaults.
type MonitorConfig struct {
	Sources  NodeSources
	Interval time.Duration
	Trigger  Trigger
	Watch    WatchOptions
	// WatchPaths are the pressure files armed with Trigger. Empty means the
	// node's memory.pressure (the cgroup2 root's) and kubepods' when present.
	WatchPaths []string
	Clock      Clock
	// OnEvaluate, when set, is called by Run after every evaluation with
	// its snapshot, from Run's goroutine: a policy (package eviction)
	// turns it into conditions, a status model shows its live values.
	OnEvaluate func(Snapshot)
}

// Snapshot is what one evaluation read of the node: the amounts it has
// available and its PSI, at Time.
type Snapshot struct {
	Time      time.Time
	Available Available
	// Pressure holds the node's PSI for every resource, CPU included.
	Pressure [len(Resources)]Pressure
}

// PressureOf returns the node's PSI for r.
func (s *Snapshot) PressureOf(r Resource) Pressure {
	st := Stats{Pressure: s.Pressure}
	return st.PressureOf(r)
}

// WatcherStatus says how one pressure file is watched.
type WatcherStatus struct {
	Path string
	Mode WatchMode
	// Trigger is the trigger armed in trigger mode, as written to the file.
	Trigger        string
	FallbackReason string
}

// Monitor reads the node's available amounts and PSI periodically and
// whenever a PSI trigger (or its polling fallback) fires, so that a policy
// sees pressure as it happens instead of on a 10 s loop.
type Monitor struct {
	cfg      MonitorConfig
	watchers []*Watcher
	mu       sync.Mutex // guards reader: Evaluate may be called while Run runs
	reader   *Reader
}

// NewMonitor arms the watchers and returns a Monitor. Close releases them.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
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

// Evaluate reads the node once.
func (m *Monitor) Evaluate() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Time: m.cfg.Clock.Now(), Available: ReadAvailable(m.cfg.Sources, m.reader)}
	var st Stats
	if err := m.reader.Read(m.cfg.Sources.CgroupRoot, StatPressure, &st); err != nil {
		for i := range st.Pressure {
			st.Pressure[i] = Pressure{Err: err}
		}
	}
	s.Pressure = st.Pressure
	return s
}

// Run evaluates every Interval and on every pressure event, passing each
// pressure event to emit before the evaluation it causes, until ctx is
// done. It returns ctx's error, or the first watcher error. All goroutines
// it starts have ended when it returns; emit and OnEvaluate are called from
// Run's goroutine only.
func (m *Monitor) Run(ctx context.Context, emit func(PressureEvent)) error {
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
		snap := m.Evaluate()
		if m.cfg.OnEvaluate != nil {
			m.cfg.OnEvaluate(snap)
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
			if emit != nil {
				emit(ev)
			}
			evaluate()
		}
	}
}
