package podcheckpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/client"
)

// API is what the handler asks of the API server (kubeapi.Client).
type API interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	ListPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodCheckpointList, error)
	WatchPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	UpdatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error)
	UpdatePodCheckpointStatus(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error)
}

// Shim is what the handler asks of its node's shim (shim/client.Client).
type Shim interface {
	// CheckpointPodWith checkpoints every container of a pod at one
	// instant and returns the pod checkpoint's path on the node; a lazy
	// one's once it is published, the pod frozen while its memory is
	// served.
	CheckpointPodWith(ctx context.Context, namespace, pod string, o client.PodCheckpointOptions) (string, error)
	// RemoveCheckpoint removes the checkpoint named name (a base name in
	// the node's checkpoint directory); one already gone is no error.
	RemoveCheckpoint(ctx context.Context, name string) error
}

// FieldManager is the field manager of the handler's writes.
const FieldManager = "nodeshim-reporter"

// Reasons of the conditions the handler sets.
const (
	ReasonClaimed     = "Claimed"
	ReasonCheckpoint  = "Checkpointing"
	ReasonStored      = "Stored"
	ReasonFailed      = "CheckpointFailed"
	ReasonInterrupted = "Interrupted"
)

// Options configure a Handler.
type Options struct {
	// NodeName is this node: the handler claims the objects whose pod's
	// spec.nodeName is this.
	NodeName string
	API      API
	Shim     Shim
	// Logger receives what the handler does; nil discards it.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Retry is the wait before a failed list or watch is tried again;
	// zero means a second.
	Retry time.Duration
}

// Handler watches PodCheckpoints and handles those of its node's pods.
type Handler struct {
	o Options

	mu      sync.Mutex
	queue   []string // namespace/name, each at most once
	objects map[string]*v1alpha1.PodCheckpoint
	wake    chan struct{}
	// claimed holds the objects this handler claimed: one of them found
	// Accepted is its own, finished or being written, never an
	// interrupted one.
	claimed map[string]bool
	// outcomes holds the outcomes of checkpoints whose status write
	// failed (a conflict with another write, the API server away): the
	// object's next version gets it.
	outcomes map[string]outcome
}

// outcome is what became of a checkpoint on the node.
type outcome struct {
	location, reason string
	cause            error
	// lazy: the pod checkpoint's memory is served from the node.
	lazy bool
}

// New returns a Handler; it does nothing until Run.
func New(o Options) (*Handler, error) {
	if o.NodeName == "" || o.API == nil || o.Shim == nil {
		return nil, errors.New("podcheckpoint: NodeName, API and Shim are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	return &Handler{o: o, objects: map[string]*v1alpha1.PodCheckpoint{}, claimed: map[string]bool{}, outcomes: map[string]outcome{}, wake: make(chan struct{}, 1)}, nil
}

// Run lists and watches the PodCheckpoints and handles them, one at a
// time, until ctx ends.
func (h *Handler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.work(ctx)
	}()
	defer wg.Wait()
	for {
		rv, err := h.list(ctx)
		if err == nil {
			err = h.watch(ctx, rv)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.o.Logger.Warn("PodCheckpoint list or watch ended; listing again", "err", err, "after", h.o.Retry)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.o.Retry):
		}
	}
}

func key(pc *v1alpha1.PodCheckpoint) string { return pc.Namespace + "/" + pc.Name }

// list reads every object, queues each, and returns the list's
// resourceVersion to watch from.
func (h *Handler) list(ctx context.Context) (string, error) {
	l, err := h.o.API.ListPodCheckpoints(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list PodCheckpoints: %w", err)
	}
	for i := range l.Items {
		h.enqueue(&l.Items[i])
	}
	return l.ResourceVersion, nil
}

// watch queues every object that changes until the watch ends.
func (h *Handler) watch(ctx context.Context, rv string) error {
	w, err := h.o.API.WatchPodCheckpoints(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return fmt.Errorf("watch PodCheckpoints: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch of PodCheckpoints closed")
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if pc, ok := ev.Object.(*v1alpha1.PodCheckpoint); ok {
					h.enqueue(pc)
				}
			case watch.Deleted:
				if pc, ok := ev.Object.(*v1alpha1.PodCheckpoint); ok {
					h.mu.Lock()
					delete(h.objects, key(pc))
					h.mu.Unlock()
				}
			case watch.Error:
				return fmt.Errorf("watch of PodCheckpoints: %v", apierrors.FromObject(ev.Object))
			}
		}
	}
}

// enqueue records pc as the newest of its key and queues the key once.
func (h *Handler) enqueue(pc *v1alpha1.PodCheckpoint) {
	h.mu.Lock()
	k := key(pc)
	h.objects[k] = pc.DeepCopy()
	if !slices.Contains(h.queue, k) {
		h.queue = append(h.queue, k)
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// next takes the first queued object, or nil.
func (h *Handler) next() *v1alpha1.PodCheckpoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.queue) > 0 {
		k := h.queue[0]
		h.queue = h.queue[1:]
		if pc, ok := h.objects[k]; ok {
			return pc.DeepCopy()
		}
	}
	return nil
}

// work handles queued objects until ctx ends.
func (h *Handler) work(ctx context.Context) {
	for {
		for pc := h.next(); pc != nil; pc = h.next() {
			if err := h.sync(ctx, pc); err != nil && ctx.Err() == nil {
				h.o.Logger.Warn("PodCheckpoint not handled; trying again", "podcheckpoint", key(pc), "err", err)
				h.requeueLater(ctx, pc)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		}
	}
}

// requeueLater queues pc's key again after the retry wait, unless a newer
// version has come meanwhile (which is queued already).
func (h *Handler) requeueLater(ctx context.Context, pc *v1alpha1.PodCheckpoint) {
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(h.o.Retry):
			h.mu.Lock()
			cur, ok := h.objects[key(pc)]
			h.mu.Unlock()
			if ok && cur.ResourceVersion == pc.ResourceVersion {
				h.enqueue(cur)
			}
		}
	}()
}

// sync moves pc one step on.
func (h *Handler) sync(ctx context.Context, pc *v1alpha1.PodCheckpoint) error {
	mine := pc.Status.NodeName == h.o.NodeName
	if pc.DeletionTimestamp != nil {
		if mine && slices.Contains(pc.Finalizers, v1alpha1.FinalizerCheckpointFiles) {
			return h.release(ctx, pc)
		}
		return nil
	}
	switch {
	case pc.Status.NodeName != "" && !mine:
		return nil // another node's
	case pc.Status.Phase == v1alpha1.PhaseStored, pc.Status.Phase == v1alpha1.PhaseFailed:
		return nil
	case mine && pc.Status.Phase == v1alpha1.PhaseAccepted:
		// Claimed by this node before: by a reporter that stopped in the
		// middle, or by this one, whose next write is on its way.
		h.mu.Lock()
		own := h.claimed[key(pc)]
		out, unwritten := h.outcomes[key(pc)]
		h.mu.Unlock()
		switch {
		case unwritten:
			return h.finish(ctx, pc, out)
		case own:
			return nil // being checkpointed
		}
		return h.finish(ctx, pc, outcome{reason: ReasonInterrupted,
			cause: errors.New("the reporter restarted during the checkpoint; its outcome on the node is unknown (the node's retention removes what it left)")})
	}
	pod, err := h.o.API.GetPod(ctx, pc.Namespace, pc.Spec.PodName)
	if apierrors.IsNotFound(err) {
		return nil // Pending: no node can claim it
	}
	if err != nil {
		return fmt.Errorf("read pod %s/%s: %w", pc.Namespace, pc.Spec.PodName, err)
	}
	if pod.Spec.NodeName != h.o.NodeName {
		return nil
	}
	return h.checkpoint(ctx, pc, pod)
}

// conditions returns the set of pc's conditions, to update.
func conditions(pc *v1alpha1.PodCheckpoint) *condition.Set {
	var s condition.Set
	for _, c := range pc.Status.Conditions {
		s.Update(c, c.LastTransitionTime.Time)
	}
	return &s
}

// setConditions records accepted and stored (a nil one is left as it
// is) and their Ready summary in pc's status.
func (h *Handler) setConditions(pc *v1alpha1.PodCheckpoint, accepted, stored *condition.Condition) {
	now := h.o.Now()
	s := conditions(pc)
	for _, c := range []*condition.Condition{accepted, stored} {
		if c != nil {
			c.ObservedGeneration = pc.Generation
			s.Update(*c, now)
		}
	}
	s.Update(condition.Summarize(v1alpha1.ConditionReady, pc.Generation, s.List()), now)
	pc.Status.Conditions = s.List()
	pc.Status.ObservedGeneration = pc.Generation
}

// checkpoint claims pc for this node, asks the shim and records the
// outcome.
func (h *Handler) checkpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, pod *corev1.Pod) error {
	// The finalizer first: a checkpoint is never made for an object that
	// is gone before its files could be removed.
	if !slices.Contains(pc.Finalizers, v1alpha1.FinalizerCheckpointFiles) {
		pc.Finalizers = append(pc.Finalizers, v1alpha1.FinalizerCheckpointFiles)
		updated, err := h.o.API.UpdatePodCheckpoint(ctx, pc, FieldManager)
		if err != nil {
			return fmt.Errorf("set the finalizer of %s: %w", key(pc), err)
		}
		pc = updated
	}
	start := metav1.NewTime(h.o.Now())
	pc.Status.Phase = v1alpha1.PhaseAccepted
	pc.Status.NodeName = h.o.NodeName
	pc.Status.PodUID = string(pod.UID)
	pc.Status.StartTime = &start
	pc.Status.Pod = &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels, Annotations: pod.Annotations},
		Spec:       *pod.Spec.DeepCopy(),
	}
	h.setConditions(pc,
		&condition.Condition{Type: v1alpha1.ConditionAccepted, Status: condition.True, Reason: ReasonClaimed,
			Message: "node " + h.o.NodeName + " runs pod " + pod.Name + " and checkpoints it"},
		&condition.Condition{Type: v1alpha1.ConditionStored, Status: condition.False, Severity: condition.SeverityInfo,
			Reason: ReasonCheckpoint, Message: "checkpointing every container of the pod"})
	// The status write is the claim: of two writers from one version,
	// the API server takes one and refuses the other with a conflict.
	claimed, err := h.o.API.UpdatePodCheckpointStatus(ctx, pc, FieldManager)
	if err != nil {
		return fmt.Errorf("claim %s: %w", key(pc), err)
	}
	h.mu.Lock()
	h.claimed[key(pc)] = true
	h.mu.Unlock()
	h.o.Logger.Info("checkpointing pod", "podcheckpoint", key(pc), "pod", pod.Namespace+"/"+pod.Name)
	var timeout time.Duration
	if pc.Spec.Timeout != nil {
		timeout = pc.Spec.Timeout.Duration
	}
	loc, cerr := h.o.Shim.CheckpointPodWith(ctx, pod.Namespace, pod.Name, client.PodCheckpointOptions{Timeout: timeout, ImageRef: pc.Spec.Image, Lazy: pc.Spec.Lazy})
	if cerr != nil {
		return h.finish(ctx, claimed, outcome{reason: ReasonFailed, cause: cerr})
	}
	return h.finish(ctx, claimed, outcome{location: loc, reason: ReasonStored, lazy: pc.Spec.Lazy})
}

// finish records out in pc's status: Stored at its location, or Failed
// with its reason and cause. When the write fails (a conflict with
// another write, the API server away), the outcome is kept for the
// object's next version, which the watch brings.
func (h *Handler) finish(ctx context.Context, pc *v1alpha1.PodCheckpoint, out outcome) error {
	end := metav1.NewTime(h.o.Now())
	pc.Status.CompletionTime = &end
	msg := "pod checkpoint " + filepath.Base(out.location) + " on node " + h.o.NodeName
	if out.lazy {
		msg += "; the pod stays frozen there while its page servers serve its memory to the one restore that fetches it"
	}
	stored := condition.Condition{Type: v1alpha1.ConditionStored, Status: condition.True, Reason: out.reason, Message: msg}
	pc.Status.Phase = v1alpha1.PhaseStored
	pc.Status.Location = out.location
	if out.cause != nil {
		pc.Status.Phase = v1alpha1.PhaseFailed
		stored = condition.Condition{Type: v1alpha1.ConditionStored, Status: condition.False,
			Severity: condition.SeverityError, Reason: out.reason, Message: out.cause.Error()}
	}
	h.setConditions(pc, nil, &stored)
	_, err := h.o.API.UpdatePodCheckpointStatus(ctx, pc, FieldManager)
	h.mu.Lock()
	if err == nil || apierrors.IsNotFound(err) {
		delete(h.outcomes, key(pc))
	} else {
		h.outcomes[key(pc)] = out
	}
	h.mu.Unlock()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("record the outcome of %s: %w", key(pc), err)
	}
	h.o.Logger.Info("pod checkpoint done", "podcheckpoint", key(pc), "phase", pc.Status.Phase, "location", out.location, "err", out.cause)
	return nil
}

// release removes the checkpoint of a deleted object from the node, then
// its finalizer, which lets the API server delete it.
func (h *Handler) release(ctx context.Context, pc *v1alpha1.PodCheckpoint) error {
	if pc.Status.Location != "" {
		if err := h.o.Shim.RemoveCheckpoint(ctx, filepath.Base(pc.Status.Location)); err != nil {
			return fmt.Errorf("remove the checkpoint of %s from node %s: %w", key(pc), h.o.NodeName, err)
		}
	}
	pc.Finalizers = slices.DeleteFunc(pc.Finalizers, func(f string) bool { return f == v1alpha1.FinalizerCheckpointFiles })
	if _, err := h.o.API.UpdatePodCheckpoint(ctx, pc, FieldManager); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the finalizer of %s: %w", key(pc), err)
	}
	h.o.Logger.Info("pod checkpoint removed", "podcheckpoint", key(pc), "location", pc.Status.Location)
	return nil
}
