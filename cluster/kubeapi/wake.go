package kubeapi

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// DefaultWakeRetry is how long Wake waits before it opens a watch again
// that failed or ended.
const DefaultWakeRetry = 10 * time.Second

// Wake opens a watch with open and sends on kick at each of its events
// (without blocking: one pending wake stands for any number), until ctx
// ends. A watch that fails (refused, the API server away) or ends is
// opened again after retry, DefaultWakeRetry when zero, and the failure
// passed to onErr when set. It is for loops that list on a timer and look
// again as soon as something they list has changed: the timer stays their
// resync, so that a watch that cannot be opened costs only speed.
func Wake(ctx context.Context, what string, open func(context.Context) (watch.Interface, error), kick chan<- struct{}, retry time.Duration, onErr func(error)) {
	if retry <= 0 {
		retry = DefaultWakeRetry
	}
	for {
		err := wakeOnce(ctx, what, open, kick)
		if ctx.Err() != nil {
			return
		}
		if onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// wakeOnce runs one watch of Wake until it ends.
func wakeOnce(ctx context.Context, what string, open func(context.Context) (watch.Interface, error), kick chan<- struct{}) error {
	w, err := open(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", what, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch of %s closed", what)
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watch of %s: %w", what, apierrors.FromObject(ev.Object))
			}
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
}
