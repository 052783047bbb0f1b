package migration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/cluster/migrationsend"
	"github.com/nodeshim/nodeshim/cluster/podcheckpoint"
	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	shimapi "github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/shim/transfer"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// nodeShim is a source node's shim as the reporter's PodCheckpoint
// handler asks it: the pod checkpoint is written into the node's
// checkpoint directory as the shim lays one out (CRIU's dumps are proven
// in criu/pod and e2e/; the transfer, the API server, the reporter's
// handler and the controller are real here).
type nodeShim struct{ node *transfertest.Node }

func (s nodeShim) CheckpointPodWith(_ context.Context, namespace, pod string, _ client.PodCheckpointOptions) (string, error) {
	name, _ := transfertest.PodCheckpoint(testingTB{}, s.node.Dir, namespace, pod, 256<<10)
	return filepath.Join(s.node.Dir, name), nil
}

func (s nodeShim) RemoveCheckpoint(_ context.Context, name string) error {
	return os.RemoveAll(filepath.Join(s.node.Dir, name))
}

// testingTB lets the fixture writer run outside a test's goroutine: it
// panics on failure, which the test then sees as the handler's.
type testingTB struct{ testing.TB }

func (testingTB) Helper()                   {}
func (testingTB) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (testingTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

type env struct {
	*kubetest.Cluster
	admin    kubernetes.Interface
	adminAPI *kubeapi.Client
	nodes    map[string]*transfertest.Node
	// cut counts the streams node-h hung up on.
	cut *atomic.Int32
}

func manifest(t *testing.T, path string) []byte {
	t.Helper()
	b, err := deploy.Manifests.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPodMigrations runs the controller as its ServiceAccount (deploy/'s
// RBAC with rbac-podmigration.yaml) and the source node's reporter
// handler as the reporters' against a real API server, with nodes' shims
// that receive over mutual TLS on loopback.
func TestPodMigrations(t *testing.T) {
	testutil.RequireRoot(t)
	e := &env{Cluster: kubetest.Start(t), nodes: map[string]*transfertest.Node{}}
	e.admin = e.AdminClient(t)
	var err error
	if e.adminAPI, err = kubeapi.ForConfig(e.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess, deploy.ControllerAccess} {
		b, err := m()
		if err != nil {
			t.Fatal(err)
		}
		e.MustApply(t, b)
	}
	e.MustApply(t, manifest(t, "crd-podmigration.yaml"))
	e.MustApply(t, manifest(t, "rbac-podmigration.yaml"))
	rc, err := os.ReadFile("../../deploy/runtimeclass/runtimeclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e.MustApply(t, rc)
	reporterAPI, err := kubeapi.ForConfig(e.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter"))
	if err != nil {
		t.Fatal(err)
	}
	controllerAPI, err := kubeapi.ForConfig(e.ServiceAccountConfig(t, "nodeshim-controller", "nodeshim-controller"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "PodMigrations listed as the controller", func() error {
		_, err := controllerAPI.ListPodMigrations(context.Background(), metav1.ListOptions{})
		return err
	})

	// The nodes: a and b can do everything but b pre-copy; c lacks the
	// restoring RuntimeClass; e does not trust a.
	root := t.TempDir()
	ca := transfertest.NewCA(t, root, "cluster-ca")
	capable := map[string]string{v1alpha1.LabelCRIU: "true", v1alpha1.LabelRestoreRuntimeClass: "true", v1alpha1.LabelArch: "amd64",
		v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "true", v1alpha1.LabelPreCopy: "true"}
	with := func(extra map[string]string, drop ...string) map[string]string {
		out := map[string]string{}
		for k, v := range capable {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	for name, labels := range map[string]map[string]string{
		"node-a": capable,
		"node-b": with(map[string]string{"pool": "spare", v1alpha1.LabelPreCopy: "false"}),
		"node-c": with(map[string]string{"pool": "spare"}, v1alpha1.LabelRestoreRuntimeClass),
		"node-e": capable,
		"node-h": capable,
	} {
		if _, err := e.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.nodes[name] = transfertest.NewNode(t, root, ca, name)
	}
	a := e.nodes["node-a"]
	for _, name := range []string{"node-b", "node-c"} {
		n := e.nodes[name]
		recv, err := transfer.NewReceiver(transfer.ReceiverOptions{Dir: n.Dir, Open: n.Trusting(t, a)})
		if err != nil {
			t.Fatal(err)
		}
		n.Serve(t, recv, nil)
	}
	untrusting, err := transfer.NewReceiver(transfer.ReceiverOptions{Dir: e.nodes["node-e"].Dir, Open: e.nodes["node-e"].Trusting(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.nodes["node-e"].Serve(t, untrusting, nil)
	// node-h hangs up in the middle of every stream.
	e.cut = &atomic.Int32{}
	e.nodes["node-h"].Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(io.Discard, r.Body, 16<<10)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		e.cut.Add(1)
	}), nil)
	// The receivers' reporters publish where and to which key to send.
	for _, name := range []string{"node-b", "node-c", "node-e"} {
		e.receives(t, e.nodes[name])
	}

	h, err := podcheckpoint.New(podcheckpoint.Options{NodeName: "node-a", API: reporterAPI, Shim: nodeShim{a}, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, h.Run)
	// node-a's reporter sends through its shim's node socket (the route
	// and access a reporter has), the shim with node-a's certificate and
	// signing key, to the recipients of its configuration.
	snd, err := migrationsend.New(migrationsend.Options{NodeName: "node-a", API: reporterAPI,
		Shim: migrationsend.SocketShim{C: sendingShim(t, a, e.nodes["node-b"], e.nodes["node-c"], e.nodes["node-e"], e.nodes["node-h"])}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, snd.Run)
	c, err := New(Options{API: controllerAPI, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c.Run)

	// node-g could take any pod, but is cordoned.
	if _, err := e.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-g", Labels: capable},
		Spec: corev1.NodeSpec{Unschedulable: true}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("refused before anything is frozen", func(t *testing.T) { testRefused(t, e) })
	t.Run("moved to the node the selector allows", func(t *testing.T) { testMoved(t, e) })
	t.Run("target refuses the transfer", func(t *testing.T) { testTransferRefused(t, e) })
	t.Run("a lazy migration keeps no original", func(t *testing.T) { testLazyNeedsDeleteOriginal(t, e) })
	t.Run("a lazy migration refused gives the pod back", func(t *testing.T) { testLazyTransferRefused(t, e) })
	t.Run("target receives no transfers", func(t *testing.T) { testTargetReceivesNone(t, e, capable) })
	t.Run("target lost mid-transfer", func(t *testing.T) { testTargetLost(t, e) })
	t.Run("source restarted mid-checkpoint", func(t *testing.T) { testSourceRestarted(t, e, reporterAPI, capable) })
	t.Run("drain moves the annotated pods and evicts the rest", func(t *testing.T) { testDrain(t, e) })
	// Last, with the controller above stopped: each subtest runs its own.
	stop()
	t.Run("every grant needed", func(t *testing.T) { testEveryGrantNeeded(t, e) })
	t.Run("steps that time out", func(t *testing.T) { testTimeouts(t, e, controllerAPI) })
}

// run runs f until t ends or the returned stop is called; an error of
// f's but its context's end fails t.
func run(t *testing.T, f func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// testTimeouts: a source node whose reporter never stores the checkpoint,
// and a restored pod that never runs, fail the migration after their
// bound; the original runs on, and the restored pod is deleted.
func testTimeouts(t *testing.T, e *env, api API) {
	runFor := func(t *testing.T, o Options, until func() error, what string) {
		t.Helper()
		o.API, o.Interval = api, 50*time.Millisecond
		c, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		defer run(t, c.Run)()
		testutil.Eventually(t, what, until)
	}
	failed := func(name string) func() error {
		return func() error {
			if m := e.get(t, "late", name); m.Status.Phase != v1alpha1.MigrationFailed {
				return fmt.Errorf("phase %q", m.Status.Phase)
			}
			return nil
		}
	}
	if _, err := e.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x", Labels: map[string]string{
		v1alpha1.LabelCRIU: "true", v1alpha1.LabelArch: "amd64"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "late", "batch", "node-x")
	e.migrate(t, "late", "no-reporter", v1alpha1.PodMigrationSpec{PodName: "batch", TargetNode: "node-b"})
	runFor(t, Options{CheckpointTimeout: time.Second}, failed("no-reporter"), "no-reporter failed")
	m := e.get(t, "late", "no-reporter")
	if ck := cond(t, m, v1alpha1.ConditionCheckpointed); ck.Reason != ReasonTimeout || !strings.Contains(ck.Message, "not stored on node node-x") {
		t.Errorf("Checkpointed %+v", ck)
	}

	// A pod that already holds the restored pod's name is never taken for
	// it, nor is the original deleted.
	e.pod(t, "late", "cash", "node-a")
	e.migrate(t, "late", "squatted", v1alpha1.PodMigrationSpec{PodName: "cash", TargetNode: "node-b", DeleteOriginal: true})
	squat := e.pod(t, "late", RestoredName(e.get(t, "late", "squatted")), "node-b")
	runFor(t, Options{}, failed("squatted"), "squatted failed")
	if r := cond(t, e.get(t, "late", "squatted"), v1alpha1.ConditionRestored); r.Reason != ReasonRestoreFailed || !strings.Contains(r.Message, "is not this migration's") {
		t.Errorf("Restored %+v", r)
	}
	for _, name := range []string{"cash", squat.Name} {
		if p, err := e.admin.CoreV1().Pods("late").Get(context.Background(), name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("pod %s: %v, deleting %v", name, err, p.DeletionTimestamp)
		}
	}

	e.pod(t, "late", "shop", "node-a")
	e.migrate(t, "late", "never-runs", v1alpha1.PodMigrationSpec{PodName: "shop", TargetNode: "node-b", DeleteOriginal: true})
	runFor(t, Options{RestoreTimeout: time.Second}, failed("never-runs"), "never-runs failed")
	m = e.get(t, "late", "never-runs")
	if r := cond(t, m, v1alpha1.ConditionRestored); r.Reason != ReasonTimeout || !strings.Contains(r.Message, "it was deleted, the original runs on") {
		t.Errorf("Restored %+v", r)
	}
	p, err := e.admin.CoreV1().Pods("late").Get(context.Background(), m.Status.RestoredPod, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the restored pod that never ran is still there")
	}
	if p, err := e.admin.CoreV1().Pods("late").Get(context.Background(), "shop", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the original: %v, deleting %v", err, p.DeletionTimestamp)
	}
}

// receives labels n's Node as its reporter does when n's shim receives
// transfers (reporter.TransferLabels of its GET /transfers), and gives it
// the InternalIP of its listener, as its kubelet would.
func (e *env) receives(t *testing.T, n *transfertest.Node) {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	in, err := transfer.NewInfo(u.Host, identities(t, n))
	if err != nil || in.Port != port {
		t.Fatalf("transfer info of %s: %+v, %v", n.Name, in, err)
	}
	node, err := e.admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(node.Labels, reporter.TransferLabels(&in))
	if node, err = e.admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: u.Hostname()}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func identities(t *testing.T, n *transfertest.Node) []age.Identity {
	t.Helper()
	ids, err := seal.LoadIdentities([]string{n.Keys.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// sendingShim serves node src's node API on a unix socket, as serve does
// with checkpoint.transfer.send: its send route with src's certificate,
// CA and signing key, and the recipients of to as its configured ones, to
// a caller with the reporter's access. It returns a client of it.
func sendingShim(t *testing.T, src *transfertest.Node, to ...*transfertest.Node) *client.Client {
	t.Helper()
	key, err := seal.LoadSigningKey(src.Keys.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	for _, n := range to {
		specs = append(specs, n.Keys.Recipient)
	}
	recs, err := seal.ParseRecipients(specs)
	if err != nil {
		t.Fatal(err)
	}
	o := transfer.SenderOptions{Dir: src.Dir, CertFile: src.CertFile, KeyFile: src.KeyFile, CAFile: src.CAFile,
		Signer: &seal.Signer{Node: src.Name, Key: key}, Recipients: recs}
	sock := filepath.Join(t.TempDir(), "nodeshim.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: shimapi.NewHandler(status.New(nil), shimapi.Options{
		Auth:   func(*http.Request) (shimapi.Access, string) { return shimapi.PodCheckpoints, "reporter" },
		Send:   transfer.SendHandler(func() (transfer.SenderOptions, error) { return o, nil }),
		Logger: slog.New(slog.DiscardHandler)})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	c := client.New(sock)
	t.Cleanup(c.Close)
	return c
}

// pod creates a running pod of ns on node, as kubelet would report it.
func (e *env) pod(t *testing.T, ns, name, node string, owners ...metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := e.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p, err := e.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}, OwnerReferences: owners},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.running(t, p)
	return p
}

// running reports p Running, as its node's kubelet would.
func (e *env) running(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p, err := e.admin.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := e.admin.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) migrate(t *testing.T, ns, name string, spec v1alpha1.PodMigrationSpec) {
	t.Helper()
	if _, err := e.adminAPI.CreatePodMigration(context.Background(), &v1alpha1.PodMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}, "test"); err != nil {
		t.Fatal(err)
	}
}

// wait returns the PodMigration once its phase is phase.
func (e *env) wait(t *testing.T, ns, name string, phase v1alpha1.MigrationPhase) *v1alpha1.PodMigration {
	t.Helper()
	var m *v1alpha1.PodMigration
	testutil.Eventually(t, fmt.Sprintf("PodMigration %s/%s %s", ns, name, phase), func() error {
		l, err := e.adminAPI.ListPodMigrations(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range l.Items {
			if l.Items[i].Namespace == ns && l.Items[i].Name == name {
				m = &l.Items[i]
			}
		}
		if m == nil || m.Status.Phase != phase {
			if m != nil && m.Status.Phase == v1alpha1.MigrationFailed {
				t.Fatalf("PodMigration %s failed: %+v", name, m.Status.Conditions)
			}
			return fmt.Errorf("not yet: %+v", m)
		}
		return nil
	})
	return m
}

func cond(t *testing.T, m *v1alpha1.PodMigration, typ string) condition.Condition {
	t.Helper()
	c, ok := find(m.Status.Conditions, typ)
	if !ok {
		t.Fatalf("no %s condition: %+v", typ, m.Status.Conditions)
	}
	return c
}

func testRefused(t *testing.T, e *env) {
	e.pod(t, "shop", "cart", "node-a")
	sts := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "u-db", Controller: ptr.To(true)}
	e.pod(t, "shop", "db-0", "node-a", sts)
	// A user's own PodCheckpoint of the name a migration would give its
	// own: the migration must not take it for its checkpoint.
	if _, err := e.adminAPI.CreatePodCheckpoint(context.Background(), &v1alpha1.PodCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "taken"},
		Spec: v1alpha1.PodCheckpointSpec{PodName: "cart"}}, "test"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name         string
		spec         v1alpha1.PodMigrationSpec
		reason, says string
	}{
		{"no-runtimeclass", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-c"}, ReasonTargetNotCapable,
			"node node-c lacks " + v1alpha1.LabelRestoreRuntimeClass + "=true (absent)"},
		{"no-pre-copy", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-b", Mode: v1alpha1.ModePreCopy}, ReasonTargetNotCapable,
			"node node-b lacks " + v1alpha1.LabelPreCopy + "=true (is false)"},
		{"pre-copy-not-built", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-e", Mode: v1alpha1.ModePreCopy}, ReasonModeNotBuilt,
			"PreCopy migration is not built yet"},
		{"same-node", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-a"}, ReasonTargetNotCapable, "node-a is the pod's node"},
		{"cordoned", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-g"}, ReasonTargetNotCapable, "node node-g is cordoned"},
		{"statefulset", v1alpha1.PodMigrationSpec{PodName: "db-0", TargetNode: "node-b"}, ReasonOwnedBy, "StatefulSet db's"},
		{"no-pod", v1alpha1.PodMigrationSpec{PodName: "gone", TargetNode: "node-b"}, ReasonPodNotFound, "does not exist"},
		{"taken", v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-b"}, ReasonCheckpointFailed, "exists and is not this migration's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.migrate(t, "shop", tt.name, tt.spec)
			m := e.wait(t, "shop", tt.name, v1alpha1.MigrationFailed)
			ck := cond(t, m, v1alpha1.ConditionCheckpointed)
			if ck.Status != condition.False || ck.Reason != tt.reason || !strings.Contains(ck.Message, tt.says) {
				t.Fatalf("Checkpointed %s %s %q, want False %s saying %q", ck.Status, ck.Reason, ck.Message, tt.reason, tt.says)
			}
			if r := cond(t, m, v1alpha1.ConditionReady); r.Status != condition.False {
				t.Errorf("Ready %+v", r)
			}
			// Nothing was frozen: no PodCheckpoint was made.
			if pc, err := e.adminAPI.GetPodCheckpoint(context.Background(), "shop", tt.name); tt.name != "taken" && !apierrors.IsNotFound(err) {
				t.Errorf("a PodCheckpoint exists for a refused migration: %v", err)
			} else if tt.name == "taken" && (err != nil || len(pc.OwnerReferences) != 0) {
				t.Errorf("the user's PodCheckpoint: %v %+v", err, pc)
			}
		})
	}
}

// testLazyNeedsDeleteOriginal: the API server refuses a Lazy migration
// that would keep the original, whose containers end once their memory
// is fetched.
func testLazyNeedsDeleteOriginal(t *testing.T, e *env) {
	_, err := e.adminAPI.CreatePodMigration(context.Background(), &v1alpha1.PodMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "lazy-keeps"},
		Spec:       v1alpha1.PodMigrationSpec{PodName: "cart", TargetNode: "node-b", Mode: v1alpha1.ModeLazy}}, "test")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "set deleteOriginal") {
		t.Fatalf("create a Lazy PodMigration without deleteOriginal: %v, want Invalid saying to set deleteOriginal", err)
	}
}

// testLazyTransferRefused: a Lazy migration whose target refuses the
// transfer fails, and its lazy PodCheckpoint is deleted at once, so that
// the source node gives the frozen pod back without waiting for the
// checkpoint's timeout.
func testLazyTransferRefused(t *testing.T, e *env) {
	e.pod(t, "store", "lazy-api", "node-a")
	e.migrate(t, "store", "lazy-api", v1alpha1.PodMigrationSpec{PodName: "lazy-api", TargetNode: "node-e", Mode: v1alpha1.ModeLazy, DeleteOriginal: true})
	m := e.wait(t, "store", "lazy-api", v1alpha1.MigrationFailed)
	if tr := cond(t, m, v1alpha1.ConditionTransferred); tr.Status != condition.False || tr.Reason != ReasonTransferFailed {
		t.Fatalf("Transferred %+v, want False TransferFailed", tr)
	}
	testutil.Eventually(t, "the lazy PodCheckpoint is deleted", func() error {
		pc, err := e.adminAPI.GetPodCheckpoint(context.Background(), "store", m.Status.PodCheckpoint)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil && !pc.Spec.Lazy {
			t.Fatalf("the migration's PodCheckpoint is not lazy: %+v", pc.Spec)
		}
		return fmt.Errorf("still there: %v", err)
	})
	if p, err := e.admin.CoreV1().Pods("store").Get(context.Background(), "lazy-api", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("original pod %v (%v)", p, err)
	}
}

func testMoved(t *testing.T, e *env) {
	orig := e.pod(t, "store", "web", "node-a")
	e.migrate(t, "store", "move-web", v1alpha1.PodMigrationSpec{PodName: "web", NodeSelector: map[string]string{"pool": "spare"}, DeleteOriginal: true})
	m := e.wait(t, "store", "move-web", v1alpha1.MigrationRestoring)
	if m.Status.SourceNode != "node-a" || m.Status.TargetNode != "node-b" || m.Status.PodUID != string(orig.UID) {
		t.Fatalf("status %+v: want node-a to node-b (node-c lacks the RuntimeClass)", m.Status)
	}
	for _, typ := range []string{v1alpha1.ConditionCheckpointed, v1alpha1.ConditionTransferred} {
		if c := cond(t, m, typ); c.Status != condition.True {
			t.Errorf("%s %+v", typ, c)
		}
	}
	// The checkpoint is on node-b, in its checkpoint directory, as sent.
	b := e.nodes["node-b"]
	for _, f := range []string{"manifest.json", "checkpoint-web_store-app-2026-11-28T04:00:00Z.tar"} {
		want, err := os.ReadFile(filepath.Join(e.nodes["node-a"].Dir, m.Status.Checkpoint, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.Dir, m.Status.Checkpoint, f))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s on node-b: %d bytes (%v), want the %d of node-a", f, len(got), err, len(want))
		}
	}
	p, err := e.admin.CoreV1().Pods("store").Get(context.Background(), m.Status.RestoredPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "node-b" || ptr.Deref(p.Spec.RuntimeClassName, "") != RuntimeClass || p.Spec.Hostname != "web" ||
		p.Annotations[kubectl.AnnotationCheckpoint] != m.Status.Checkpoint || p.Annotations[v1alpha1.AnnotationMigration] != "move-web" ||
		p.Labels["app"] != "web" || p.Name != RestoredName(m) {
		t.Fatalf("restored pod %s: node %s, runtime class %v, hostname %s, annotations %v, labels %v", p.Name, p.Spec.NodeName,
			p.Spec.RuntimeClassName, p.Spec.Hostname, p.Annotations, p.Labels)
	}
	// The original runs until the restored pod does.
	if _, err := e.admin.CoreV1().Pods("store").Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("the original is gone before the restored pod runs: %v", err)
	}
	e.running(t, p)
	m = e.wait(t, "store", "move-web", v1alpha1.MigrationSucceeded)
	if c := cond(t, m, v1alpha1.ConditionRestored); c.Status != condition.True || c.Reason != ReasonRestored {
		t.Errorf("Restored %+v", c)
	}
	if r := cond(t, m, v1alpha1.ConditionReady); r.Status != condition.True {
		t.Errorf("Ready %+v", r)
	}
	if m.Status.Downtime == nil || m.Status.Downtime.Duration <= 0 || m.Status.CompletionTime == nil {
		t.Errorf("downtime %v, completion %v", m.Status.Downtime, m.Status.CompletionTime)
	}
	t.Logf("downtime %v (the checkpoint's start to the restored pod seen running; no kubelet runs here)", m.Status.Downtime.Duration)
	// A bound pod is deleted gracefully: the API server marks it, and its
	// kubelet (none runs here) stops it and removes the object.
	testutil.Eventually(t, "the original pod deleted", func() error {
		p, err := e.admin.CoreV1().Pods("store").Get(context.Background(), "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			return nil
		}
		return fmt.Errorf("not deleted: %v", err)
	})
}

func testTransferRefused(t *testing.T, e *env) {
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "api-7d9", UID: "u-rs", Controller: ptr.To(true)}
	e.pod(t, "store", "api", "node-a", rs)
	e.migrate(t, "store", "move-api", v1alpha1.PodMigrationSpec{PodName: "api", TargetNode: "node-e", DeleteOriginal: true})
	var m *v1alpha1.PodMigration
	testutil.Eventually(t, "PodMigration move-api failed", func() error {
		l, err := e.adminAPI.ListPodMigrations(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range l.Items {
			if l.Items[i].Name == "move-api" && l.Items[i].Status.Phase == v1alpha1.MigrationFailed {
				m = &l.Items[i]
				return nil
			}
		}
		return errors.New("not yet")
	})
	tr := cond(t, m, v1alpha1.ConditionTransferred)
	if tr.Status != condition.False || tr.Reason != ReasonTransferFailed || !strings.Contains(tr.Message, "403") {
		t.Fatalf("Transferred %+v, want False TransferFailed with the target's 403", tr)
	}
	if c := cond(t, m, v1alpha1.ConditionCheckpointed); c.Status != condition.True {
		t.Errorf("Checkpointed %+v", c)
	}
	// The original runs on, untouched; nothing was restored, and node-e
	// keeps nothing of the refused transfer.
	p, err := e.admin.CoreV1().Pods("store").Get(context.Background(), "api", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning || p.Annotations[AnnotationDeletionCost] != "" {
		t.Fatalf("original pod %v (%v)", p, err)
	}
	if _, err := e.admin.CoreV1().Pods("store").Get(context.Background(), RestoredName(m), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restored pod exists: %v", err)
	}
	if ents, _ := os.ReadDir(e.nodes["node-e"].Dir); len(ents) > 0 {
		t.Errorf("node-e kept %v", ents)
	}
}

// testTargetReceivesNone: a capable target whose reporter publishes no
// transfer labels (its shim does not receive) fails the step with the
// reason, before a byte is sent; the original runs on.
func testTargetReceivesNone(t *testing.T, e *env, labels map[string]string) {
	if _, err := e.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-f", Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "store", "cron", "node-a")
	e.migrate(t, "store", "move-cron", v1alpha1.PodMigrationSpec{PodName: "cron", TargetNode: "node-f"})
	testutil.Eventually(t, "PodMigration move-cron failed", func() error {
		if m := e.get(t, "store", "move-cron"); m.Status.Phase != v1alpha1.MigrationFailed {
			return fmt.Errorf("phase %q", m.Status.Phase)
		}
		return nil
	})
	tr := cond(t, e.get(t, "store", "move-cron"), v1alpha1.ConditionTransferred)
	if tr.Reason != ReasonTransferFailed || !strings.Contains(tr.Message, "node node-f receives no transfers") {
		t.Fatalf("Transferred %+v", tr)
	}
	if p, err := e.admin.CoreV1().Pods("store").Get(context.Background(), "cron", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the original: %v", err)
	}
}

// testTargetLost: a target whose shim goes away in the middle of the
// stream (node-h hangs up after the first bytes, as a node that dies or
// loses its network does) fails the step with the cut; the original pod
// runs on and no restored pod is made.
func testTargetLost(t *testing.T, e *env) {
	ctx := context.Background()
	e.receives(t, e.nodes["node-h"])
	e.pod(t, "store", "queue", "node-a")
	e.migrate(t, "store", "move-queue", v1alpha1.PodMigrationSpec{PodName: "queue", TargetNode: "node-h", DeleteOriginal: true})
	testutil.Eventually(t, "PodMigration move-queue failed", func() error {
		if m := e.get(t, "store", "move-queue"); m.Status.Phase != v1alpha1.MigrationFailed {
			return fmt.Errorf("phase %q", m.Status.Phase)
		}
		return nil
	})
	m := e.get(t, "store", "move-queue")
	tr := cond(t, m, v1alpha1.ConditionTransferred)
	if tr.Reason != ReasonTransferFailed || !strings.Contains(tr.Message, "send "+m.Status.Checkpoint+" from node node-a to node node-h") || e.cut.Load() == 0 {
		t.Fatalf("Transferred %+v (%d streams cut)", tr, e.cut.Load())
	}
	t.Logf("Transferred: %s", tr.Message)
	if p, err := e.admin.CoreV1().Pods("store").Get(ctx, "queue", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the original: %v", err)
	}
	if _, err := e.admin.CoreV1().Pods("store").Get(ctx, RestoredName(m), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restored pod exists: %v", err)
	}
}

// blockedShim is a source node's shim whose pod checkpoint runs until its
// caller gives up: the reporter is stopped in the middle of it.
type blockedShim struct{ started chan struct{} }

func (s blockedShim) CheckpointPodWith(ctx context.Context, _, _ string, _ client.PodCheckpointOptions) (string, error) {
	close(s.started)
	<-ctx.Done()
	return "", ctx.Err()
}

func (blockedShim) RemoveCheckpoint(context.Context, string) error { return nil }

// testSourceRestarted: node-s's reporter is stopped while its shim
// checkpoints the pod, and a new one started, as when the DaemonSet's pod
// restarts: the new reporter marks the PodCheckpoint Interrupted (its
// outcome on the node unknown), and the migration fails at that step with
// the original running on and nothing made on the target.
func testSourceRestarted(t *testing.T, e *env, reporterAPI *kubeapi.Client, labels map[string]string) {
	ctx := context.Background()
	if _, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-s", Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shim := blockedShim{started: make(chan struct{})}
	first, err := podcheckpoint.New(podcheckpoint.Options{NodeName: "node-s", API: reporterAPI, Shim: shim, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(fctx) }()
	e.pod(t, "late", "report", "node-s")
	e.migrate(t, "late", "move-report", v1alpha1.PodMigrationSpec{PodName: "report", TargetNode: "node-b", DeleteOriginal: true})
	select {
	case <-shim.started:
	case err := <-firstDone:
		t.Fatalf("node-s's reporter ended before its shim checkpointed: %v", err)
	}
	stopFirst()
	if err := <-firstDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("node-s's first reporter: %v", err)
	}
	second, err := podcheckpoint.New(podcheckpoint.Options{NodeName: "node-s", API: reporterAPI, Shim: nodeShim{e.nodes["node-a"]}, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer run(t, second.Run)()
	testutil.Eventually(t, "PodMigration move-report failed", func() error {
		if m := e.get(t, "late", "move-report"); m.Status.Phase != v1alpha1.MigrationFailed {
			return fmt.Errorf("phase %q", m.Status.Phase)
		}
		return nil
	})
	m := e.get(t, "late", "move-report")
	if ck := cond(t, m, v1alpha1.ConditionCheckpointed); ck.Reason != ReasonCheckpointFailed || !strings.Contains(ck.Message, "failed on node node-s: the reporter restarted during the checkpoint") {
		t.Fatalf("Checkpointed %+v", ck)
	}
	if p, err := e.admin.CoreV1().Pods("late").Get(ctx, "report", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the original: %v", err)
	}
	if _, err := e.admin.CoreV1().Pods("late").Get(ctx, RestoredName(m), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a restored pod exists: %v", err)
	}
}

// testDrain: `kubectl nodeshim drain node-a` cordons node-a, moves its
// annotated pod to node-b with its state through the controller, evicts a
// ReplicaSet's pod once its PodDisruptionBudget allows it (asking again
// while it refuses), and leaves the DaemonSet's pod. The test stands in
// for the nodes' kubelets: the moved pod is reported running, a pod being
// deleted on node-a is removed.
func testDrain(t *testing.T, e *env) {
	ctx := context.Background()
	ledger := e.pod(t, "ops", "ledger", "node-a")
	on := v1alpha1.DrainMigrate
	if err := e.adminAPI.PatchPodAnnotations(ctx, "ops", "ledger", map[string]*string{v1alpha1.AnnotationOnDrain: &on}, "test"); err != nil {
		t.Fatal(err)
	}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "worker-6b8", UID: "u-worker", Controller: ptr.To(true)}
	worker := e.pod(t, "ops", "worker", "node-a", rs)
	ds := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "u-agent", Controller: ptr.To(true)}
	e.pod(t, "ops", "agent", "node-a", ds)
	one := intstr.FromInt32(1)
	if _, err := e.admin.PolicyV1().PodDisruptionBudgets("ops").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "worker"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "worker"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	kctx, stopKubelets := context.WithCancel(ctx)
	kubelets := make(chan struct{})
	kube := e.AdminClient(t) // a client of their own: client-go's rate limit is per client
	go func() {
		defer close(kubelets)
		for kctx.Err() == nil {
			l, err := kube.CoreV1().Pods("").List(kctx, metav1.ListOptions{})
			if err == nil {
				for i := range l.Items {
					p := &l.Items[i]
					switch {
					case p.Spec.NodeName == "node-a" && p.DeletionTimestamp != nil:
						_ = kube.CoreV1().Pods(p.Namespace).Delete(kctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					case p.Namespace == "ops" && p.Spec.NodeName == "node-b" && p.Status.Phase != corev1.PodRunning:
						p.Status.Phase = corev1.PodRunning
						_, _ = kube.CoreV1().Pods(p.Namespace).UpdateStatus(kctx, p, metav1.UpdateOptions{})
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	defer func() { stopKubelets(); <-kubelets }()

	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- kubectl.Run(ctx, []string{"drain", "node-a", "--timeout", "2m"}, kubectl.Env{Stdout: &out, Stderr: &out, Config: e.AdminConfig(), Poll: 50 * time.Millisecond})
	}()
	// The budget refuses the eviction: the drain asks again and waits.
	testutil.Eventually(t, "the migration of ledger done and the drain still waiting on worker", func() error {
		if !strings.Contains(out.String(), "pod/ops/ledger moved to node node-b") {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the drain ended while a PodDisruptionBudget forbids evicting worker: %v\n%s", err, out.String())
	default:
	}
	if p, err := e.admin.CoreV1().Pods("ops").Get(ctx, "worker", metav1.GetOptions{}); err != nil || p.UID != worker.UID || p.DeletionTimestamp != nil {
		t.Fatalf("worker while its budget forbids: %v", err)
	}
	if err := e.admin.PolicyV1().PodDisruptionBudgets("ops").Delete(ctx, "worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("drain: %v\n%s", err, out.String())
	}
	t.Logf("kubectl nodeshim drain node-a:\n%s", out.String())
	for _, want := range []string{"node/node-a cordoned", "pod/ops/agent stays: a DaemonSet's pod", "pod/ops/ledger moving (podmigration.nodeshim.io/ledger-drain-",
		"pod/ops/worker evicting", "pod/ops/worker evicted", "node/node-a drained"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("drain printed\n%s\nwant %q", out.String(), want)
		}
	}
	if n, err := e.admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Errorf("node-a not cordoned: %v", err)
	}
	if _, err := e.admin.CoreV1().Pods("ops").Get(ctx, "agent", metav1.GetOptions{}); err != nil {
		t.Errorf("the DaemonSet's pod: %v", err)
	}
	l, err := e.adminAPI.ListPodMigrations(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var moved *v1alpha1.PodMigration
	for i := range l.Items {
		if l.Items[i].Namespace == "ops" {
			moved = &l.Items[i]
		}
	}
	if moved == nil || moved.Spec.PodName != "ledger" || !moved.Spec.DeleteOriginal || moved.Status.TargetNode != "node-b" || moved.Status.PodUID != string(ledger.UID) {
		t.Fatalf("the drain's PodMigration: %+v", moved)
	}
	if p, err := e.admin.CoreV1().Pods("ops").Get(ctx, moved.Status.RestoredPod, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "node-b" {
		t.Errorf("the moved pod: %v", err)
	}
}

// TestRestoredPodOfAReplicaSet: the restored pod of a ReplicaSet's pod
// carries its owner references, so that the ReplicaSet counts it.
func TestRestoredPodOfAReplicaSet(t *testing.T) {
	rs := metav1.OwnerReference{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "ReplicaSet", Name: "api-7d9", UID: "u-rs", Controller: ptr.To(true)}
	orig := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "store", Name: "api-7d9-x2", UID: "u-pod", OwnerReferences: []metav1.OwnerReference{rs}}}
	m := &v1alpha1.PodMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "store", Name: "m", UID: "0a1b2c3d-0000"},
		Spec: v1alpha1.PodMigrationSpec{PodName: orig.Name}, Status: v1alpha1.PodMigrationStatus{TargetNode: "node-b", Checkpoint: "checkpoint-api-7d9-x2_store-2026-11-28T04:00:00Z"}}
	pc := &v1alpha1.PodCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "store"}, Spec: v1alpha1.PodCheckpointSpec{PodName: orig.Name},
		Status: v1alpha1.PodCheckpointStatus{Pod: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"},
			Annotations: map[string]string{AnnotationDeletionCost: "5"}}}}}
	p := RestoredPod(m, pc, orig)
	if p.Name != "api-7d9-x2-0a1b2" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "u-rs" || p.Spec.NodeName != "node-b" ||
		p.Annotations[AnnotationDeletionCost] != "" || p.Labels["app"] != "api" {
		t.Fatalf("restored pod %+v", p)
	}
	orig.OwnerReferences[0].Kind = "Job"
	if why := ownerRefusal(orig); !strings.Contains(why, "Job api-7d9") {
		t.Errorf("a Job's pod: %q", why)
	}
	if p := RestoredPod(m, pc, nil); len(p.OwnerReferences) != 0 {
		t.Errorf("owners without an original: %v", p.OwnerReferences)
	}
}
