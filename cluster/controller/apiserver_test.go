package controller

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

// Names from deploy/: the reporters' namespace and ServiceAccount, the
// controller's.
const (
	reporterNamespace   = "nodeshim"
	reporterSA          = "nodeshim-reporter"
	controllerNamespace = "nodeshim-controller"
	controllerSA        = "nodeshim-controller"
)

// Short periods for the tests: the reporter renews every 500 ms, the
// controller marks a node after 3 s without a renewal and looks at every
// node every 500 ms; a standby takes the lead 2 s after a leader vanishes,
// at once after one that steps down.
const (
	testGrace = 3 * time.Second
	testSync  = 500 * time.Millisecond
	testRenew = 500 * time.Millisecond
)

// cluster is a real API server with deploy/'s RBAC for the reporter and the
// controller, each used through its ServiceAccount's token; the controller
// runs on kubeapi's small client, as in the nodeshim binary.
type cluster struct {
	*kubetest.Cluster
	admin, reporter, controller kubernetes.Interface
	controllerAPI               *kubeapi.Client
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{Cluster: kubetest.Start(t)}
	c.admin = c.AdminClient(t)
	for _, access := range []func() ([]byte, error){deploy.ReporterAccess, deploy.ControllerAccess} {
		b, err := access()
		if err != nil {
			t.Fatal(err)
		}
		c.MustApply(t, b)
	}
	var err error
	if c.reporter, err = kubernetes.NewForConfig(c.ServiceAccountConfig(t, reporterNamespace, reporterSA)); err != nil {
		t.Fatal(err)
	}
	controllerCfg := c.ServiceAccountConfig(t, controllerNamespace, controllerSA)
	if c.controller, err = kubernetes.NewForConfig(controllerCfg); err != nil {
		t.Fatal(err)
	}
	if c.controllerAPI, err = kubeapi.ForConfig(controllerCfg); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect through the API server's informers: wait for it
	// (go test's -timeout bounds the wait).
	for {
		_, err := c.controller.CoordinationV1().Leases(reporterNamespace).List(context.Background(), metav1.ListOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// kubeletConditions are what kubelet would have written: nobody else may
// touch them.
func kubeletConditions() []corev1.NodeCondition {
	ts := metav1.NewTime(time.Now().Add(-time.Hour)).Rfc3339Copy()
	return []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: ts, LastTransitionTime: ts},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available", LastHeartbeatTime: ts, LastTransitionTime: ts},
	}
}

// createNode creates a Node with kubelet's conditions; it is deleted when
// t ends, so that the controllers of later tests leave it alone.
func (c *cluster) createNode(t *testing.T, name string) []corev1.NodeCondition {
	t.Helper()
	ctx := context.Background()
	n, err := c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = kubeletConditions()
	if _, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return n.Status.Conditions
}

func (c *cluster) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := c.admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lastRenewal is the reporter's Lease's renewTime.
func (c *cluster) lastRenewal(t *testing.T, name string) time.Time {
	t.Helper()
	l, err := c.admin.CoordinationV1().Leases(reporterNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Spec.RenewTime.Time
}

// fixedShim serves a healthy status document.
type fixedShim struct{}

func (fixedShim) Status(context.Context) (reporter.Snapshot, error) {
	return reporter.Snapshot{Document: status.Document{Generation: 1, Conditions: []condition.Condition{
		{Type: "NetworkReady", Status: condition.True, Reason: "CNIConfigured", Message: "CNI config 10-test.conflist"},
		{Type: condition.TypeReady, Status: condition.True, Reason: condition.ReasonAllReady},
	}}}, nil
}

// startReporter runs a real reporter for node with the reporter's
// ServiceAccount; the returned function stops it (as a killed pod stops:
// its Lease is left as it was).
func (c *cluster) startReporter(t *testing.T, node string) (stop func()) {
	t.Helper()
	r, err := reporter.New(reporter.Options{
		NodeName: node, Namespace: reporterNamespace, Client: kubeapi.New(c.reporter.CoreV1().RESTClient(), c.reporter.CoordinationV1().RESTClient()), Shim: fixedShim{},
		PollInterval: 100 * time.Millisecond, RenewInterval: testRenew,
		Jitter:  func(d time.Duration) time.Duration { return d },
		Version: "v0.0.0-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// instance is one running controller replica.
type instance struct {
	*Controller
	stop func()
}

func (c *cluster) startController(t *testing.T, id string, with ...func(*Options)) *instance {
	t.Helper()
	o := Options{
		Client: c.controllerAPI, ReporterNamespace: reporterNamespace, ElectionNamespace: controllerNamespace,
		Identity: id, GracePeriod: testGrace, SyncPeriod: testSync,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range with {
		f(&o)
	}
	ctrl, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	in := &instance{Controller: ctrl}
	var stopped bool
	in.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller %s: %v", id, err)
		}
	}
	t.Cleanup(in.stop)
	return in
}

func (in *instance) leading() bool   { return testutil.ToFloat64(in.m.leader) == 1 }
func (in *instance) marked() float64 { return testutil.ToFloat64(in.m.marked) }

// waitFor polls cond until it holds; go test's -timeout bounds the wait.
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(50 * time.Millisecond)
	}
}

// allStatus reports whether every nodeshim condition of n (at least two)
// has status st and, when given, reason.
func allStatus(n *corev1.Node, st corev1.ConditionStatus, reason string) bool {
	conds := reporter.Published(n.Status.Conditions)
	for _, c := range conds {
		if c.Status != st || (reason != "" && c.Reason != reason) {
			return false
		}
	}
	return len(conds) >= 2
}

// checkKubelet fails unless kubelet's conditions are exactly as written.
func checkKubelet(t *testing.T, n *corev1.Node, want []corev1.NodeCondition) {
	t.Helper()
	var got []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if reporter.KubeletOwned(c.Type) {
			got = append(got, c)
		}
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("kubelet's conditions changed:\n  %+v\nwant\n  %+v", got, want)
	}
}

// checkMarkTime checks that the mark came a grace period after the last
// renewal, and within one sync period more (transition times are whole
// seconds, hence the second of slack below).
func checkMarkTime(t *testing.T, n *corev1.Node, lastRenew time.Time, slack time.Duration) {
	t.Helper()
	for _, c := range reporter.Published(n.Status.Conditions) {
		after := c.LastTransitionTime.Sub(lastRenew)
		t.Logf("%s turned Unknown %v after the last renewal (transition times are whole seconds)", c.Type, after)
		if after < testGrace-time.Second || after > testGrace+testSync+slack {
			t.Errorf("%s turned Unknown %v after the last renewal, want within [%v, %v]", c.Type, after, testGrace, testGrace+testSync+slack)
		}
	}
}

// withoutHeartbeat drops the heartbeat times, which only the reporter moves.
func withoutHeartbeat(conds []corev1.NodeCondition) []corev1.NodeCondition {
	out := reporter.Published(conds)
	for i := range out {
		out[i].LastHeartbeatTime = metav1.Time{}
	}
	return out
}

func TestAgainstAPIServer(t *testing.T) {
	c := startCluster(t)
	t.Run("silent node turns Unknown and recovers", func(t *testing.T) { testSilentAndRecover(t, c) })
	t.Run("leader change loses nothing and flaps nothing", func(t *testing.T) { testLeaderChange(t, c) })
	t.Run("patch conflicts on a changed Node", func(t *testing.T) { testConflict(t, c) })
}

func testSilentAndRecover(t *testing.T, c *cluster) {
	const name = "node-silent"
	kubelet := c.createNode(t, name)
	ctrl := c.startController(t, "controller-0")
	stopReporter := c.startReporter(t, name)
	waitFor(func() bool { return allStatus(c.node(t, name), corev1.ConditionTrue, "") })
	waitFor(ctrl.leading)

	// While the reporter renews, nothing is marked.
	time.Sleep(testGrace + 2*testSync)
	if n := c.node(t, name); !allStatus(n, corev1.ConditionTrue, "") || ctrl.marked() != 0 {
		t.Fatalf("marked while the reporter renews: %+v (%v marks)", reporter.Published(n.Status.Conditions), ctrl.marked())
	}

	stopReporter()
	lastRenew := c.lastRenewal(t, name)
	waitFor(func() bool {
		return allStatus(c.node(t, name), corev1.ConditionUnknown, reporter.ReasonReporterStopped)
	})
	t.Logf("marked Unknown %v after the last renewal (seen by the test, polling every 50 ms)", time.Since(lastRenew))
	n := c.node(t, name)
	checkMarkTime(t, n, lastRenew, time.Second)
	l, err := c.admin.CoordinationV1().Leases(reporterNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := Message(reporterNamespace, name, l)
	for _, cond := range reporter.Published(n.Status.Conditions) {
		if cond.Message != want || !strings.Contains(cond.Message, lastRenew.UTC().Format(metav1.RFC3339Micro)) {
			t.Errorf("%s message %q, want %q", cond.Type, cond.Message, want)
		}
	}
	checkKubelet(t, n, kubelet)
	if got := ctrl.marked(); got != 1 {
		t.Errorf("nodes_marked_unknown_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(ctrl.m.silent); got != 1 {
		t.Errorf("silent_nodes = %v, want 1", got)
	}
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name, "reason": reporter.ReasonReporterStopped}.AsSelector().String()
	ev, err := c.admin.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Items) != 1 || ev.Items[0].Type != corev1.EventTypeWarning || ev.Items[0].InvolvedObject.UID != n.UID {
		t.Errorf("ReporterStopped events %+v, want one Warning about the Node", ev.Items)
	}
	marked := withoutHeartbeat(n.Status.Conditions)

	// Still silent: marked once, not again.
	time.Sleep(2 * testSync)
	if got := withoutHeartbeat(c.node(t, name).Status.Conditions); !equality.Semantic.DeepEqual(got, marked) || ctrl.marked() != 1 {
		t.Errorf("marked again: %+v, was %+v (%v marks)", got, marked, ctrl.marked())
	}

	// The reporter comes back: it replaces the marks itself.
	c.startReporter(t, name)
	waitFor(func() bool { return allStatus(c.node(t, name), corev1.ConditionTrue, "") })
	n = c.node(t, name)
	recovered := withoutHeartbeat(n.Status.Conditions)
	for i, cond := range recovered {
		if cond.LastTransitionTime.Before(&marked[i].LastTransitionTime) || cond.Reason == reporter.ReasonReporterStopped ||
			strings.Contains(cond.Message, "stopped renewing") {
			t.Errorf("%s after recovery: %+v", cond.Type, cond)
		}
	}
	checkKubelet(t, n, kubelet)

	// And nothing flaps: a grace period later the controller has written
	// nothing more.
	time.Sleep(testGrace + 2*testSync)
	n = c.node(t, name)
	if got := withoutHeartbeat(n.Status.Conditions); !equality.Semantic.DeepEqual(got, recovered) || ctrl.marked() != 1 {
		t.Errorf("after recovery: %+v, was %+v (%v marks)", got, recovered, ctrl.marked())
	}
	if got := testutil.ToFloat64(ctrl.m.silent); got != 0 {
		t.Errorf("silent_nodes = %v after recovery, want 0", got)
	}
}

// testLeaderChange stops the leader just after the reporter: the warm
// standby takes over and marks the node in time. A new replica then takes
// over from it and writes nothing, the reporter recovers, and nothing
// flaps.
func testLeaderChange(t *testing.T, c *cluster) {
	const name = "node-leader"
	kubelet := c.createNode(t, name)
	// Each replica's WhileLeading (the PodMigrations' controller in
	// `nodeshim controller --pod-migrations`) runs exactly while it leads.
	var mu sync.Mutex
	running := map[string]bool{}
	runs := func(id string) bool { mu.Lock(); defer mu.Unlock(); return running[id] }
	whileLeading := func(id string) func(*Options) {
		return func(o *Options) {
			o.WhileLeading = func(ctx context.Context) error {
				mu.Lock()
				running[id] = true
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				running[id] = false
				mu.Unlock()
				return nil
			}
		}
	}
	a := c.startController(t, "controller-a", whileLeading("a"))
	waitFor(a.leading)
	waitFor(func() bool { return runs("a") })
	b := c.startController(t, "controller-b", whileLeading("b"))
	stopReporter := c.startReporter(t, name)
	waitFor(func() bool { return allStatus(c.node(t, name), corev1.ConditionTrue, "") })
	time.Sleep(testGrace) // b has seen renewals for a while

	stopReporter()
	lastRenew := c.lastRenewal(t, name)
	if runs("b") {
		t.Errorf("the standby runs its WhileLeading")
	}
	a.stop() // steps down: releases the election's Lease
	if runs("a") {
		t.Errorf("the stopped leader's WhileLeading still runs")
	}
	waitFor(b.leading)
	waitFor(func() bool { return runs("b") })
	waitFor(func() bool {
		return allStatus(c.node(t, name), corev1.ConditionUnknown, reporter.ReasonReporterStopped)
	})
	t.Logf("marked Unknown %v after the last renewal (seen by the test, polling every 50 ms)", time.Since(lastRenew))
	n := c.node(t, name)
	// The standby's own sightings carried over: no grace period restarts.
	checkMarkTime(t, n, lastRenew, time.Second)
	checkKubelet(t, n, kubelet)
	if a.marked() != 0 || b.marked() != 1 {
		t.Errorf("marks: %v by the old leader, %v by the new, want 0 and 1", a.marked(), b.marked())
	}
	marked, rv := withoutHeartbeat(n.Status.Conditions), n.ResourceVersion

	// A new replica takes over from b: it waits a grace period of its own,
	// finds the node marked already and writes nothing.
	a2 := c.startController(t, "controller-a2")
	b.stop()
	waitFor(a2.leading)
	time.Sleep(testGrace + 2*testSync)
	n = c.node(t, name)
	if n.ResourceVersion != rv || a2.marked() != 0 {
		t.Errorf("the new leader wrote the marked node again: %+v, was %+v (%v marks)", withoutHeartbeat(n.Status.Conditions), marked, a2.marked())
	}

	c.startReporter(t, name)
	waitFor(func() bool { return allStatus(c.node(t, name), corev1.ConditionTrue, "") })
	recovered := withoutHeartbeat(c.node(t, name).Status.Conditions)
	time.Sleep(testGrace + 2*testSync)
	n = c.node(t, name)
	if got := withoutHeartbeat(n.Status.Conditions); !equality.Semantic.DeepEqual(got, recovered) || a2.marked() != 0 {
		t.Errorf("flapped after recovery: %+v, was %+v (%v marks)", got, recovered, a2.marked())
	}
	checkKubelet(t, n, kubelet)
}

// testConflict: a mark decided on a Node that has changed since is refused
// by the API server, not written over the change.
func testConflict(t *testing.T, c *cluster) {
	const name = "node-conflict"
	c.createNode(t, name)
	stop := c.startReporter(t, name)
	waitFor(func() bool { return allStatus(c.node(t, name), corev1.ConditionTrue, "") })
	stop()
	stale := c.node(t, name)
	// The Node changes after the decision (as when the reporter comes
	// back and publishes).
	moved := stale.DeepCopy()
	if moved.Annotations == nil {
		moved.Annotations = map[string]string{}
	}
	moved.Annotations["test"] = "moved"
	n, err := c.admin.CoreV1().Nodes().Update(context.Background(), moved, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(Options{Client: c.controllerAPI, ReporterNamespace: reporterNamespace, ElectionNamespace: controllerNamespace, Identity: "x"})
	if err != nil {
		t.Fatal(err)
	}
	marks := Unknown(stale.Status.Conditions, "test", metav1.NewTime(time.Now()).Rfc3339Copy())
	if err := ctrl.patch(context.Background(), stale, marks); !apierrors.IsConflict(err) {
		t.Errorf("patch on a stale Node: %v, want Conflict", err)
	}
	if !allStatus(c.node(t, name), corev1.ConditionTrue, "") {
		t.Error("the stale patch was written")
	}
	if err := ctrl.patch(context.Background(), n, Unknown(n.Status.Conditions, "test", metav1.NewTime(time.Now()).Rfc3339Copy())); err != nil {
		t.Errorf("patch on the current Node: %v", err)
	}
}
