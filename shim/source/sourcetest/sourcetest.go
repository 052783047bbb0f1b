// Package sourcetest runs a source of the status model in a test and waits
// for what it records.
package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/source"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Run runs src against m on its own goroutine until the test's cleanup,
// which cancels it and waits for it to return; an error it returns fails
// the test.
func Run(t testing.TB, m *status.Model, src source.Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, m) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source %s returned %v", src.Name(), err)
		}
	})
}

// WaitFor polls m until ok holds of its document and returns that
// document; go test's -timeout bounds the wait.
func WaitFor(t testing.TB, m *status.Model, ok func(status.Document) bool) status.Document {
	t.Helper()
	for {
		if d := m.Snapshot(); ok(d) {
			return d
		}
		time.Sleep(5 * time.Millisecond)
	}
}
