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

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/podcheckpoint"
	"github.com/nodeshim/nodeshim/deploy"
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

func (s *nodeShim) CheckpointPod(_ context.Context, ns, pod string, _ time.Duration, _ string) (string, error) {
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
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess} {
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
		{[]string{"migrate", "cart"}, true, "unknown command"},
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
}
