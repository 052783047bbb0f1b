package config

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Backoff bounds of Run's retries after a RetryableError.
const (
	RetryInitial = time.Second
	RetryMax     = 5 * time.Minute
)

// Run syncs the source whenever it changes (fsnotify on the source
// directory and its parent, which sees a ConfigMap volume's atomic ..data
// swap and the directory appearing or going away), retries retryable errors
// with exponential backoff on the controller's clock, and syncs again when
// the soak period of the assigned payload ends. It returns when ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config source: %w", err)
	}
	defer w.Close()
	c.watchSource(w)

	backoff := RetryInitial
	for {
		err := c.Sync()
		var retry, soak <-chan time.Time
		var timers []clock.Timer
		var re *RetryableError
		if errors.As(err, &re) {
			t := c.clock.NewTimer(backoff)
			timers = append(timers, t)
			retry = t.C()
			backoff = nextBackoff(backoff)
		} else {
			backoff = RetryInitial
		}
		if deadline, ok := c.NextSoakDeadline(); ok {
			d := deadline.Sub(c.clock.Now())
			if d <= 0 {
				stopAll(timers)
				continue // the clock moved past the deadline during Sync
			}
			t := c.clock.NewTimer(d)
			timers = append(timers, t)
			soak = t.C()
		}
		more := c.wait(ctx, w, retry, soak)
		stopAll(timers)
		if !more {
			return nil
		}
	}
}

func stopAll(ts []clock.Timer) {
	for _, t := range ts {
		t.Stop()
	}
}

// wait blocks until something calls for another Sync; false means ctx is done.
func (c *Controller) wait(ctx context.Context, w *fsnotify.Watcher, retry, soak <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-retry:
			return true
		case <-soak:
			return true
		case ev, ok := <-w.Events:
			if !ok {
				return false
			}
			if c.opts.SourceDir != "" && ev.Name != c.opts.SourceDir && filepath.Dir(ev.Name) != c.opts.SourceDir {
				continue // a sibling of the source in its parent
			}
			c.watchSource(w)
			return true
		case err, ok := <-w.Errors:
			if !ok {
				return false
			}
			// An overflow loses events: sync to catch up.
			c.log.Warn("config source watch", "err", err)
			return true
		}
	}
}

// watchSource (re)adds the watches; the source may not exist yet.
func (c *Controller) watchSource(w *fsnotify.Watcher) {
	if c.opts.SourceDir == "" {
		return
	}
	_ = w.Add(filepath.Dir(c.opts.SourceDir))
	_ = w.Add(c.opts.SourceDir)
}

// nextBackoff doubles d up to RetryMax.
func nextBackoff(d time.Duration) time.Duration {
	return min(2*d, RetryMax)
}
