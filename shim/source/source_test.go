package source

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.DiscardHandler)

// sourceState returns the state of the source called name in m.
func sourceState(m *status.Model, name string) status.SourceState {
	for _, s := range m.Snapshot().Shim.Sources {
		if s.Name == name {
			return s
		}
	}
	return status.SourceState{}
}

// waitState polls until the source called name is in state; go test's
// -timeout bounds it.
func waitState(t *testing.T, m *status.Model, name, state string) status.SourceState {
	t.Helper()
	for {
		if s := sourceState(m, name); s.State == state {
			return s
		}
		time.Sleep(time.Millisecond)
	}
}

// blocking is a source that runs until its context ends and counts its
// starts and stops.
type blocking struct {
	name          string
	starts, stops atomic.Int32
	setting       string
}

func (b *blocking) Name() string { return b.name }

func (b *blocking) Run(ctx context.Context, m *status.Model) error {
	b.starts.Add(1)
	m.Set(condition.Condition{Type: "Blocking", Status: condition.True, Reason: "Running", Message: b.setting})
	<-ctx.Done()
	b.stops.Add(1)
	return nil
}

func TestSupervisorStates(t *testing.T) {
	m := status.New(nil)
	s := New(context.Background(), m, discard)
	defer s.StopAll()
	tests := []struct {
		src       Source
		state     string
		errSubstr string
	}{
		{Func{SourceName: "panics", F: func(context.Context, *status.Model) error { panic("index out of range") }}, status.SourceFailed, "panic: index out of range"},
		{Func{SourceName: "fails", F: func(context.Context, *status.Model) error { return errors.New("read /sys/x: no such file") }}, status.SourceFailed, "no such file"},
		{Func{SourceName: "finishes", F: func(context.Context, *status.Model) error { return nil }}, status.SourceDone, ""},
		{&blocking{name: "runs"}, status.SourceRunning, ""},
	}
	for _, tt := range tests {
		s.Start(tt.src)
	}
	for _, tt := range tests {
		st := waitState(t, m, tt.src.Name(), tt.state)
		if !strings.Contains(st.Error, tt.errSubstr) {
			t.Errorf("%s: error %q, want %q", tt.src.Name(), st.Error, tt.errSubstr)
		}
	}
	var healthy condition.Condition
	for _, c := range m.Snapshot().Conditions {
		if c.Type == status.TypeShimHealthy {
			healthy = c
		}
	}
	if healthy.Status != condition.False || !strings.Contains(healthy.Message, "source panics failed") ||
		!strings.Contains(healthy.Message, "source fails failed") || strings.Contains(healthy.Message, "goroutine") {
		t.Errorf("ShimHealthy = %+v", healthy)
	}
}

// TestSupervisorReplace: starting a source under a running one's name stops
// the old one first, so that exactly one runs, with the new settings; a
// replaced source's return is not a failure.
func TestSupervisorReplace(t *testing.T) {
	m := status.New(nil)
	s := New(context.Background(), m, discard)
	first := &blocking{name: "network", setting: "cniConfDir /etc/cni/net.d"}
	s.Start(first)
	for first.starts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := &blocking{name: "network", setting: "cniConfDir /opt/cni"}
	s.Start(second)
	if first.stops.Load() != 1 {
		t.Errorf("the replaced source was not stopped before its successor started")
	}
	for second.starts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if st := sourceState(m, "network"); st.State != status.SourceRunning {
		t.Errorf("network after replacement = %+v", st)
	}
	if n := len(m.Snapshot().Shim.Sources); n != 1 {
		t.Errorf("%d sources listed after a replacement, want 1", n)
	}
	s.StopAll()
	if second.stops.Load() != 1 {
		t.Error("StopAll did not stop the running source")
	}
	third := &blocking{name: "late"}
	s.Start(third)
	if third.starts.Load() != 0 {
		t.Error("a source started after StopAll ran")
	}
}

// followed is a Watcher that changes when told to.
type followed struct {
	changes chan struct{}
	ch      atomic.Pointer[chan struct{}]
	status  atomic.Value
}

func (f *followed) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.changes:
			old := f.ch.Swap(ptr(make(chan struct{})))
			close(*old)
		}
	}
}

func (f *followed) Changed() <-chan struct{} { return *f.ch.Load() }

func ptr[T any](v T) *T { return &v }

func TestFollow(t *testing.T) {
	f := &followed{changes: make(chan struct{})}
	f.ch.Store(ptr(make(chan struct{})))
	f.status.Store(condition.False)
	m := status.New(nil)
	s := New(context.Background(), m, discard)
	defer s.StopAll()
	s.Start(Follow("thing", f, func() []condition.Condition {
		return []condition.Condition{{Type: "ThingReady", Status: f.status.Load().(metav1.ConditionStatus), Reason: "R"}}
	}))
	wait := func(want metav1.ConditionStatus) {
		t.Helper()
		for {
			for _, c := range m.Snapshot().Conditions {
				if c.Type == "ThingReady" && c.Status == want {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait(condition.False)
	f.status.Store(condition.True)
	f.changes <- struct{}{}
	wait(condition.True)
}
