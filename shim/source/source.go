// Package source defines what a source of the status model is, and the
// Supervisor that runs the daemon's sources: each on its own goroutine,
// guarded against panics, its state (Running, Done, Failed) recorded in the
// model's ShimHealthy, and replaceable while the daemon runs when the part
// of the configuration it reads changes.
//
// The shape is node-problem-detector's: a source observes one facility and
// writes what it sees into the status model; it never reads another
// source's output, and the API and the reporter read only the model.
package source

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Source observes one facility and records it in the status model until
// its context is done.
type Source interface {
	// Name identifies the source in the status document and the logs.
	Name() string
	// Run records the facility's state in m until ctx is done. It returns
	// nil when ctx ends, or when the source has nothing more to watch (its
	// conditions then say why); an error marks the source Failed.
	Run(ctx context.Context, m *status.Model) error
}

// Func is a Source made of a name and a function.
type Func struct {
	// SourceName is returned by Name.
	SourceName string
	// F is called by Run.
	F func(ctx context.Context, m *status.Model) error
}

// Name returns f.SourceName.
func (f Func) Name() string { return f.SourceName }

// Run calls f.F.
func (f Func) Run(ctx context.Context, m *status.Model) error { return f.F(ctx, m) }

// Watcher is a facility that runs on its own and announces changes of its
// conditions: the network monitor and the plugin registry watcher.
type Watcher interface {
	// Run watches until ctx is done.
	Run(ctx context.Context) error
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
}

// Follow makes a Source of a Watcher: it runs w and copies conds() into the
// model now and after every change w announces.
func Follow(name string, w Watcher, conds func() []condition.Condition) Source {
	return Func{SourceName: name, F: func(ctx context.Context, m *status.Model) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.Follow(ctx, w.Changed, conds)
		}()
		err := w.Run(ctx)
		cancel()
		<-done
		return err
	}}
}

// Supervisor runs sources against one model.
type Supervisor struct {
	model *status.Model
	log   *slog.Logger

	// ops serialises Start, Stop and StopAll; mu guards the fields below.
	ops     sync.Mutex
	mu      sync.Mutex
	ctx     context.Context
	running map[string]*running
	order   []string
	stopped bool
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Supervisor whose sources run under ctx and report to m.
func New(ctx context.Context, m *status.Model, log *slog.Logger) *Supervisor {
	if log == nil {
		log = slog.Default()
	}
	return &Supervisor{model: m, log: log, ctx: ctx, running: map[string]*running{}}
}

// Start runs src. A source of the same name that is running is stopped
// first (and waited for), so Start also replaces a source whose settings
// changed. After Stop, Start does nothing.
func (s *Supervisor) Start(src Source) {
	s.ops.Lock()
	defer s.ops.Unlock()
	name := src.Name()
	s.stop(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	if _, known := s.running[name]; !known {
		s.order = append(s.order, name)
	}
	s.running[name] = r
	s.model.SetSource(name, status.SourceRunning, "")
	go func() {
		defer close(r.done)
		err := guard(ctx, s.log, src, s.model)
		switch {
		case ctx.Err() != nil:
			// stopped or replaced: its successor reports from now on
		case err != nil:
			s.log.Error("source failed", "source", name, "err", err)
			s.model.SetSource(name, status.SourceFailed, err.Error())
		default:
			s.model.SetSource(name, status.SourceDone, "")
		}
	}()
}

// Stop stops the source called name, if it runs, and waits for it.
func (s *Supervisor) Stop(name string) {
	s.ops.Lock()
	defer s.ops.Unlock()
	s.stop(name)
}

func (s *Supervisor) stop(name string) {
	s.mu.Lock()
	r := s.running[name]
	s.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// StopAll stops every source, the last started first, waits for them, and
// makes later Starts do nothing.
func (s *Supervisor) StopAll() {
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	s.stopped = true
	order := append([]string(nil), s.order...)
	s.mu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		s.stop(order[i])
	}
}

// guard runs src and turns a panic into an error, logging its stack.
func guard(ctx context.Context, log *slog.Logger, src Source, m *status.Model) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("source panicked", "source", src.Name(), "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return src.Run(ctx, m)
}
