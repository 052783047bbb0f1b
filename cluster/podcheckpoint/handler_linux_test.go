package podcheckpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// env is one API server for the package's tests, with the PodCheckpoint
// definition and deploy/'s reporter RBAC applied.
type env struct {
	*kubetest.Cluster
	admin    kubernetes.Interface
	adminAPI *kubeapi.Client
	// reporterAPI is the reporters' ServiceAccount: the handler runs with
	// exactly the rights it is deployed with.
	reporterAPI *kubeapi.Client
}

// startEnv starts the API server for t and its subtests.
func startEnv(t *testing.T) *env {
	t.Helper()
	e := &env{Cluster: kubetest.Start(t)}
	e.admin = e.AdminClient(t)
	var err error
	if e.adminAPI, err = kubeapi.ForConfig(e.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess} {
		b, err := m()
		if err != nil {
			t.Fatal(err)
		}
		e.MustApply(t, b)
	}
	if e.reporterAPI, err = kubeapi.ForConfig(e.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter")); err != nil {
		t.Fatal(err)
	}
	// The CRD is served, and the RBAC in force, a moment after they are
	// created.
	testutil.Eventually(t, "PodCheckpoints listed as the reporter", func() error {
		_, err := e.reporterAPI.ListPodCheckpoints(context.Background(), metav1.ListOptions{})
		return err
	})
	return e
}

// TestPodCheckpoints runs the handler against one real API server with
// the PodCheckpoint definition and deploy/'s reporter RBAC.
func TestPodCheckpoints(t *testing.T) {
	e := startEnv(t)
	t.Run("on the pod's node", func(t *testing.T) { testCheckpointOnThePodsNode(t, e) })
	t.Run("failed, pending, interrupted", func(t *testing.T) { testFailedPendingInterrupted(t, e) })
	t.Run("who may checkpoint", func(t *testing.T) { testWhoMayCheckpoint(t, e) })
	t.Run("every grant needed", func(t *testing.T) { testEveryGrantNeeded(t, e) })
}

// fakeShim is the node's shim as the handler sees it: it records the
// calls and answers as told. The shim's own checkpoints are proven in
// shim/ and e2e/; here the API server and the handler are real.
type fakeShim struct {
	mu      sync.Mutex
	fail    map[string]error // by pod
	calls   []string         // "namespace/pod"
	removed []string
}

func (s *fakeShim) CheckpointPodWith(_ context.Context, namespace, pod string, o client.PodCheckpointOptions) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	call := namespace + "/" + pod
	if o.Lazy {
		call += " lazy"
	}
	s.calls = append(s.calls, call)
	if err := s.fail[pod]; err != nil {
		return "", err
	}
	return filepath.Join("/var/lib/kubelet/checkpoints", "pod-"+namespace+"-"+pod+"-2026-11-28T04:00:00Z"), nil
}

func (s *fakeShim) RemoveCheckpoint(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = append(s.removed, name)
	return nil
}

func (s *fakeShim) snapshot() (calls, removed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...), append([]string(nil), s.removed...)
}

// run starts a handler for node as the reporter until the test ends.
func (e *env) run(t *testing.T, node string, shim Shim) {
	t.Helper()
	h, err := New(Options{NodeName: node, API: e.reporterAPI, Shim: shim, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
}

// pod creates a Pod bound to node (no kubelet runs it: the handler reads
// only where it is).
func (e *env) pod(t *testing.T, ns, name, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller-manager runs to make the namespace's default
	// ServiceAccount, which the API server's admission wants.
	if _, err := e.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p, err := e.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) create(t *testing.T, ns, name, pod string) {
	t.Helper()
	_, err := e.adminAPI.CreatePodCheckpoint(context.Background(), &v1alpha1.PodCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.PodCheckpointSpec{PodName: pod},
	}, "test")
	if err != nil {
		t.Fatal(err)
	}
}

// waitPhase waits for ns/name to reach phase and returns it.
func (e *env) waitPhase(t *testing.T, ns, name string, phase v1alpha1.Phase) *v1alpha1.PodCheckpoint {
	t.Helper()
	var pc *v1alpha1.PodCheckpoint
	testutil.Eventually(t, fmt.Sprintf("PodCheckpoint %s/%s %s", ns, name, phase), func() error {
		var err error
		if pc, err = e.adminAPI.GetPodCheckpoint(context.Background(), ns, name); err != nil {
			return err
		}
		if pc.Status.Phase != phase {
			return fmt.Errorf("phase %q, conditions %+v", pc.Status.Phase, pc.Status.Conditions)
		}
		return nil
	})
	return pc
}

func cond(t *testing.T, pc *v1alpha1.PodCheckpoint, typ string) condition.Condition {
	t.Helper()
	for _, c := range pc.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("%s/%s has no %s condition: %+v", pc.Namespace, pc.Name, typ, pc.Status.Conditions)
	return condition.Condition{}
}

// testCheckpointOnThePodsNode: the handler of the pod's node claims the
// object (finalizer, Accepted), asks its shim once and records Stored
// with the location and conditions; the other node's handler leaves it
// alone; deleting the object removes the checkpoint through the shim,
// then the object goes.
func testCheckpointOnThePodsNode(t *testing.T, e *env) {
	a, b := &fakeShim{}, &fakeShim{}
	e.run(t, "node-a", a)
	e.run(t, "node-b", b)
	p := e.pod(t, "team-a", "web", "node-a")
	e.create(t, "team-a", "web-ckpt", "web")

	pc := e.waitPhase(t, "team-a", "web-ckpt", v1alpha1.PhaseStored)
	if pc.Status.NodeName != "node-a" || pc.Status.PodUID != string(p.UID) || !strings.HasPrefix(filepath.Base(pc.Status.Location), "pod-team-a-web-") {
		t.Errorf("status %+v", pc.Status)
	}
	if pc.Status.StartTime == nil || pc.Status.CompletionTime == nil || pc.Status.ObservedGeneration != pc.Generation {
		t.Errorf("times %v %v, observedGeneration %d of %d", pc.Status.StartTime, pc.Status.CompletionTime, pc.Status.ObservedGeneration, pc.Generation)
	}
	for _, typ := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionStored, v1alpha1.ConditionReady} {
		if c := cond(t, pc, typ); c.Status != condition.True || c.ObservedGeneration != pc.Generation {
			t.Errorf("%s = %+v, want True at generation %d", typ, c, pc.Generation)
		}
	}
	if len(pc.Finalizers) != 1 || pc.Finalizers[0] != v1alpha1.FinalizerCheckpointFiles {
		t.Errorf("finalizers %v", pc.Finalizers)
	}
	if calls, _ := a.snapshot(); len(calls) != 1 || calls[0] != "team-a/web" {
		t.Errorf("node-a's shim was asked %v, want team-a/web once", calls)
	}
	if calls, _ := b.snapshot(); len(calls) != 0 {
		t.Errorf("node-b's shim was asked %v", calls)
	}

	if err := e.adminAPI.DeletePodCheckpoint(context.Background(), "team-a", "web-ckpt"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted PodCheckpoint gone", func() error {
		_, err := e.adminAPI.GetPodCheckpoint(context.Background(), "team-a", "web-ckpt")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	if _, removed := a.snapshot(); len(removed) != 1 || removed[0] != filepath.Base(pc.Status.Location) {
		t.Errorf("node-a removed %v, want %s", removed, filepath.Base(pc.Status.Location))
	}

	// A lazy one (a Lazy PodMigration's) asks the shim for a lazy pod
	// checkpoint, and says that the pod stays frozen on its node.
	e.pod(t, "team-a", "cache", "node-a")
	if _, err := e.adminAPI.CreatePodCheckpoint(context.Background(), &v1alpha1.PodCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cache-lazy"},
		Spec: v1alpha1.PodCheckpointSpec{PodName: "cache", Lazy: true}}, "test"); err != nil {
		t.Fatal(err)
	}
	lz := e.waitPhase(t, "team-a", "cache-lazy", v1alpha1.PhaseStored)
	if c := cond(t, lz, v1alpha1.ConditionStored); !strings.Contains(c.Message, "stays frozen") {
		t.Errorf("Stored %+v: want the frozen pod said", c)
	}
	if calls, _ := a.snapshot(); !slices.Contains(calls, "team-a/cache lazy") {
		t.Errorf("node-a's shim was asked %v, want team-a/cache lazy", calls)
	}
}

// testFailedPendingInterrupted: a checkpoint the shim refuses is Failed
// with its cause; an object whose pod does not exist stays Pending; one
// left Accepted by a reporter that stopped is Failed as Interrupted.
func testFailedPendingInterrupted(t *testing.T, e *env) {
	ctx := context.Background()
	// Left Accepted by node-c's previous reporter.
	e.pod(t, "team-c", "api", "node-c")
	e.create(t, "team-c", "api-ckpt", "api")
	left, err := e.adminAPI.GetPodCheckpoint(ctx, "team-c", "api-ckpt")
	if err != nil {
		t.Fatal(err)
	}
	left.Status = v1alpha1.PodCheckpointStatus{Phase: v1alpha1.PhaseAccepted, NodeName: "node-c"}
	if _, err := e.adminAPI.UpdatePodCheckpointStatus(ctx, left, "test"); err != nil {
		t.Fatal(err)
	}
	e.create(t, "team-c", "ghost-ckpt", "no-such-pod")
	e.pod(t, "team-c", "db", "node-c")
	e.create(t, "team-c", "db-ckpt", "db")

	shim := &fakeShim{fail: map[string]error{"db": errors.New("checkpoint team-c/db: criu dump failed: no space left on device")}}
	e.run(t, "node-c", shim)

	failed := e.waitPhase(t, "team-c", "db-ckpt", v1alpha1.PhaseFailed)
	if c := cond(t, failed, v1alpha1.ConditionStored); c.Status != condition.False || c.Severity != condition.SeverityError ||
		c.Reason != ReasonFailed || !strings.Contains(c.Message, "no space left") {
		t.Errorf("Stored = %+v", c)
	}
	if c := cond(t, failed, v1alpha1.ConditionReady); c.Status != condition.False {
		t.Errorf("Ready = %+v", c)
	}
	interrupted := e.waitPhase(t, "team-c", "api-ckpt", v1alpha1.PhaseFailed)
	if c := cond(t, interrupted, v1alpha1.ConditionStored); c.Reason != ReasonInterrupted {
		t.Errorf("Stored = %+v, want reason %s", c, ReasonInterrupted)
	}
	// The objects are handled in the order listed: the ghost's turn came
	// before db's, which is Failed now.
	ghost, err := e.adminAPI.GetPodCheckpoint(ctx, "team-c", "ghost-ckpt")
	if err != nil {
		t.Fatal(err)
	}
	if ghost.Status.Phase != v1alpha1.PhasePending || ghost.Status.NodeName != "" || len(ghost.Finalizers) != 0 {
		t.Errorf("the PodCheckpoint of a missing pod: %+v, finalizers %v", ghost.Status, ghost.Finalizers)
	}
	if calls, _ := shim.snapshot(); len(calls) != 1 || calls[0] != "team-c/db" {
		t.Errorf("the shim was asked %v, want team-c/db only", calls)
	}
}

// testWhoMayCheckpoint: bound in one namespace to deploy/'s
// nodeshim-podcheckpoints-edit (which a cluster aggregates into
// Kubernetes' edit role: kube-controller-manager does the aggregation,
// and none runs here, so the test binds the role itself), a developer
// creates and reads the PodCheckpoints of that namespace, and neither
// reads another namespace's nor writes a status.
func testWhoMayCheckpoint(t *testing.T, e *env) {
	ctx := context.Background()
	e.pod(t, "team-d", "web", "node-d")
	e.pod(t, "team-e", "web", "node-e")
	e.create(t, "team-e", "theirs", "web")
	cfg := e.ServiceAccountConfig(t, "team-d", "developer")
	if _, err := e.admin.RbacV1().RoleBindings("team-d").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "developer-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodeshim-podcheckpoints-edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "developer", Namespace: "team-d"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dev, err := kubeapi.ForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mine *v1alpha1.PodCheckpoint
	testutil.Eventually(t, "the developer creates a PodCheckpoint in team-d", func() error {
		mine, err = dev.CreatePodCheckpoint(ctx, &v1alpha1.PodCheckpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: "mine"},
			Spec:       v1alpha1.PodCheckpointSpec{PodName: "web"},
		}, "kubectl")
		return err
	})
	if _, err := dev.GetPodCheckpoint(ctx, "team-d", "mine"); err != nil {
		t.Errorf("read own namespace's: %v", err)
	}
	if _, err := dev.GetPodCheckpoint(ctx, "team-e", "theirs"); !apierrors.IsForbidden(err) {
		t.Errorf("read team-e's PodCheckpoint: %v, want forbidden", err)
	}
	mine.Status = v1alpha1.PodCheckpointStatus{Phase: v1alpha1.PhaseStored, NodeName: "node-d", Location: "/etc/shadow"}
	if _, err := dev.UpdatePodCheckpointStatus(ctx, mine, "kubectl"); !apierrors.IsForbidden(err) {
		t.Errorf("write the status: %v, want forbidden", err)
	}
	// The schema refuses a bad pod name and a changed one.
	_, err = dev.CreatePodCheckpoint(ctx, &v1alpha1.PodCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: "bad"},
		Spec:       v1alpha1.PodCheckpointSpec{PodName: "../../etc"},
	}, "kubectl")
	if !apierrors.IsInvalid(err) {
		t.Errorf("podName ../../etc: %v, want invalid", err)
	}
	cur, err := dev.GetPodCheckpoint(ctx, "team-d", "mine")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.PodName = "other"
	_, err = e.adminAPI.UpdatePodCheckpoint(ctx, cur, "kubectl")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("change podName: %v, want invalid: immutable", err)
	}
}

// recordingAPI is the handler's API that remembers which requests the
// API server refused.
type recordingAPI struct {
	API
	mu        sync.Mutex
	forbidden map[string]bool
}

func (a *recordingAPI) note(what string, err error) {
	if apierrors.IsForbidden(err) {
		a.mu.Lock()
		a.forbidden[what] = true
		a.mu.Unlock()
	}
}

func (a *recordingAPI) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p, err := a.API.GetPod(ctx, ns, name)
	a.note("pods/get", err)
	return p, err
}

func (a *recordingAPI) ListPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodCheckpointList, error) {
	l, err := a.API.ListPodCheckpoints(ctx, opts)
	a.note("podcheckpoints/list", err)
	return l, err
}

func (a *recordingAPI) WatchPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := a.API.WatchPodCheckpoints(ctx, opts)
	a.note("podcheckpoints/watch", err)
	return w, err
}

func (a *recordingAPI) UpdatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fm string) (*v1alpha1.PodCheckpoint, error) {
	out, err := a.API.UpdatePodCheckpoint(ctx, pc, fm)
	a.note("podcheckpoints/update", err)
	return out, err
}

func (a *recordingAPI) UpdatePodCheckpointStatus(ctx context.Context, pc *v1alpha1.PodCheckpoint, fm string) (*v1alpha1.PodCheckpoint, error) {
	out, err := a.API.UpdatePodCheckpointStatus(ctx, pc, fm)
	a.note("podcheckpoints/status/update", err)
	return out, err
}

// handlerGrants are the reporter's grants (deploy/rbac.yaml) that the
// handler uses, as group, resource, verb.
var handlerGrants = []struct{ group, resource, verb string }{
	{"", "pods", "get"},
	{"nodeshim.io", "podcheckpoints", "list"},
	{"nodeshim.io", "podcheckpoints", "watch"},
	{"nodeshim.io", "podcheckpoints", "update"},
	{"nodeshim.io", "podcheckpoints/status", "update"},
}

// testEveryGrantNeeded: run with every grant of handlerGrants but one,
// the handler is refused exactly where it uses that one, so none of them
// is broader than needed; deploy/'s TestRBACLeastPrivilege holds
// rbac.yaml to these.
func testEveryGrantNeeded(t *testing.T, e *env) {
	ctx := context.Background()
	for i, without := range handlerGrants {
		key := without.resource + "/" + without.verb
		t.Run(key, func(t *testing.T) {
			name := fmt.Sprintf("without-%d", i)
			// An object of its own, unclaimed: a handler of an earlier
			// subtest may have stored the one before.
			e.pod(t, "team-g", "web-"+name, "node-g")
			e.create(t, "team-g", "web-"+name+"-ckpt", "web-"+name)
			var rules []rbacv1.PolicyRule
			for _, g := range handlerGrants {
				if g != without {
					rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}})
				}
			}
			kube, err := kubeapi.ForConfig(e.BoundServiceAccountConfig(t, "nodeshim", name, rules))
			if err != nil {
				t.Fatal(err)
			}
			api := &recordingAPI{API: kube, forbidden: map[string]bool{}}
			h, err := New(Options{NodeName: "node-g", API: api, Shim: &fakeShim{}, Retry: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- h.Run(rctx) }()
			defer func() {
				cancel()
				<-done
			}()
			testutil.Eventually(t, "the handler refused "+key, func() error {
				api.mu.Lock()
				defer api.mu.Unlock()
				if !api.forbidden[key] {
					return fmt.Errorf("refused so far: %v", api.forbidden)
				}
				return nil
			})
			api.mu.Lock()
			defer api.mu.Unlock()
			for k := range api.forbidden {
				if k != key {
					t.Errorf("also refused %s, which the role grants", k)
				}
			}
		})
	}
}
