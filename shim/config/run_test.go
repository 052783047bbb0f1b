package config

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// waitStatus blocks until cond holds for the controller's status. It has no
// deadline of its own: go test's -timeout bounds it.
func waitStatus(c *Controller, cond func(NodeConfigStatus) bool) NodeConfigStatus {
	for {
		ch := c.Changed()
		if s := c.Status(); cond(s) {
			return s
		}
		<-ch
	}
}

// waitTimers blocks until the fake clock has n timers waiting.
func waitTimers(clk *clocktesting.FakeClock, n int) {
	for clk.Waiters() < n {
		time.Sleep(time.Millisecond)
	}
}

func TestRunFollowsSource(t *testing.T) {
	dir := t.TempDir()
	source := filepath.Join(dir, "source")
	clk := clocktesting.NewFakeClock(t0)
	c, err := Open(Options{StateDir: filepath.Join(dir, "state"), SourceDir: source, Clock: clk, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = c.Run(ctx) }()
	defer func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	}()

	a := map[string]string{BaseFile: goodConfig(1)}
	uidA := uidOf(t, a)
	writeSource(t, source, a)
	waitStatus(c, func(s NodeConfigStatus) bool { return s.Active != nil && s.Active.UID == uidA })

	// The soak timer fires on the fake clock.
	waitTimers(clk, 1)
	clk.Step(DefaultSoakPeriod)
	waitStatus(c, func(s NodeConfigStatus) bool { return s.LastKnownGood != nil && s.LastKnownGood.UID == uidA })

	b := map[string]string{BaseFile: badUnknownField}
	uidB := uidOf(t, b)
	writeSource(t, source, b)
	st := waitStatus(c, func(s NodeConfigStatus) bool { return s.Assigned != nil && s.Assigned.UID == uidB })
	if st.Active == nil || st.Active.UID != uidA || st.Error == "" {
		t.Errorf("bad config: %+v, want rolled back to A with an error", st)
	}

	// An unreadable source is retried with backoff on the clock.
	writeSource(t, source, map[string]string{BaseFile: "symlink:/nonexistent"})
	waitStatus(c, func(s NodeConfigStatus) bool {
		return s.Error != "" && s.Assigned != nil && s.Assigned.UID == uidB && s.Active.UID == uidA && strings.Contains(s.Error, "read config source")
	})
	// Every change event of the swap may have failed a Sync already and
	// doubled the delay, so step by the cap; nextBackoff is tested alone.
	for i := 0; i < 3; i++ {
		waitTimers(clk, 1)
		ch := c.Changed()
		clk.Step(RetryMax)
		<-ch // a retry happened
		if s := c.Status(); s.Active == nil || s.Active.UID != uidA {
			t.Fatalf("retry rolled something back: %+v", s)
		}
	}

	c3 := map[string]string{BaseFile: goodConfig(3)}
	uidC := uidOf(t, c3)
	writeSource(t, source, c3)
	st = waitStatus(c, func(s NodeConfigStatus) bool { return s.Active != nil && s.Active.UID == uidC && s.Error == "" })
	if st.LastKnownGood == nil || st.LastKnownGood.UID != uidA {
		t.Errorf("good again: %+v, want last-known-good A", st)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Options{StateDir: filepath.Join(dir, "state"), Logger: quietLogger(), Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

func TestNextBackoff(t *testing.T) {
	d := RetryInitial
	var got []time.Duration
	for i := 0; i < 12; i++ {
		got = append(got, d)
		d = nextBackoff(d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff sequence %v, want %v seconds", got, want)
		}
	}
}
