package daemon

import (
	"context"
	"testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestWhenSettled(t *testing.T) {
	notStarted := func(typ string) condition.Condition {
		return condition.Condition{Type: typ, Status: condition.Unknown, Reason: condition.ReasonNotStarted}
	}
	m := status.New(nil)
	m.Set(notStarted("PressureMonitorReady"), notStarted("OOMWatcherReady"))
	called := make(chan struct{}, 2)
	done := make(chan struct{})
	go func() {
		whenSettled(context.Background(), m, func() { called <- struct{}{} })
		close(done)
	}()

	// One source reporting is not enough.
	m.Set(condition.Condition{Type: "PressureMonitorReady", Status: condition.True, Reason: "Monitoring"})
	m.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Reason: "NoCNIConfig"})
	select {
	case <-called:
		t.Fatal("settled while OOMWatcherReady is NotStarted")
	default:
	}
	m.Set(condition.Condition{Type: "OOMWatcherReady", Status: condition.False, Reason: "AttachFailed"})
	<-done
	if len(called) != 1 {
		t.Fatalf("settled called %d times, want 1", len(called))
	}
}

func TestWhenSettledStopsWithContext(t *testing.T) {
	m := status.New(nil)
	m.Set(condition.Condition{Type: "OOMWatcherReady", Status: condition.Unknown, Reason: condition.ReasonNotStarted})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		whenSettled(ctx, m, func() { t.Error("settled called after the context ended") })
		close(done)
	}()
	cancel()
	<-done
}
