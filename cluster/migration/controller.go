package migration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/condition"
)

// API is what the controller asks of the API server (kubeapi.Client).
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	CreatePod(ctx context.Context, p *corev1.Pod, fieldManager string) (*corev1.Pod, error)
	DeletePod(ctx context.Context, namespace, name string, uid types.UID) error
	PatchPodAnnotations(ctx context.Context, namespace, name string, annotations map[string]*string, fieldManager string) error
	GetPodCheckpoint(ctx context.Context, namespace, name string) (*v1alpha1.PodCheckpoint, error)
	CreatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error)
	DeletePodCheckpoint(ctx context.Context, namespace, name string) error
	ListPodMigrations(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodMigrationList, error)
	WatchPodMigrations(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	WatchPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	UpdatePodMigrationStatus(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error)
}

// FieldManager is the field manager of the controller's writes.
const FieldManager = "nodeshim-controller"

// RuntimeClass is the restoring RuntimeClass (deploy/runtimeclass).
const RuntimeClass = "nodeshim"

// AnnotationDeletionCost is Kubernetes' pod-deletion-cost (ReplicaSets
// scale the pods of the lowest cost away first).
const AnnotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// Reasons of the conditions the controller sets.
const (
	ReasonPodNotFound      = "PodNotFound"
	ReasonPodNotRunning    = "PodNotRunning"
	ReasonOwnedBy          = "OwnedByController"
	ReasonTargetNotCapable = "TargetNotCapable"
	ReasonNoTarget         = "NoTarget"
	ReasonModeNotBuilt     = "ModeNotBuilt"
	ReasonKeepsOriginal    = "LazyKeepsNoOriginal"
	ReasonCheckpointing    = "Checkpointing"
	ReasonCheckpointed     = "Checkpointed"
	ReasonCheckpointFailed = "CheckpointFailed"
	ReasonTransferring     = v1alpha1.ReasonTransferring
	ReasonTransferred      = v1alpha1.ReasonTransferred
	ReasonTransferFailed   = v1alpha1.ReasonTransferFailed
	ReasonRestoring        = "Restoring"
	ReasonRestored         = "Restored"
	ReasonRestoreFailed    = "RestoreFailed"
	ReasonTimeout          = "Timeout"
)

// Options configure a Controller.
type Options struct {
	API API
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Interval is how often the PodMigrations are listed and the
	// unfinished ones taken a step further; a second when zero.
	Interval time.Duration
	// CheckpointTimeout bounds the wait for the source node to store the
	// pod checkpoint (its reporter or shim may be gone), TransferTimeout
	// the wait for the source's reporter to have it sent to the target
	// (cluster/migrationsend), RestoreTimeout the wait for the restored
	// Pod to run; DefaultStepTimeout when zero.
	CheckpointTimeout, TransferTimeout, RestoreTimeout time.Duration
}

// DefaultStepTimeout bounds a step that waits on a node.
const DefaultStepTimeout = 10 * time.Minute

// Controller takes PodMigrations step by step.
type Controller struct {
	o Options
}

// New returns a Controller for o.
func New(o Options) (*Controller, error) {
	if o.API == nil {
		return nil, errors.New("migration: no API client")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.CheckpointTimeout <= 0 {
		o.CheckpointTimeout = DefaultStepTimeout
	}
	if o.TransferTimeout <= 0 {
		o.TransferTimeout = DefaultStepTimeout
	}
	if o.RestoreTimeout <= 0 {
		o.RestoreTimeout = DefaultStepTimeout
	}
	return &Controller{o: o}, nil
}

// Run takes every unfinished PodMigration a step further each Interval,
// and at once when a PodMigration or a PodCheckpoint changes (a watch of
// each wakes it: a step that the source's reporter finished is taken up
// without waiting for the next tick), until ctx is done. It runs while
// the controller leads.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Interval)
	defer t.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for what, open := range map[string]func(context.Context) (watch.Interface, error){
		"PodMigrations": func(ctx context.Context) (watch.Interface, error) {
			return c.o.API.WatchPodMigrations(ctx, metav1.ListOptions{})
		},
		"PodCheckpoints": func(ctx context.Context) (watch.Interface, error) {
			return c.o.API.WatchPodCheckpoints(ctx, metav1.ListOptions{})
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kubeapi.Wake(wctx, what, open, kick, 0, func(err error) {
				c.o.Logger.Warn("watch ended; the controller steps on its interval until it is open again", "what", what, "err", err)
			})
		}()
	}
	for {
		if err := c.SyncAll(ctx); err != nil && ctx.Err() == nil {
			c.o.Logger.Warn("sync pod migrations", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-kick:
		}
	}
}

// SyncAll takes each unfinished PodMigration one step further.
func (c *Controller) SyncAll(ctx context.Context) error {
	l, err := c.o.API.ListPodMigrations(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pod migrations: %w", err)
	}
	var errs []error
	for i := range l.Items {
		if err := c.Sync(ctx, &l.Items[i]); err != nil {
			errs = append(errs, fmt.Errorf("pod migration %s/%s: %w", l.Items[i].Namespace, l.Items[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// Sync takes m one step further and writes its status; a finished one is
// left alone. An error is one to retry (the API server's); a failed
// migration is recorded in the status, not returned.
func (c *Controller) Sync(ctx context.Context, m *v1alpha1.PodMigration) error {
	before := m
	m = m.DeepCopy()
	var err error
	switch m.Status.Phase {
	case v1alpha1.MigrationSucceeded, v1alpha1.MigrationFailed:
		return nil
	case v1alpha1.MigrationPending:
		err = c.start(ctx, m)
	case v1alpha1.MigrationCheckpointing:
		err = c.checkpointed(ctx, m)
	case v1alpha1.MigrationTransferring:
		err = c.transfer(ctx, m)
	case v1alpha1.MigrationRestoring:
		err = c.restored(ctx, m)
	default:
		return nil
	}
	if err != nil || apiequality.Semantic.DeepEqual(before.Status, m.Status) {
		return err // nothing new to write while a step waits
	}
	if m.Status.Phase == v1alpha1.MigrationFailed && m.Spec.Mode == v1alpha1.ModeLazy && m.Status.PodCheckpoint != "" {
		// The source keeps the pod frozen while it serves the memory:
		// deleting the lazy PodCheckpoint has its node give the pod back
		// now rather than when the checkpoint's timeout passes.
		if err := c.o.API.DeletePodCheckpoint(ctx, m.Namespace, m.Status.PodCheckpoint); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the lazy pod checkpoint %s/%s: %w", m.Namespace, m.Status.PodCheckpoint, err)
		}
	}
	_, err = c.o.API.UpdatePodMigrationStatus(ctx, m, FieldManager)
	return err
}

// set records conditions (and their Ready summary) in m's status.
func (c *Controller) set(m *v1alpha1.PodMigration, conds ...condition.Condition) {
	m.SetConditions(c.o.Now(), conds...)
}

// fail ends m at step typ for reason.
func (c *Controller) fail(m *v1alpha1.PodMigration, typ, reason, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	c.o.Logger.Info("pod migration failed", "namespace", m.Namespace, "name", m.Name, "step", typ, "reason", reason, "message", msg)
	c.set(m, condition.Condition{Type: typ, Status: condition.False, Severity: condition.SeverityError, Reason: reason, Message: msg})
	m.Status.Phase = v1alpha1.MigrationFailed
	m.Status.CompletionTime = ptr.To(metav1.NewTime(c.o.Now()))
}

func progress(typ, reason, msg string) condition.Condition {
	return condition.Condition{Type: typ, Status: condition.False, Severity: condition.SeverityInfo, Reason: reason, Message: msg}
}

func done(typ, reason, msg string) condition.Condition {
	return condition.Condition{Type: typ, Status: condition.True, Reason: reason, Message: msg}
}

// start checks the pod and the target, then creates the PodCheckpoint.
func (c *Controller) start(ctx context.Context, m *v1alpha1.PodMigration) error {
	m.Status.StartTime = ptr.To(metav1.NewTime(c.o.Now()))
	pod, err := c.o.API.GetPod(ctx, m.Namespace, m.Spec.PodName)
	if apierrors.IsNotFound(err) {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonPodNotFound, "pod %s/%s does not exist", m.Namespace, m.Spec.PodName)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonPodNotRunning, "pod %s/%s is %s on node %q: only a running pod moves", m.Namespace, pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		return nil
	}
	if why := ownerRefusal(pod); why != "" {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonOwnedBy, "%s", why)
		return nil
	}
	source, err := c.o.API.GetNode(ctx, pod.Spec.NodeName)
	if err != nil {
		return err
	}
	target, reason, why, err := c.chooseTarget(ctx, m, source)
	if err != nil {
		return err
	}
	if target == nil {
		c.fail(m, v1alpha1.ConditionCheckpointed, reason, "%s", why)
		return nil
	}
	if mode := m.Spec.Mode; mode == v1alpha1.ModePreCopy {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonModeNotBuilt, "both nodes could run %s, but a pod's %s migration is not built yet: use %s or %s", mode, mode, v1alpha1.ModeLazy, v1alpha1.ModeStopAndCopy)
		return nil
	}
	lazy := m.Spec.Mode == v1alpha1.ModeLazy
	if lazy && !m.Spec.DeleteOriginal {
		// The CustomResourceDefinition refuses it too.
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonKeepsOriginal, "a %s migration moves the pod's memory and the original's containers end once it is fetched: set deleteOriginal", v1alpha1.ModeLazy)
		return nil
	}
	m.Status.SourceNode, m.Status.TargetNode, m.Status.PodUID = source.Name, target.Name, string(pod.UID)
	pc := &v1alpha1.PodCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodMigration",
				Name: m.Name, UID: m.UID, Controller: ptr.To(true)}}},
		Spec: v1alpha1.PodCheckpointSpec{PodName: pod.Name, Lazy: lazy},
	}
	if lazy {
		// The source serves the memory at most until the controller
		// would give up on the transfer and the restore.
		pc.Spec.Timeout = &metav1.Duration{Duration: c.o.CheckpointTimeout + c.o.TransferTimeout + c.o.RestoreTimeout}
	}
	_, err = c.o.API.CreatePodCheckpoint(ctx, pc, FieldManager)
	if apierrors.IsAlreadyExists(err) {
		// Ours from a step whose status write was lost, or someone
		// else's of the same name, which this migration must not take.
		cur, gerr := c.o.API.GetPodCheckpoint(ctx, pc.Namespace, pc.Name)
		if gerr != nil {
			return gerr
		}
		if !ownedBy(cur, m) {
			c.fail(m, v1alpha1.ConditionCheckpointed, ReasonCheckpointFailed, "PodCheckpoint %s/%s exists and is not this migration's: name the PodMigration otherwise", pc.Namespace, pc.Name)
			return nil
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("create pod checkpoint %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	m.Status.PodCheckpoint = pc.Name
	m.Status.Phase = v1alpha1.MigrationCheckpointing
	c.set(m, progress(v1alpha1.ConditionCheckpointed, ReasonCheckpointing, fmt.Sprintf("pod checkpoint %s asked of node %s", pc.Name, source.Name)))
	return nil
}

// ownedBy reports whether m controls pc.
func ownedBy(pc *v1alpha1.PodCheckpoint, m *v1alpha1.PodMigration) bool {
	ref := metav1.GetControllerOf(pc)
	return ref != nil && ref.Kind == "PodMigration" && ref.UID == m.UID
}

// ownerRefusal says why a pod's controller forbids moving it, "" when it
// does not: a StatefulSet recreates a pod of the same name itself once
// the original goes, so two controllers would own one name; a DaemonSet's
// pod belongs to its node.
func ownerRefusal(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return ""
	}
	switch ref.Kind {
	case "ReplicaSet":
		return ""
	case "StatefulSet":
		return fmt.Sprintf("pod %s/%s is StatefulSet %s's: the StatefulSet owns the pod's name and recreates it itself; checkpoint and restore it by hand with the StatefulSet scaled down", pod.Namespace, pod.Name, ref.Name)
	case "DaemonSet":
		return fmt.Sprintf("pod %s/%s is DaemonSet %s's, which runs one on every node: it does not move", pod.Namespace, pod.Name, ref.Name)
	}
	return fmt.Sprintf("pod %s/%s is controlled by %s %s, which nodeshim cannot tell of a move", pod.Namespace, pod.Name, ref.Kind, ref.Name)
}

// Needs returns the labels, with their values, that a node must carry to
// take a migration of mode from source; source's own labels must carry
// the same for pre-copy and lazy pages (the source dumps, the target
// restores).
func Needs(mode v1alpha1.MigrationMode, source *corev1.Node) (target, both map[string]string) {
	target = map[string]string{
		v1alpha1.LabelCRIU:                v1alpha1.LabelTrue,
		v1alpha1.LabelRestoreRuntimeClass: v1alpha1.LabelTrue,
	}
	arch := source.Labels[v1alpha1.LabelArch]
	if arch == "" {
		arch = source.Labels[corev1.LabelArchStable]
	}
	target[v1alpha1.LabelArch] = arch
	both = map[string]string{v1alpha1.LabelCRIU: v1alpha1.LabelTrue}
	switch mode {
	case v1alpha1.ModePreCopy:
		both[v1alpha1.LabelPreCopy] = v1alpha1.LabelTrue
	case v1alpha1.ModeLazy:
		both[v1alpha1.LabelLazyPages] = v1alpha1.LabelTrue
	}
	return target, both
}

// Missing returns what node lacks of want, one "label=value (has ...)"
// each, sorted; empty when it has everything.
func Missing(node *corev1.Node, want map[string]string) []string {
	var out []string
	for k, v := range want {
		got, ok := node.Labels[k]
		switch {
		case v == "":
			out = append(out, fmt.Sprintf("%s (the source node's architecture is not labelled)", k))
		case !ok:
			out = append(out, fmt.Sprintf("%s=%s (absent)", k, v))
		case got != v:
			out = append(out, fmt.Sprintf("%s=%s (is %s)", k, v, got))
		}
	}
	sort.Strings(out)
	return out
}

// chooseTarget returns the target node, or nil with the reason and
// message of the refusal. A cordoned node (spec.unschedulable) takes no
// pod, named or selected; an empty selector selects every node.
func (c *Controller) chooseTarget(ctx context.Context, m *v1alpha1.PodMigration, source *corev1.Node) (*corev1.Node, string, string, error) {
	wantTarget, wantBoth := Needs(m.Spec.Mode, source)
	if miss := Missing(source, wantBoth); len(miss) > 0 {
		return nil, ReasonTargetNotCapable, fmt.Sprintf("source node %s lacks %s", source.Name, strings.Join(miss, ", ")), nil
	}
	for k, v := range wantBoth {
		wantTarget[k] = v
	}
	var candidates []corev1.Node
	if m.Spec.TargetNode != "" {
		n, err := c.o.API.GetNode(ctx, m.Spec.TargetNode)
		if apierrors.IsNotFound(err) {
			return nil, ReasonNoTarget, fmt.Sprintf("target node %s does not exist", m.Spec.TargetNode), nil
		}
		if err != nil {
			return nil, "", "", err
		}
		candidates = []corev1.Node{*n}
	} else {
		sel := labels.SelectorFromSet(m.Spec.NodeSelector).String()
		l, err := c.o.API.ListNodes(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, "", "", err
		}
		candidates = l.Items
		sort.Slice(candidates, func(i, j int) bool { return candidates[i].Name < candidates[j].Name })
	}
	var refusals []string
	for i := range candidates {
		n := &candidates[i]
		if n.Name == source.Name {
			refusals = append(refusals, fmt.Sprintf("%s is the pod's node", n.Name))
			continue
		}
		if n.Spec.Unschedulable {
			// Cordoned for maintenance, or being drained itself.
			refusals = append(refusals, fmt.Sprintf("node %s is cordoned", n.Name))
			continue
		}
		if miss := Missing(n, wantTarget); len(miss) > 0 {
			refusals = append(refusals, fmt.Sprintf("node %s lacks %s", n.Name, strings.Join(miss, ", ")))
			continue
		}
		return n, "", "", nil
	}
	if len(refusals) == 0 {
		return nil, ReasonNoTarget, fmt.Sprintf("no node matches %v", m.Spec.NodeSelector), nil
	}
	return nil, ReasonTargetNotCapable, strings.Join(refusals, "; "), nil
}

// checkpointed waits for the PodCheckpoint to be stored on the source.
func (c *Controller) checkpointed(ctx context.Context, m *v1alpha1.PodMigration) error {
	pc, err := c.o.API.GetPodCheckpoint(ctx, m.Namespace, m.Status.PodCheckpoint)
	if apierrors.IsNotFound(err) {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonCheckpointFailed, "pod checkpoint %s is gone", m.Status.PodCheckpoint)
		return nil
	}
	if err != nil {
		return err
	}
	if !ownedBy(pc, m) {
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonCheckpointFailed, "PodCheckpoint %s is not this migration's", pc.Name)
		return nil
	}
	switch pc.Status.Phase {
	case v1alpha1.PhaseFailed:
		st, _ := find(pc.Status.Conditions, v1alpha1.ConditionStored)
		c.fail(m, v1alpha1.ConditionCheckpointed, ReasonCheckpointFailed, "pod checkpoint %s failed on node %s: %s", pc.Name, pc.Status.NodeName, st.Message)
	case v1alpha1.PhaseStored:
		if pc.Status.NodeName != m.Status.SourceNode || string(pc.Status.PodUID) != m.Status.PodUID {
			c.fail(m, v1alpha1.ConditionCheckpointed, ReasonCheckpointFailed, "pod checkpoint %s was taken on node %s of pod uid %s, not of the pod migrated", pc.Name, pc.Status.NodeName, pc.Status.PodUID)
			return nil
		}
		m.Status.Checkpoint = filepath.Base(pc.Status.Location)
		m.Status.Phase = v1alpha1.MigrationTransferring
		c.set(m, done(v1alpha1.ConditionCheckpointed, ReasonCheckpointed, fmt.Sprintf("pod checkpoint %s stored on node %s", m.Status.Checkpoint, pc.Status.NodeName)),
			progress(v1alpha1.ConditionTransferred, ReasonTransferring, fmt.Sprintf("sending %s from node %s to node %s", m.Status.Checkpoint, m.Status.SourceNode, m.Status.TargetNode)))
	default:
		if c.overdue(m, v1alpha1.ConditionCheckpointed, c.o.CheckpointTimeout) {
			c.fail(m, v1alpha1.ConditionCheckpointed, ReasonTimeout, "pod checkpoint %s not stored on node %s within %v (is its reporter running?): the pod runs on there",
				pc.Name, m.Status.SourceNode, c.o.CheckpointTimeout)
		}
	}
	return nil
}

// overdue reports whether the step of condition typ, in progress since
// its last transition, has taken longer than limit.
func (c *Controller) overdue(m *v1alpha1.PodMigration, typ string, limit time.Duration) bool {
	cur, ok := find(m.Status.Conditions, typ)
	return ok && !cur.LastTransitionTime.IsZero() && c.o.Now().Sub(cur.LastTransitionTime.Time) > limit
}

func find(conds []condition.Condition, typ string) (condition.Condition, bool) {
	i := slices.IndexFunc(conds, func(c condition.Condition) bool { return c.Type == typ })
	if i < 0 {
		return condition.Condition{}, false
	}
	return conds[i], true
}

// transfer waits for the source node's reporter to have its shim send
// the pod checkpoint to the target's (cluster/migrationsend: the
// controller holds no node's certificate), then creates the restored
// Pod.
func (c *Controller) transfer(ctx context.Context, m *v1alpha1.PodMigration) error {
	tr, _ := find(m.Status.Conditions, v1alpha1.ConditionTransferred)
	switch {
	case tr.Status == condition.True:
	case tr.Reason == ReasonTransferFailed:
		c.fail(m, v1alpha1.ConditionTransferred, ReasonTransferFailed, "%s", tr.Message)
		return nil
	case c.overdue(m, v1alpha1.ConditionTransferred, c.o.TransferTimeout):
		c.fail(m, v1alpha1.ConditionTransferred, ReasonTimeout, "%s not sent from node %s to node %s within %v (is the source's reporter running, with checkpoint.transfer.send on its shim?): the pod runs on there",
			m.Status.Checkpoint, m.Status.SourceNode, m.Status.TargetNode, c.o.TransferTimeout)
		return nil
	default:
		return nil
	}
	pc, err := c.o.API.GetPodCheckpoint(ctx, m.Namespace, m.Status.PodCheckpoint)
	if err != nil {
		return err
	}
	orig, err := c.o.API.GetPod(ctx, m.Namespace, m.Spec.PodName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && string(orig.UID) != m.Status.PodUID {
		orig = nil // another pod of the name: nothing of it is carried
	} else if err != nil {
		orig = nil
	}
	p := RestoredPod(m, pc, orig)
	if orig != nil && metav1.GetControllerOf(orig) != nil {
		// The ReplicaSet counts the restored pod as one of its own; the
		// original's lowest deletion cost makes it the one scaled away.
		low := "-2147483648"
		if err := c.o.API.PatchPodAnnotations(ctx, orig.Namespace, orig.Name, map[string]*string{AnnotationDeletionCost: &low}, FieldManager); err != nil {
			return fmt.Errorf("set the deletion cost of pod %s/%s: %w", orig.Namespace, orig.Name, err)
		}
	}
	_, err = c.o.API.CreatePod(ctx, p, FieldManager)
	if apierrors.IsAlreadyExists(err) {
		// Ours from a step whose status write was lost, or another pod
		// of the name, which must never count as the restored one.
		cur, gerr := c.o.API.GetPod(ctx, p.Namespace, p.Name)
		if gerr != nil {
			return gerr
		}
		if !restoredBy(cur, m) {
			c.fail(m, v1alpha1.ConditionRestored, ReasonRestoreFailed, "pod %s/%s exists and is not this migration's", p.Namespace, p.Name)
			return nil
		}
		err = nil
	}
	if err != nil {
		c.fail(m, v1alpha1.ConditionRestored, ReasonRestoreFailed, "create pod %s/%s on node %s: %v", p.Namespace, p.Name, m.Status.TargetNode, err)
		return nil
	}
	m.Status.RestoredPod = p.Name
	m.Status.Phase = v1alpha1.MigrationRestoring
	c.set(m, progress(v1alpha1.ConditionRestored, ReasonRestoring, fmt.Sprintf("pod %s created on node %s", p.Name, m.Status.TargetNode)))
	return nil
}

// restoredBy reports whether p is the Pod m restored: on m's target,
// annotated with m's name and checkpoint.
func restoredBy(p *corev1.Pod, m *v1alpha1.PodMigration) bool {
	return p.Annotations[v1alpha1.AnnotationMigration] == m.Name && p.Annotations[kubectl.AnnotationCheckpoint] == m.Status.Checkpoint &&
		p.Spec.NodeName == m.Status.TargetNode
}

// RestoredName is the restored Pod's name: the original's, a dash and
// the first 5 characters of the PodMigration's uid (a name cannot be
// held by two pods, and the original runs until the restored one does).
func RestoredName(m *v1alpha1.PodMigration) string {
	suffix := strings.ReplaceAll(string(m.UID), "-", "")
	if len(suffix) > 5 {
		suffix = suffix[:5]
	}
	name := m.Spec.PodName
	if len(name) > 253-6 {
		name = name[:253-6]
	}
	return name + "-" + suffix
}

// RestoredPod is the Pod that restores m's checkpoint on its target: the
// pod as checkpointed (kubectl.NewPod), bound to the target, named by
// RestoredName, with AnnotationMigration, and the original's owner
// references when orig (nil when gone) is a ReplicaSet's.
func RestoredPod(m *v1alpha1.PodMigration, pc *v1alpha1.PodCheckpoint, orig *corev1.Pod) *corev1.Pod {
	pc = pc.DeepCopy()
	pc.Status.Location = m.Status.Checkpoint
	pc.Status.NodeName = m.Status.TargetNode
	if pc.Status.Pod == nil {
		pc.Status.Pod = &corev1.PodTemplateSpec{}
	}
	p := kubectl.NewPod(pc, RestoredName(m), RuntimeClass)
	p.Annotations[v1alpha1.AnnotationMigration] = m.Name
	delete(p.Annotations, AnnotationDeletionCost)
	if orig != nil {
		if ref := metav1.GetControllerOf(orig); ref != nil && ref.Kind == "ReplicaSet" {
			p.OwnerReferences = slices.Clone(orig.OwnerReferences)
		}
	}
	return p
}

// restored waits for the restored Pod to run, records the downtime and
// deletes the original when asked.
func (c *Controller) restored(ctx context.Context, m *v1alpha1.PodMigration) error {
	p, err := c.o.API.GetPod(ctx, m.Namespace, m.Status.RestoredPod)
	if apierrors.IsNotFound(err) {
		c.fail(m, v1alpha1.ConditionRestored, ReasonRestoreFailed, "restored pod %s is gone", m.Status.RestoredPod)
		return nil
	}
	if err != nil {
		return err
	}
	if !restoredBy(p, m) {
		c.fail(m, v1alpha1.ConditionRestored, ReasonRestoreFailed, "pod %s is not the one this migration restored", p.Name)
		return nil
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		c.fail(m, v1alpha1.ConditionRestored, ReasonRestoreFailed, "restored pod %s ended %s on node %s: %s", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Message)
		return nil
	case corev1.PodRunning:
	default:
		if c.overdue(m, v1alpha1.ConditionRestored, c.o.RestoreTimeout) {
			// The restored pod must not start later beside the original.
			if err := c.o.API.DeletePod(ctx, p.Namespace, p.Name, p.UID); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete the restored pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			c.fail(m, v1alpha1.ConditionRestored, ReasonTimeout, "restored pod %s did not run on node %s within %v (%s: %s); it was deleted, the original runs on",
				p.Name, p.Spec.NodeName, c.o.RestoreTimeout, p.Status.Phase, p.Status.Message)
		}
		return nil
	}
	now := c.o.Now()
	pc, err := c.o.API.GetPodCheckpoint(ctx, m.Namespace, m.Status.PodCheckpoint)
	if err == nil && pc.Status.StartTime != nil {
		m.Status.Downtime = &metav1.Duration{Duration: now.Sub(pc.Status.StartTime.Time).Round(time.Millisecond)}
	}
	if m.Spec.DeleteOriginal {
		err := c.o.API.DeletePod(ctx, m.Namespace, m.Spec.PodName, types.UID(m.Status.PodUID))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete the original pod %s/%s: %w", m.Namespace, m.Spec.PodName, err)
		}
	}
	m.Status.Phase = v1alpha1.MigrationSucceeded
	m.Status.CompletionTime = ptr.To(metav1.NewTime(now))
	msg := fmt.Sprintf("pod %s runs on node %s", p.Name, p.Spec.NodeName)
	if m.Spec.DeleteOriginal {
		msg += fmt.Sprintf("; pod %s deleted from node %s", m.Spec.PodName, m.Status.SourceNode)
	}
	c.set(m, done(v1alpha1.ConditionRestored, ReasonRestored, msg))
	return nil
}
