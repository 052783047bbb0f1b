package runtimeclass_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/cluster/podcheckpoint"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestPodCheckpointObjectRestored is the cluster user's story on a
// single-node cluster (kubelet on containerd 2.3.7): `kubectl nodeshim
// checkpoint` makes a PodCheckpoint of a two-container Pod; the node's
// reporter (its PodCheckpoint handler, as the reporters' ServiceAccount)
// asks the node's shim over its socket (the node API with the real
// checkpoint service) for the pod checkpoint; `kubectl nodeshim restore`
// makes a new Pod of it under the RuntimeClass, which kubelet runs with
// both counters going on; `kubectl nodeshim delete` removes the pod
// checkpoint from the node.
func TestPodCheckpointObjectRestored(t *testing.T) {
	env := &clustertest.Env{Containerd2: true, Handlers2: handlers}
	// Registered first, so run last: after the Pods' cleanups.
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	})
	c := env.Cluster(t)
	bin := criutest.Require(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.API.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: handler}, Handler: handler}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess} {
		b, err := m()
		if err != nil {
			t.Fatal(err)
		}
		c.API.MustApply(t, b)
	}

	// The node's shim: the node API on a unix socket with the real
	// checkpoint service.
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: ckptDir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Containerd.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    status.New(nil),
	})
	defer svc.Close()
	sock, err := api.ListenSocket(filepath.Join(t.TempDir(), api.SocketName), 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{Checkpoint: svc}), ConnContext: api.ConnContext}
	go srv.Serve(sock.UnixListener)
	defer srv.Shutdown(context.Background())
	shim := client.New(sock.Path)
	defer shim.Close()

	// The node's reporter, serving PodCheckpoints with the rights
	// deploy/ gives it.
	reporter, err := kubeapi.ForConfig(c.API.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := podcheckpoint.New(podcheckpoint.Options{NodeName: c.NodeName, API: reporter, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("handler: %v", err)
		}
	}()

	plugin := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := kubectl.Run(ctx, args, kubectl.Env{Stdout: &out, Stderr: &out, Config: c.API.AdminConfig(), Namespace: "default", Poll: 100 * time.Millisecond}); err != nil {
			t.Fatalf("kubectl nodeshim %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		t.Logf("kubectl nodeshim %s:\n%s", strings.Join(args, " "), out.String())
		return out.String()
	}
	testutil.Eventually(t, "PodCheckpoints served by the API server", func() error {
		var out bytes.Buffer
		return kubectl.Run(ctx, []string{"get"}, kubectl.Env{Stdout: &out, Stderr: &out, Config: c.API.AdminConfig(), Namespace: "default"})
	})

	orig := counterPod("shop", nil)
	runPod(t, cs, orig)
	var before []int
	for _, ctr := range containers {
		before = append(before, c.Count(t, orig.Name, ctr, 5))
	}
	plugin("checkpoint", orig.Name, "--name", "shop-1")
	admin, err := kubeapi.ForConfig(c.API.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	pc, err := admin.GetPodCheckpoint(ctx, "default", "shop-1")
	if err != nil {
		t.Fatal(err)
	}
	if pc.Status.Phase != v1alpha1.PhaseStored || pc.Status.NodeName != c.NodeName {
		t.Fatalf("PodCheckpoint shop-1: %+v", pc.Status)
	}
	if fi, err := os.Stat(pc.Status.Location); err != nil || !fi.IsDir() || filepath.Dir(pc.Status.Location) != ckptDir {
		t.Fatalf("pod checkpoint %s on the node: %v", pc.Status.Location, err)
	}
	clustertest.DeletePod(t, cs, orig.Name)

	plugin("restore", "shop-1", "--pod", "shop-restored")
	t.Cleanup(func() { clustertest.DeletePod(t, cs, "shop-restored") })
	for i, ctr := range containers {
		n := c.Count(t, "shop-restored", ctr, 0)
		if n < before[i] {
			t.Fatalf("Pod shop-restored's %s counts %d, below the %d seen before the checkpoint: it was not restored", ctr, n, before[i])
		}
		t.Logf("%s: count %d before the checkpoint, %d restored, then %d", ctr, before[i], n, c.Count(t, "shop-restored", ctr, n))
	}

	plugin("delete", "shop-1")
	testutil.Eventually(t, "PodCheckpoint shop-1 gone and its pod checkpoint removed from the node", func() error {
		if _, err := admin.GetPodCheckpoint(ctx, "default", "shop-1"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PodCheckpoint: %v", err)
		}
		if _, err := os.Stat(pc.Status.Location); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %v", pc.Status.Location, err)
		}
		return nil
	})
}
