package testutil

import (
	"testing"
	"time"
)

// Poll intervals of Eventually: short at first, for states that come at
// once on an idle machine, longer later, so that a slow state does not have
// the wait compete with it for the CPU.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// Cleanup margin of Eventually: the part of the time left before go test's
// -timeout that is kept for the test's failure report and its cleanups
// (containers removed, namespaces left), within these bounds.
const (
	minMargin = time.Second
	maxMargin = 30 * time.Second
)

// Eventually waits for a state that becomes true asynchronously (a process
// started, a container restored, a file written by another process): it
// calls cond until it returns nil, and fails tb with what and cond's last
// error when go test's -timeout is near, so that a state that never comes
// is reported with what was last seen, not as a panic of the test binary
// that skips the cleanups. cond's error says why the state is not reached
// yet. Without a -timeout (-timeout 0, or a benchmark) it waits as long as
// it takes. It must be called from the test's goroutine.
func Eventually(tb testing.TB, what string, cond func() error) {
	tb.Helper()
	var (
		deadline    time.Time
		hasDeadline bool
	)
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		deadline, hasDeadline = d.Deadline()
	}
	if hasDeadline {
		margin := min(max(time.Until(deadline)/10, minMargin), maxMargin)
		deadline = deadline.Add(-margin)
	}
	start := time.Now()
	for interval, polls := firstPoll, 1; ; polls++ {
		err := cond()
		if err == nil {
			return
		}
		if hasDeadline && !time.Now().Add(interval).Before(deadline) {
			tb.Fatalf("%s: not reached after %s (%d polls, near go test's -timeout): %v",
				what, time.Since(start).Round(time.Millisecond), polls, err)
		}
		time.Sleep(interval)
		interval = min(interval*2, maxPoll)
	}
}
