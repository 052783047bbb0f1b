package sourcetest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/source"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunAndWaitFor(t *testing.T) {
	m := status.New(clocktesting.NewFakeClock(time.Unix(0, 0)))
	stopped := make(chan struct{})
	t.Cleanup(func() {
		// Cleanups run last-registered first: this one, registered before
		// Run's, checks that Run's stopped the source.
		select {
		case <-stopped:
		default:
			t.Error("source still running after Run's cleanup")
		}
	})
	Run(t, m, source.Func{SourceName: "test", F: func(ctx context.Context, m *status.Model) error {
		m.Set(condition.Condition{Type: "TestReady", Status: condition.True, Reason: "Running"})
		<-ctx.Done()
		close(stopped)
		return nil
	}})
	d := WaitFor(t, m, func(d status.Document) bool { _, ok := d.Condition("TestReady"); return ok })
	if c, _ := d.Condition("TestReady"); c.Status != condition.True {
		t.Errorf("TestReady = %+v", c)
	}
}
