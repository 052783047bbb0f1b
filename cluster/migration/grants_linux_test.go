package migration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// recordingAPI is the controller's API that remembers which requests the
// API server refused, as "resource/verb".
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

func (a *recordingAPI) refused() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for k := range a.forbidden {
		out[k] = true
	}
	return out
}

func (a *recordingAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := a.API.GetNode(ctx, name)
	a.note("nodes/get", err)
	return n, err
}

func (a *recordingAPI) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	l, err := a.API.ListNodes(ctx, opts)
	a.note("nodes/list", err)
	return l, err
}

func (a *recordingAPI) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p, err := a.API.GetPod(ctx, ns, name)
	a.note("pods/get", err)
	return p, err
}

func (a *recordingAPI) CreatePod(ctx context.Context, p *corev1.Pod, fm string) (*corev1.Pod, error) {
	out, err := a.API.CreatePod(ctx, p, fm)
	a.note("pods/create", err)
	return out, err
}

func (a *recordingAPI) DeletePod(ctx context.Context, ns, name string, uid types.UID) error {
	err := a.API.DeletePod(ctx, ns, name, uid)
	a.note("pods/delete", err)
	return err
}

func (a *recordingAPI) PatchPodAnnotations(ctx context.Context, ns, name string, ann map[string]*string, fm string) error {
	err := a.API.PatchPodAnnotations(ctx, ns, name, ann, fm)
	a.note("pods/patch", err)
	return err
}

func (a *recordingAPI) GetPodCheckpoint(ctx context.Context, ns, name string) (*v1alpha1.PodCheckpoint, error) {
	pc, err := a.API.GetPodCheckpoint(ctx, ns, name)
	a.note("podcheckpoints/get", err)
	return pc, err
}

func (a *recordingAPI) CreatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fm string) (*v1alpha1.PodCheckpoint, error) {
	out, err := a.API.CreatePodCheckpoint(ctx, pc, fm)
	a.note("podcheckpoints/create", err)
	return out, err
}

func (a *recordingAPI) DeletePodCheckpoint(ctx context.Context, ns, name string) error {
	err := a.API.DeletePodCheckpoint(ctx, ns, name)
	a.note("podcheckpoints/delete", err)
	return err
}

func (a *recordingAPI) ListPodMigrations(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodMigrationList, error) {
	l, err := a.API.ListPodMigrations(ctx, opts)
	a.note("podmigrations/list", err)
	return l, err
}

func (a *recordingAPI) WatchPodMigrations(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := a.API.WatchPodMigrations(ctx, opts)
	a.note("podmigrations/watch", err)
	return w, err
}

func (a *recordingAPI) WatchPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := a.API.WatchPodCheckpoints(ctx, opts)
	a.note("podcheckpoints/watch", err)
	return w, err
}

func (a *recordingAPI) UpdatePodMigrationStatus(ctx context.Context, m *v1alpha1.PodMigration, fm string) (*v1alpha1.PodMigration, error) {
	out, err := a.API.UpdatePodMigrationStatus(ctx, m, fm)
	a.note("podmigrations/status/update", err)
	return out, err
}

// shippedGrants returns the rules of deploy/'s
// nodeshim-controller-migrations, one grant each.
func shippedGrants(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	objs, err := deploy.Decode("rbac-podmigration.yaml", manifest(t, "rbac-podmigration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []rbacv1.PolicyRule
	for _, o := range objs {
		if r, ok := o.(*rbacv1.ClusterRole); ok && r.Name == "nodeshim-controller-migrations" {
			for _, rule := range r.Rules {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						out = append(out, rbacv1.PolicyRule{APIGroups: rule.APIGroups, Resources: []string{res}, Verbs: []string{v}})
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("deploy/rbac-podmigration.yaml has no nodeshim-controller-migrations rules")
	}
	return out
}

// testEveryGrantNeeded: run with every grant of the shipped
// nodeshim-controller-migrations but one, the controller is refused where
// it uses that one and nowhere else, so no grant is broader than needed.
// The migration moves a ReplicaSet's pod through a node selector with
// deleteOriginal, which uses every grant but the delete of a PodCheckpoint:
// that one is a Lazy migration's whose transfer is refused (node-e), which
// deletes its lazy PodCheckpoint to have the source thaw the pod.
func testEveryGrantNeeded(t *testing.T, e *env) {
	ctx := context.Background()
	grants := shippedGrants(t)
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "pay-5c4", UID: "u-rs", Controller: ptr.To(true)}
	for i, without := range grants {
		key := without.Resources[0] + "/" + without.Verbs[0]
		t.Run(key, func(t *testing.T) {
			name := fmt.Sprintf("mig-without-%d", i)
			var rules []rbacv1.PolicyRule
			for j, g := range grants {
				if j != i {
					rules = append(rules, g)
				}
			}
			kube, err := kubeapi.ForConfig(e.BoundServiceAccountConfig(t, "nodeshim-controller", name, rules))
			if err != nil {
				t.Fatal(err)
			}
			pod := fmt.Sprintf("pay-%d", i)
			e.pod(t, "grants", pod, "node-a", rs)
			spec := v1alpha1.PodMigrationSpec{PodName: pod, NodeSelector: map[string]string{"pool": "spare"}, DeleteOriginal: true}
			if key == "podcheckpoints/delete" {
				spec = v1alpha1.PodMigrationSpec{PodName: pod, TargetNode: "node-e", Mode: v1alpha1.ModeLazy, DeleteOriginal: true}
			}
			e.migrate(t, "grants", name, spec)
			defer e.adminAPI.DeletePodMigration(ctx, "grants", name) //nolint:errcheck // the next subtest's controller then skips it
			api := &recordingAPI{API: kube, forbidden: map[string]bool{}}
			c, err := New(Options{API: api, Interval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer run(t, c.Run)()
			testutil.Eventually(t, "the controller refused "+key, func() error {
				// Stand in for the target's kubelet: the restored pod runs.
				if p, err := e.admin.CoreV1().Pods("grants").Get(ctx, RestoredName(e.get(t, "grants", name)), metav1.GetOptions{}); err == nil && p.Status.Phase != corev1.PodRunning {
					e.running(t, p)
				}
				if !api.refused()[key] {
					return fmt.Errorf("refused so far: %v", api.refused())
				}
				return nil
			})
			for k := range api.refused() {
				if k != key {
					t.Errorf("also refused %s, which the role grants", k)
				}
			}
		})
	}
}

// get reads the PodMigration ns/name as the admin.
func (e *env) get(t *testing.T, ns, name string) *v1alpha1.PodMigration {
	t.Helper()
	l, err := e.adminAPI.ListPodMigrations(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		if l.Items[i].Namespace == ns && l.Items[i].Name == name {
			return &l.Items[i]
		}
	}
	t.Fatalf("no PodMigration %s/%s", ns, name)
	return nil
}
