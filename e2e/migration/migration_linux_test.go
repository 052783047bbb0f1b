// Package migration_test moves pods between the two nodes of
// testenv/migrationtest: this machine's node and a second one with its own
// network namespace, containerd 2.x and kubelet, each with nodeshim as it
// ships (serve, reporter, the restoring RuntimeClass), one controller, and
// `kubectl nodeshim migrate`.
package migration_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/migrationtest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// bins holds the binaries TestMain builds (migrationtest.Build).
var bins string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeshim-migration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins = dir
	if err := migrationtest.Build(bins); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestPodMigrations runs the moves below on one two-node cluster.
func TestPodMigrations(t *testing.T) {
	p := migrationtest.Start(t, bins)
	t.Run("moved between nodes", func(t *testing.T) { testPodMovedBetweenNodes(t, p, v1alpha1.ModeStopAndCopy) })
	t.Run("moved lazily between nodes", func(t *testing.T) { testPodMovedBetweenNodes(t, p, v1alpha1.ModeLazy) })
	t.Run("source's shim killed mid-checkpoint", func(t *testing.T) { testSourceKilled(t, p) })
	t.Run("target's shim killed mid-transfer", func(t *testing.T) { testTargetKilled(t, p) })
	t.Run("target's key not the source's to encrypt to", func(t *testing.T) { testTargetKeyRefused(t, p) })
}

// testPodMovedBetweenNodes: a two-container Pod with counters runs on
// this machine's node; `kubectl nodeshim migrate` moves it to the second
// node. The source's serve takes the pod checkpoint, signs it and sends
// it encrypted to the target's key over mutual TLS from one network
// namespace to the other; the target's serve checks and stores it; the
// controller creates the restored Pod under the RuntimeClass, which the
// target's kubelet runs with both containers' tokens kept and counters
// going on; the original is gone. Deleting the PodMigration removes the
// checkpoint's files from both nodes.
//
// Lazy: the pod checkpoint holds no memory; the source keeps the pod
// frozen and serves each container's memory from a page server over
// mutual TLS, which the restoring RuntimeClass on the target fetches from
// as the restored pod runs; the original's containers end once it is
// fetched.
func testPodMovedBetweenNodes(t *testing.T, p *migrationtest.Pair, mode v1alpha1.MigrationMode) {
	ctx := t.Context()
	src, dst := p.Source, p.Target
	mname := "shop-move-" + strings.ToLower(string(mode))

	orig := migrationtest.CounterPod("shop-"+strings.ToLower(string(mode)), src.Name)
	p.RunPod(t, orig)
	var tokens []string
	var before []int
	for _, ctr := range migrationtest.Containers {
		tokens = append(tokens, p.Cluster.ReadFile(t, orig.Name, ctr, "/token"))
		before = append(before, p.Cluster.Count(t, orig.Name, ctr, 5))
	}
	var out bytes.Buffer
	if err := kubectl.Run(ctx, []string{"migrate", orig.Name, "--to", dst.Name, "--delete-original", "--name", mname, "--mode", string(mode)},
		kubectl.Env{Stdout: &out, Stderr: &out, Config: p.Cluster.API.AdminConfig(), Namespace: "default", Poll: 100 * time.Millisecond}); err != nil {
		t.Fatalf("kubectl nodeshim migrate: %v\n%s\n%s\n%s", err, out.String(), src.Logs(), dst.Logs())
	}
	t.Logf("kubectl nodeshim migrate:\n%s", out.String())
	m, err := p.Admin.GetPodMigration(ctx, "default", mname)
	if err != nil {
		t.Fatal(err)
	}
	restored := m.Status.RestoredPod
	t.Cleanup(func() { clustertest.DeletePod(t, p.Clients, restored) })
	rp, err := p.Clients.CoreV1().Pods("default").Get(ctx, restored, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rp.Spec.NodeName != dst.Name || rp.Spec.RuntimeClassName == nil || *rp.Spec.RuntimeClassName != migrationtest.Handler || rp.Labels["app"] != orig.Name {
		t.Errorf("restored pod %s: node %s, runtime class %v, labels %v", restored, rp.Spec.NodeName, rp.Spec.RuntimeClassName, rp.Labels)
	}
	for i, ctr := range migrationtest.Containers {
		if got := p.TargetNode.ReadFile(t, restored, ctr, "/token"); got != tokens[i] {
			t.Fatalf("%s's token on %s is %q, %q on %s: not restored", ctr, dst.Name, got, tokens[i], src.Name)
		}
		n := p.TargetNode.Count(t, restored, ctr, 0)
		if n < before[i] {
			t.Fatalf("%s counts %d on %s, below the %d seen on %s: not restored", ctr, n, dst.Name, before[i], src.Name)
		}
		t.Logf("%s: token %s; count %d on %s, %d restored on %s, then %d", ctr, tokens[i], before[i], src.Name, n, dst.Name,
			p.TargetNode.Count(t, restored, ctr, n))
	}
	testutil.Eventually(t, "the original pod gone", func() error {
		if _, err := p.Clients.CoreV1().Pods("default").Get(ctx, orig.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s: %v", orig.Name, err)
		}
		return nil
	})
	if m.Status.Downtime == nil {
		t.Errorf("no downtime recorded: %+v", m.Status)
	}
	t.Logf("downtime %v", m.Status.Downtime)

	pc, err := p.Admin.GetPodCheckpoint(ctx, "default", m.Status.PodCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	man, err := pod.ReadManifest(pc.Status.Location)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range man.Containers {
		if lazy := c.PageServer != ""; lazy != (mode == v1alpha1.ModeLazy) || pc.Spec.Lazy != lazy {
			t.Errorf("%s: container %s's page server %q, PodCheckpoint spec.lazy %v", mode, c.Name, c.PageServer, pc.Spec.Lazy)
		}
		t.Logf("%s: archive %s, %d bytes; page server %q", c.Name, c.Archive, c.Size, c.PageServer)
	}

	name := m.Status.Checkpoint
	for _, n := range []*migrationtest.Node{src, dst} {
		if !slices.Contains(n.Checkpoints(t), name) {
			t.Fatalf("%s not on node %s: %v", name, n.Name, n.Checkpoints(t))
		}
	}
	p.DeleteMigration(t, mname)
	// The restored pod outlives the objects: it was made of the
	// checkpoint, and needs it no more.
	if _, err := p.Clients.CoreV1().Pods("default").Get(ctx, restored, metav1.GetOptions{}); err != nil {
		t.Errorf("restored pod %s: %v", restored, err)
	}
}
