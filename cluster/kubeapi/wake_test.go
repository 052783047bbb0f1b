package kubeapi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWake: each event of the watch wakes the loop (a pending wake stands
// for many), a watch that cannot be opened or ends is reported and opened
// again after the retry, and ctx's end stops it.
func TestWake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		opened  int
		watches = make(chan *watch.FakeWatcher, 4)
		errs    []error
	)
	open := func(context.Context) (watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		opened++
		if opened == 1 {
			return nil, errors.New("forbidden")
		}
		w := watch.NewFake()
		watches <- w
		return w, nil
	}
	kick := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Wake(ctx, "PodMigrations", open, kick, time.Millisecond, func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}()
	w := <-watches // the second opening, after the refused first
	for range 3 {
		w.Add(&metav1.Status{})
	}
	select {
	case <-kick:
	case <-time.After(time.Minute):
		t.Fatal("no wake after three events")
	}
	w.Stop() // the watch ends: opened again
	w = <-watches
	w.Modify(&metav1.Status{})
	select {
	case <-kick:
	case <-time.After(time.Minute):
		t.Fatal("no wake from the watch opened again")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Wake did not end with its context")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) < 2 || errs[0].Error() != "watch PodMigrations: forbidden" || errs[1].Error() != "watch of PodMigrations closed" {
		t.Errorf("errors %v, want the refusal then the closed watch", errs)
	}
}
