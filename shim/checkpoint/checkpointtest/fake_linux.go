// Package checkpointtest is a fake container checkpointer for the tests of
// the checkpoint API and its client, which need the error paths of a node's
// runtime without one; the real CRI and CRIU path is tested in shim/daemon.
package checkpointtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
)

// Fake answers by container name: "app" succeeds with the archive
// ArchivePath names, "disabled" fails with checkpoint.ErrDisabled,
// "missing" with checkpoint.ErrNotFound, "no-room" with
// checkpoint.ErrNoRoom (refused before the freeze), "busy" with
// checkpoint.ErrBusy (another checkpoint of the process holds its lock),
// and any other name with CRIU's "Dumping FAILED". It records the timeouts it is given. The zero value is
// ready to use and safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	timeouts []time.Duration
	images   []string
	lazy     []bool
}

// ArchivePath is the archive Fake reports for container app of pod in ns.
func ArchivePath(ns, pod string) string {
	return "/var/lib/kubelet/checkpoints/checkpoint-" + pod + "_" + ns + "-app-2026-11-23T12:00:00Z.tar"
}

// Checkpoint answers by ref.Container and records timeout.
func (f *Fake) Checkpoint(_ context.Context, ref criu.ContainerRef, timeout time.Duration) (criu.Result, error) {
	f.mu.Lock()
	f.timeouts = append(f.timeouts, timeout)
	f.mu.Unlock()
	switch ref.Container {
	case "app":
		return criu.Result{Path: ArchivePath(ref.Namespace, ref.Pod)}, nil
	case "disabled":
		return criu.Result{}, checkpoint.ErrDisabled
	case "missing":
		return criu.Result{}, fmt.Errorf("%s: container not found: %w", ref, checkpoint.ErrNotFound)
	case "no-room":
		return criu.Result{}, fmt.Errorf("checkpoint %s refused before freezing anything: the checkpoint does not fit in the filesystem of /var/lib/nodeshim/checkpoints: %w", ref, checkpoint.ErrNoRoom)
	case "busy":
		return criu.Result{}, fmt.Errorf("checkpoint %s: pid 4242 holds /var/lib/nodeshim/checkpoint-locks/pid-17.lock: %w", ref, checkpoint.ErrBusy)
	}
	return criu.Result{}, errors.New("criu failed: Dumping FAILED")
}

// Timeouts returns the timeouts given since the last Reset, in order.
func (f *Fake) Timeouts() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.timeouts)
}

// Reset forgets the timeouts given so far.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeouts, f.images, f.lazy = nil, nil, nil
}

// PodCheckpointPath is the pod checkpoint Fake reports for pod in ns.
func PodCheckpointPath(ns, pod string) string {
	return "/var/lib/nodeshim/checkpoints/checkpoint-" + pod + "_" + ns + "-2026-11-23T12:00:00Z"
}

// PodCheckpoint answers a pod checkpoint by pod name as Checkpoint does by
// container name: "web" succeeds with PodCheckpointPath, "missing" fails
// with checkpoint.ErrNotFound, "starting" with checkpoint.ErrPodNotRunning
// (Busy), any other with CRIU's "Dumping FAILED". It records the timeout
// and the image asked for.
func (f *Fake) PodCheckpoint(_ context.Context, ns, pod string, timeout time.Duration, imageRef string) (string, error) {
	f.mu.Lock()
	f.timeouts = append(f.timeouts, timeout)
	f.images = append(f.images, imageRef)
	f.lazy = append(f.lazy, false)
	f.mu.Unlock()
	return podAnswer(ns, pod)
}

// LazyPodCheckpoint answers a lazy pod checkpoint as PodCheckpoint
// answers an ordinary one, and records the timeout.
func (f *Fake) LazyPodCheckpoint(_ context.Context, ns, pod string, timeout time.Duration) (string, error) {
	f.mu.Lock()
	f.timeouts = append(f.timeouts, timeout)
	f.images = append(f.images, "")
	f.lazy = append(f.lazy, true)
	f.mu.Unlock()
	return podAnswer(ns, pod)
}

// Lazy returns, for each pod checkpoint asked for since the last Reset,
// whether it was lazy.
func (f *Fake) Lazy() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lazy)
}

// podAnswer is the answer of a pod checkpoint of pod in ns.
func podAnswer(ns, pod string) (string, error) {
	switch pod {
	case "web":
		return PodCheckpointPath(ns, pod), nil
	case "missing":
		return "", fmt.Errorf("pod %s/%s: no ready sandbox: %w", ns, pod, checkpoint.ErrNotFound)
	case "starting":
		return "", fmt.Errorf("pod %s/%s: container app is CREATED: %w", ns, pod, checkpoint.ErrPodNotRunning)
	}
	return "", errors.New("criu failed: Dumping FAILED")
}

// Images returns the images pod checkpoints asked for since the last
// Reset, in order.
func (f *Fake) Images() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.images)
}
