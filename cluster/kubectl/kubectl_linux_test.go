package kubectl

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/podcheckpoint"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// nodeShim stands for the node's shim behind the reporter's handler: the
// handler and the API server are real; the shim's pod checkpoints are
// proven in shim/checkpoint and e2e/.
type nodeShim struct {
	mu      sync.Mutex
	removed []string
}

func (s *nodeShim) CheckpointPodWith(_ context.Context, ns, pod string, _ client.PodCheckpointOptions) (string, error) {
	return filepath.Join("/var/lib/nodeshim/checkpoints", "checkpoint-"+pod+"_"+ns+"-2026-11-28T04:00:00Z"), nil
}

func (s *nodeShim) RemoveCheckpoint(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = append(s.removed, name)
	return nil
}

// TestPlugin drives the plugin as a user would against a real API server,
// with the reporter's handler of node-a serving the objects: checkpoint
// (waiting, printing the phases), get, restore into a new Pod on the
// checkpoint's node under the RuntimeClass, and delete; and its refusals.
func TestPlugin(t *testing.T) {
	testutil.RequireRoot(t)
	c := kubetest.Start(t)
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess,
		func() ([]byte, error) { return deploy.Manifests.ReadFile("crd-podmigration.yaml") }} {
		b, err := m()
		if err != nil {
			t.Fatal(err)
		}
		c.MustApply(t, b)
	}
	ctx := context.Background()
	admin := c.AdminClient(t)
	for _, o := range []func() error{
		func() error {
			_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: DefaultRuntimeClass}, Handler: "nodeshim"}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "cart", Labels: map[string]string{"app": "cart"}},
				Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{
					{Name: "app", Image: "busybox"}, {Name: "sidecar", Image: "busybox"}}},
			}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := o(); err != nil {
			t.Fatal(err)
		}
	}
	reporter, err := kubeapi.ForConfig(c.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter"))
	if err != nil {
		t.Fatal(err)
	}
	shim := &nodeShim{}
	h, err := podcheckpoint.New(podcheckpoint.Options{NodeName: "node-a", API: reporter, Shim: shim, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	t.Cleanup(func() { cancel(); <-done })

	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := Run(ctx, args, Env{Stdout: &out, Stderr: &errOut, Config: c.AdminConfig(), Namespace: "default", Poll: 50 * time.Millisecond,
			Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
		return out.String() + errOut.String(), err
	}
	// The CRD is served a moment after it is created.
	testutil.Eventually(t, "kubectl nodeshim get answers", func() error {
		_, err := run("get", "-n", "shop")
		return err
	})

	out, err := run("checkpoint", "cart", "-n", "shop")
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, out)
	}
	for _, want := range []string{"podcheckpoint.nodeshim.io/cart-1800000000 created", "Stored\tnode node-a: checkpoint-cart_shop-"} {
		if !strings.Contains(out, want) {
			t.Errorf("checkpoint printed\n%s\nwant %q", out, want)
		}
	}
	out, err = run("get", "-n", "shop")
	if err != nil || !strings.Contains(out, "cart-1800000000") || !strings.Contains(out, "node-a") || !strings.Contains(out, "Stored") {
		t.Errorf("get: %v\n%s", err, out)
	}

	out, err = run("restore", "cart-1800000000", "-n", "shop", "--pod", "cart-2", "--wait=false")
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	p, err := admin.CoreV1().Pods("shop").Get(ctx, "cart-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "node-a" || p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != DefaultRuntimeClass ||
		p.Annotations[AnnotationCheckpoint] != "checkpoint-cart_shop-2026-11-28T04:00:00Z" || p.Spec.Hostname != "cart" ||
		p.Labels["app"] != "cart" || len(p.Spec.Containers) != 2 {
		t.Errorf("restored Pod: node %q, runtime class %v, annotations %v, hostname %q, labels %v, %d containers",
			p.Spec.NodeName, p.Spec.RuntimeClassName, p.Annotations, p.Spec.Hostname, p.Labels, len(p.Spec.Containers))
	}

	out, err = run("delete", "cart-1800000000", "-n", "shop")
	if err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	testutil.Eventually(t, "the PodCheckpoint gone and its checkpoint removed", func() error {
		if _, err := run("get", "cart-1800000000", "-n", "shop"); err == nil || !strings.Contains(err.Error(), "not found") {
			return fmt.Errorf("get after delete: %v", err)
		}
		shim.mu.Lock()
		defer shim.mu.Unlock()
		if len(shim.removed) != 1 || shim.removed[0] != "checkpoint-cart_shop-2026-11-28T04:00:00Z" {
			return fmt.Errorf("removed %v", shim.removed)
		}
		return nil
	})

	for _, tt := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{nil, true, "no command"},
		{[]string{"uncordon", "node-a"}, true, "unknown command"},
		{[]string{"drain"}, true, "one NODE"},
		{[]string{"drain", "node-a", "--timeout", "0s"}, true, "--timeout 0s"},
		{[]string{"drain", "node-z"}, false, `nodes "node-z" not found`},
		{[]string{"migrate", "cart", "-n", "shop"}, true, "exactly one of --to NODE and --selector"},
		{[]string{"migrate", "cart", "-n", "shop", "--to", "node-b", "--selector", "pool=spare"}, true, "exactly one of"},
		{[]string{"migrate", "cart", "-n", "shop", "--selector", "pool"}, true, `--selector "pool"`},
		{[]string{"migrate", "cart", "-n", "shop", "--to", "Node_B"}, true, `--to "Node_B"`},
		{[]string{"migrate", "cart", "-n", "shop", "--to", "node-b", "--mode", "Teleport"}, true, `--mode "Teleport"`},
		{[]string{"migrate", "cart", "-n", "shop", "--to", "node-b", "--mode", "Lazy"}, true, "--mode Lazy moves the pod's memory"},
		{[]string{"migrate", "-n", "shop", "--to", "node-b"}, true, "one POD"},
		{[]string{"checkpoint"}, true, "one POD"},
		{[]string{"checkpoint", "Bad_Pod", "-n", "shop"}, true, "pod \"Bad_Pod\""},
		{[]string{"get", "-n", "Not-A-Namespace!"}, true, "namespace"},
		{[]string{"restore", "nope", "-n", "shop"}, false, "not found"},
		{[]string{"checkpoint", "cart", "-n", "shop", "--timeout", "soon"}, true, "invalid value"},
	} {
		out, err := run(tt.args...)
		if err == nil || IsUsage(err) != tt.usage || !strings.Contains(err.Error()+out, tt.want) {
			t.Errorf("kubectl nodeshim %v: %v (usage %v)\n%s\nwant an error with %q, usage %v", tt.args, err, IsUsage(err), out, tt.want, tt.usage)
		}
	}
	// A restore of a checkpoint that is not stored is refused.
	if _, err := run("checkpoint", "ghost", "-n", "shop", "--name", "ghost-1", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("restore", "ghost-1", "-n", "shop"); err == nil || !strings.Contains(err.Error(), "not Stored") {
		t.Errorf("restore of a pending checkpoint: %v", err)
	}
	if _, err := admin.CoreV1().Pods("shop").Get(ctx, "ghost-1-restored", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Pod was made for a pending checkpoint: %v", err)
	}

	testMigrate(t, c, run)
}

// testMigrate: `migrate` creates the PodMigration a user asks for and,
// waiting, prints each step the controller records until the pod runs on
// the target, or fails with the failed step's reason. The test writes the
// status as the controller would (cluster/migration's TestPodMigrations
// runs the real one, with the reporters and shims).
func testMigrate(t *testing.T, c *kubetest.Cluster, run func(args ...string) (string, error)) {
	ctx := context.Background()
	api, err := kubeapi.ForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	out, err := run("migrate", "cart", "-n", "shop", "--to", "node-b", "--delete-original", "--wait=false")
	if err != nil || !strings.Contains(out, "podmigration.nodeshim.io/cart-move-1800000000 created") {
		t.Fatalf("migrate --wait=false: %v\n%s", err, out)
	}
	m, err := api.GetPodMigration(ctx, "shop", "cart-move-1800000000")
	if err != nil {
		t.Fatal(err)
	}
	if sp := m.Spec; sp.PodName != "cart" || sp.TargetNode != "node-b" || !sp.DeleteOriginal || sp.Mode != v1alpha1.ModeStopAndCopy || sp.NodeSelector != nil {
		t.Errorf("spec %+v", sp)
	}

	// step writes the next status of ns/name once the plugin has seen the
	// last (it prints each change).
	step := func(name string, phase v1alpha1.MigrationPhase, conds ...condition.Condition) {
		t.Helper()
		testutil.Eventually(t, "PodMigration "+name+" "+string(phase), func() error {
			m, err := api.GetPodMigration(ctx, "shop", name)
			if err != nil {
				return err
			}
			m.Status.Phase, m.Status.SourceNode, m.Status.TargetNode = phase, "node-a", "node-b"
			if phase == v1alpha1.MigrationSucceeded {
				m.Status.RestoredPod, m.Status.Downtime = "cart-3f2a9", &metav1.Duration{Duration: 1500 * time.Millisecond}
			}
			m.SetConditions(time.Now(), conds...)
			_, err = api.UpdatePodMigrationStatus(ctx, m, "test")
			return err
		})
		time.Sleep(150 * time.Millisecond) // three of the plugin's polls
	}
	type result struct {
		out string
		err error
	}
	follow := func(name string, args ...string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			out, err := run(append([]string{"migrate", "cart", "-n", "shop", "--name", name}, args...)...)
			ch <- result{out, err}
		}()
		testutil.Eventually(t, "PodMigration "+name+" created", func() error {
			_, err := api.GetPodMigration(ctx, "shop", name)
			return err
		})
		return ch
	}
	progress := func(typ, reason, msg string) condition.Condition {
		return condition.Condition{Type: typ, Status: condition.False, Severity: condition.SeverityInfo, Reason: reason, Message: msg}
	}
	ok := func(typ, reason, msg string) condition.Condition {
		return condition.Condition{Type: typ, Status: condition.True, Reason: reason, Message: msg}
	}

	done := follow("move-web", "--selector", "pool=spare")
	step("move-web", v1alpha1.MigrationCheckpointing, progress(v1alpha1.ConditionCheckpointed, "Checkpointing", "pod checkpoint move-web asked of node node-a"))
	step("move-web", v1alpha1.MigrationTransferring, ok(v1alpha1.ConditionCheckpointed, "Checkpointed", "pod checkpoint c stored on node node-a"),
		progress(v1alpha1.ConditionTransferred, v1alpha1.ReasonTransferring, "sending c from node node-a to node node-b"))
	step("move-web", v1alpha1.MigrationRestoring, ok(v1alpha1.ConditionTransferred, v1alpha1.ReasonTransferred, "c stored on node node-b"),
		progress(v1alpha1.ConditionRestored, "Restoring", "pod cart-3f2a9 created on node node-b"))
	step("move-web", v1alpha1.MigrationSucceeded, ok(v1alpha1.ConditionRestored, "Restored", "pod cart-3f2a9 runs on node node-b"))
	r := <-done
	if r.err != nil {
		t.Fatalf("migrate: %v\n%s", r.err, r.out)
	}
	for _, want := range []string{"Pending\t", "Checkpointing\tpod checkpoint move-web asked of node node-a", "Transferring\tsending c from node node-a to node node-b",
		"Restoring\tpod cart-3f2a9 created on node node-b", "Succeeded\tpod cart-3f2a9 runs on node node-b",
		"pod shop/cart runs on node node-b as cart-3f2a9; downtime 1.5s"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("migrate printed\n%s\nwant %q", r.out, want)
		}
	}
	if m, err := api.GetPodMigration(ctx, "shop", "move-web"); err != nil || m.Spec.NodeSelector["pool"] != "spare" || m.Spec.TargetNode != "" {
		t.Errorf("move-web: %v %+v", err, m.Spec)
	}

	done = follow("move-refused", "--to", "node-b")
	step("move-refused", v1alpha1.MigrationFailed, condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.False,
		Severity: condition.SeverityError, Reason: v1alpha1.ReasonTransferFailed, Message: "send c from node node-a to node node-b: 403"})
	r = <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "PodMigration shop/move-refused failed: TransferFailed: send c from node node-a to node node-b: 403") {
		t.Errorf("a failed migration: %v\n%s", r.err, r.out)
	}
}
