package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cluster/reporter"
)

// TestShimLongPoll: Shim answers a long poll at a change or at the end of
// the wait, and PollingShim is not a long poller.
func TestShimLongPoll(t *testing.T) {
	rep, err := LoadReport("../../kernel/testdata/golden/debian-6.1.json")
	if err != nil {
		t.Fatal(err)
	}
	s := NewShim(rep)
	first, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.StatusAfter(context.Background(), first.Generation, time.Millisecond); err != nil || got.Generation != first.Generation {
		t.Errorf("StatusAfter with no change = generation %d, %v; want %d", got.Generation, err, first.Generation)
	}
	done := make(chan reporter.Snapshot, 1)
	go func() {
		got, _ := s.StatusAfter(context.Background(), first.Generation, time.Hour)
		done <- got
	}()
	s.SetFlap(false)
	if got := <-done; got.Generation == first.Generation {
		t.Errorf("StatusAfter after a change = generation %d, want a newer one", got.Generation)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.StatusAfter(ctx, s.Model.Snapshot().Generation, time.Hour); err == nil {
		t.Error("StatusAfter with an ended context returned no error")
	}
	var shim reporter.Shim = PollingShim{s}
	if _, ok := shim.(reporter.LongPoller); ok {
		t.Error("PollingShim is a long poller")
	}
}
