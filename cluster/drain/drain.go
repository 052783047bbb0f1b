// Package drain empties a node before maintenance, as `kubectl drain`
// does, except that the pods annotated migration.nodeshim.io/on-drain:
// migrate move to other nodes with their state (a PodMigration each,
// which nodeshim's controller carries out) instead of being evicted.
//
// A drain cordons the node first, so that nothing new lands there and no
// migration picks it as a target. Then, for each pod bound to it:
//
//   - a DaemonSet's pod and a static (mirror) pod stay, as with `kubectl
//     drain --ignore-daemonsets`: they belong to the node;
//   - a pod that has finished or is already being deleted is left to end;
//   - an annotated running pod gets a PodMigration to any capable node,
//     the original deleted once the moved pod runs;
//   - every other pod is evicted through the eviction subresource, so that
//     its PodDisruptionBudgets hold: an eviction they refuse (429) is
//     asked again until they allow it or the drain's time runs out.
//
// It returns once every migration has succeeded and every evicted pod is
// gone. A migration that fails leaves its pod running on the node, still
// cordoned, and fails the drain naming the pod and why: evicting it would
// lose the state it was annotated to keep.
package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/condition"
)

// API is what a drain asks of the API server (kubeapi.Client).
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	CordonNode(ctx context.Context, name, fieldManager string) error
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	EvictPod(ctx context.Context, namespace, name string) error
	CreatePodMigration(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error)
	GetPodMigration(ctx context.Context, namespace, name string) (*v1alpha1.PodMigration, error)
}

// Options configure a drain.
type Options struct {
	// Node is the node to drain.
	Node string
	API  API
	// FieldManager names the drain's writes.
	FieldManager string
	// Out receives one line per step; nil discards them.
	Out io.Writer
	// Poll is how often the pods and migrations are read again, and a
	// refused eviction asked again; a second when zero.
	Poll time.Duration
	// Now is the clock, for the migrations' names; time.Now when nil.
	Now func() time.Time
}

// Action is what the drain does with one pod.
type Action string

// The actions.
const (
	Migrate Action = "migrate"
	Evict   Action = "evict"
	Skip    Action = "skip"
)

// Step is one pod's action and why.
type Step struct {
	Namespace, Pod string
	UID            types.UID
	Action         Action
	// Why says why a pod is skipped; Migration names a migrated pod's
	// PodMigration.
	Why, Migration string
}

// Plan returns what a drain does with each of pods, in namespace and
// name order.
func Plan(pods []corev1.Pod) []Step {
	var out []Step
	for i := range pods {
		p := &pods[i]
		s := Step{Namespace: p.Namespace, Pod: p.Name, UID: p.UID}
		ref := metav1.GetControllerOf(p)
		switch {
		case ref != nil && ref.Kind == "DaemonSet":
			s.Action, s.Why = Skip, "a DaemonSet's pod"
		case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
			s.Action, s.Why = Skip, "a static pod"
		case p.DeletionTimestamp != nil:
			s.Action, s.Why = Skip, "being deleted"
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			s.Action, s.Why = Skip, "finished ("+string(p.Status.Phase)+")"
		case p.Annotations[v1alpha1.AnnotationOnDrain] == v1alpha1.DrainMigrate && p.Status.Phase == corev1.PodRunning:
			s.Action = Migrate
		default:
			s.Action = Evict
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Pod < out[j].Pod
	})
	return out
}

// Run drains o.Node and returns its steps; the error names every pod
// that could not be moved or evicted, and why.
func Run(ctx context.Context, o Options) ([]Step, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if errs := validation.IsDNS1123Subdomain(o.Node); len(errs) > 0 {
		return nil, fmt.Errorf("node %q: %v", o.Node, errs)
	}
	if _, err := o.API.GetNode(ctx, o.Node); err != nil {
		return nil, fmt.Errorf("get node %s: %w", o.Node, err)
	}
	if err := o.API.CordonNode(ctx, o.Node, o.FieldManager); err != nil {
		return nil, fmt.Errorf("cordon node %s: %w", o.Node, err)
	}
	fmt.Fprintf(o.Out, "node/%s cordoned\n", o.Node)
	l, err := o.API.ListPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + o.Node})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", o.Node, err)
	}
	steps := Plan(l.Items)
	for i := range steps {
		s := &steps[i]
		switch s.Action {
		case Skip:
			fmt.Fprintf(o.Out, "pod/%s/%s stays: %s\n", s.Namespace, s.Pod, s.Why)
		case Migrate:
			if err := migrate(ctx, o, s); err != nil {
				return steps, err
			}
			fmt.Fprintf(o.Out, "pod/%s/%s moving (podmigration.nodeshim.io/%s)\n", s.Namespace, s.Pod, s.Migration)
		}
	}
	return steps, wait(ctx, o, steps)
}

// migrate creates the PodMigration of s's pod: to any capable node (the
// drained one is cordoned), the original deleted once the moved one runs.
func migrate(ctx context.Context, o Options, s *Step) error {
	name := fmt.Sprintf("%s-drain-%d", s.Pod, o.Now().Unix())
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = name[len(name)-validation.DNS1123SubdomainMaxLength:]
	}
	m := &v1alpha1.PodMigration{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec: v1alpha1.PodMigrationSpec{PodName: s.Pod, DeleteOriginal: true}}
	if _, err := o.API.CreatePodMigration(ctx, m, o.FieldManager); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PodMigration %s/%s of pod %s: %w", s.Namespace, name, s.Pod, err)
	}
	s.Migration = name
	return nil
}

// wait evicts the pods to evict (again while their budgets refuse) and
// follows the migrations until each pod has moved or is gone.
func wait(ctx context.Context, o Options, steps []Step) error {
	pending := map[int]bool{}
	evicted := map[int]bool{}
	for i, s := range steps {
		if s.Action != Skip {
			pending[i] = true
		}
	}
	var failed []error
	for len(pending) > 0 {
		for i := range pending {
			s := &steps[i]
			done, err := progress(ctx, o, s, evicted, i)
			if err != nil {
				failed = append(failed, err)
				fmt.Fprintf(o.Out, "pod/%s/%s stays: %v\n", s.Namespace, s.Pod, err)
			}
			if done || err != nil {
				delete(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			var left []string
			for i := range pending {
				left = append(left, steps[i].Namespace+"/"+steps[i].Pod)
			}
			sort.Strings(left)
			return errors.Join(append(failed, fmt.Errorf("drain of node %s: pods %v not yet gone: %w", o.Node, left, ctx.Err()))...)
		case <-time.After(o.Poll):
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("drain of node %s: the node stays cordoned with: %w", o.Node, errors.Join(failed...))
	}
	fmt.Fprintf(o.Out, "node/%s drained\n", o.Node)
	return nil
}

// progress takes s a step further and reports whether it is done; an
// error says why it never will be.
func progress(ctx context.Context, o Options, s *Step, evicted map[int]bool, i int) (bool, error) {
	if s.Action == Migrate {
		m, err := o.API.GetPodMigration(ctx, s.Namespace, s.Migration)
		if err != nil {
			return false, nil // read again at the next poll
		}
		switch m.Status.Phase {
		case v1alpha1.MigrationSucceeded:
			fmt.Fprintf(o.Out, "pod/%s/%s moved to node %s as %s\n", s.Namespace, s.Pod, m.Status.TargetNode, m.Status.RestoredPod)
			return true, nil
		case v1alpha1.MigrationFailed:
			return false, fmt.Errorf("pod %s/%s: PodMigration %s failed: %s", s.Namespace, s.Pod, s.Migration, failure(m))
		}
		return false, nil
	}
	p, err := o.API.GetPod(ctx, s.Namespace, s.Pod)
	if apierrors.IsNotFound(err) || err == nil && p.UID != s.UID {
		fmt.Fprintf(o.Out, "pod/%s/%s evicted\n", s.Namespace, s.Pod)
		return true, nil
	}
	if err != nil || evicted[i] {
		return false, nil
	}
	switch err := o.API.EvictPod(ctx, s.Namespace, s.Pod); {
	case err == nil:
		evicted[i] = true
		fmt.Fprintf(o.Out, "pod/%s/%s evicting\n", s.Namespace, s.Pod)
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget forbids it now: asked again next poll.
	case apierrors.IsNotFound(err):
		return true, nil
	default:
		return false, fmt.Errorf("evict pod %s/%s: %w", s.Namespace, s.Pod, err)
	}
	return false, nil
}

// failure is the reason and message of m's failed step.
func failure(m *v1alpha1.PodMigration) string {
	for _, c := range m.Status.Conditions {
		if c.Type != condition.TypeReady && c.Status == condition.False && c.Severity == condition.SeverityError {
			return c.Reason + ": " + c.Message
		}
	}
	return "no step says why"
}
