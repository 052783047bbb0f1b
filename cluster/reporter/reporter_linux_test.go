package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/daemon"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/shim/transfer"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
)

// rbacYAML is the reporter's Namespace, ServiceAccount and RBAC from
// deploy/ itself: every test runs the reporter with that ServiceAccount's
// token, never as the admin.
var rbacYAML = func() []byte {
	b, err := deploy.ReporterAccess()
	if err != nil {
		panic(err)
	}
	return b
}()

const (
	testNamespace = "nodeshim"
	testSA        = "nodeshim-reporter"
)

// testShim is a shim in the test process: a status model served by the
// node API handler on a unix socket, which the test can stop and restart.
type testShim struct {
	t      testing.TB
	Model  *status.Model
	Socket string

	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener
	// transfers is GET /transfers' answer; nil answers 404, as a shim
	// that receives none.
	transfers *transfer.Info
}

// SetTransfers sets what GET /transfers answers.
func (s *testShim) SetTransfers(in *transfer.Info) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transfers = in
}

func startTestShim(t testing.TB) *testShim {
	nstestutil.RequireRoot(t)
	dir, err := os.MkdirTemp("", "nodeshim-reporter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &testShim{t: t, Model: status.New(nil), Socket: filepath.Join(dir, api.SocketName)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start serves the API on the socket.
func (s *testShim) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	lnSock, err := api.ListenSocket(s.Socket, 0o600, -1)
	if err != nil {
		s.t.Fatal(err)
	}
	ln := lnSock.UnixListener
	s.ln = ln
	s.srv = &http.Server{
		// Root only, the API's default: the tests run as root.
		Handler: api.NewHandler(s.Model, api.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			TransferInfo: transfer.InfoHandler(func() (transfer.Info, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.transfers == nil {
					return transfer.Info{}, transfer.ErrNotEnabled
				}
				return *s.transfers, nil
			})}),
		ConnContext: api.ConnContext,
	}
	go s.srv.Serve(ln)
}

// Stop closes the server and removes the socket: the shim is unreachable.
func (s *testShim) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	s.srv.Close()
	os.Remove(s.Socket)
	s.srv = nil
}

// env is one reporter for one Node against the shared API server.
type env struct {
	t        testing.TB
	cluster  *kubetest.Cluster
	admin    kubernetes.Interface
	node     string
	shim     *testShim
	clock    *testingclock.FakeClock
	reg      *prometheus.Registry
	metrics  *Metrics
	reporter *Reporter
	kubelet  []corev1.NodeCondition
	stop     func()
}

// kubeletConditions are what kubelet would have written: the reporter
// must never touch them.
func kubeletConditions(at time.Time) []corev1.NodeCondition {
	ts := metav1.NewTime(at).Rfc3339Copy()
	return []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available", LastHeartbeatTime: ts, LastTransitionTime: ts},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure", LastHeartbeatTime: ts, LastTransitionTime: ts},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available", LastHeartbeatTime: ts, LastTransitionTime: ts},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: ts, LastTransitionTime: ts},
	}
}

// grantReporter creates the reporter's RBAC once per cluster and returns
// a client with the ServiceAccount's token once the grant is effective.
func grantReporter(t testing.TB, c *kubetest.Cluster) kubernetes.Interface {
	t.Helper()
	c.MustApply(t, rbacYAML)
	cs, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, testNamespace, testSA))
	if err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect through the API server's informers: wait for it
	// (go test's -timeout bounds the wait).
	for {
		_, err := cs.CoordinationV1().Leases(testNamespace).Get(context.Background(), "probe", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return cs
		}
		if !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newEnv(t testing.TB, c *kubetest.Cluster, reporterClient kubernetes.Interface, node string) *env {
	return newEnvWith(t, c, reporterClient, node, func(o *Options) {
		// A fixed jitter: renewals 10.5 s apart on the fake clock.
		o.Jitter = func(d time.Duration) time.Duration { return d + d/20 }
	})
}

// newEnvWith is newEnv with the reporter's options adjusted by opt.
func newEnvWith(t testing.TB, c *kubetest.Cluster, reporterClient kubernetes.Interface, node string, opt func(*Options)) *env {
	t.Helper()
	e := &env{t: t, cluster: c, admin: c.AdminClient(t), node: node}
	ctx := context.Background()
	if _, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.writeKubeletConditions(time.Now().Add(-time.Hour))

	e.shim = startTestShim(t)
	e.shim.Model.Set(
		condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "CNIConfigured", Message: "CNI config 10-test.conflist"},
		condition.Condition{Type: "PluginsReady", Status: condition.True, Reason: "AllRegistered", Message: "2 plugins"},
	)
	e.clock = testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	e.reg = prometheus.NewRegistry()
	e.metrics = NewMetrics(e.reg)
	shimClient := NewSocketClient(e.shim.Socket)
	t.Cleanup(shimClient.Close)
	o := Options{
		// Polled: the steps of the fake clock pace every read, as the
		// tests expect; testLongPoll unwraps it.
		NodeName: node, Namespace: testNamespace, Client: apiOf(reporterClient), Shim: pollOnly{shimClient},
		Clock: e.clock, Version: "v0.0.0-test", Metrics: e.metrics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	opt(&o)
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.reporter = r
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(runCtx); close(done) }()
	e.stop = func() { cancel(); <-done }
	t.Cleanup(e.stop)
	e.parked()
	return e
}

func (e *env) writeKubeletConditions(at time.Time) {
	e.t.Helper()
	ctx := context.Background()
	n, err := e.admin.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.kubelet = kubeletConditions(at)
	var keep []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if !KubeletOwned(c.Type) {
			keep = append(keep, c)
		}
	}
	n.Status.Conditions = append(keep, e.kubelet...)
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// apiOf is the reporter's API over a clientset's REST clients.
func apiOf(cs kubernetes.Interface) API {
	return kubeapi.New(cs.CoreV1().RESTClient(), cs.CoordinationV1().RESTClient())
}

// pollOnly hides a shim's long polls: the reporter reads it every
// PollInterval.
type pollOnly struct{ Shim }

// parked waits until both of the reporter's loops wait on the fake clock,
// i.e. every request a step started has been answered.
func (e *env) parked() {
	for e.clock.Waiters() < 2 {
		time.Sleep(time.Millisecond)
	}
}

// step advances the fake clock by d in increments of at most inc, letting
// the reporter finish its work after each.
func (e *env) step(d, inc time.Duration) {
	for d > 0 {
		s := min(d, inc)
		e.clock.Step(s)
		d -= s
		e.parked()
	}
}

func (e *env) getNode() *corev1.Node {
	e.t.Helper()
	n, err := e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func findCondition(n *corev1.Node, t corev1.NodeConditionType) (corev1.NodeCondition, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// mustCondition returns the condition of type typ, failing if it is absent
// or has another status or reason.
func (e *env) mustCondition(n *corev1.Node, typ corev1.NodeConditionType, st corev1.ConditionStatus, reason string) corev1.NodeCondition {
	e.t.Helper()
	c, ok := findCondition(n, typ)
	if !ok {
		e.t.Fatalf("node %s has no %s condition: %+v", e.node, typ, n.Status.Conditions)
	}
	if c.Status != st || (reason != "" && c.Reason != reason) {
		e.t.Fatalf("%s = %s (%s: %s), want %s (%s)", typ, c.Status, c.Reason, c.Message, st, reason)
	}
	return c
}

// checkKubelet fails unless kubelet's conditions are exactly as written.
func (e *env) checkKubelet(n *corev1.Node) {
	e.t.Helper()
	for _, want := range e.kubelet {
		got, ok := findCondition(n, want.Type)
		if !ok {
			e.t.Fatalf("kubelet's %s condition is gone", want.Type)
		}
		if got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message ||
			!got.LastHeartbeatTime.Equal(&want.LastHeartbeatTime) || !got.LastTransitionTime.Equal(&want.LastTransitionTime) {
			e.t.Fatalf("kubelet's %s changed: %+v, want %+v", want.Type, got, want)
		}
	}
}

func (e *env) lease() *metav1.MicroTime {
	e.t.Helper()
	l, err := e.admin.CoordinationV1().Leases(testNamespace).Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.node || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
		e.t.Fatalf("lease spec %+v", l.Spec)
	}
	if o := l.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != e.node || o[0].UID != e.getNode().UID {
		e.t.Fatalf("lease owners %+v, want the Node", o)
	}
	return l.Spec.RenewTime
}

func (e *env) events() []corev1.Event {
	e.t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": e.node}.AsSelector().String()
	l, err := e.admin.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

func (e *env) writes(kind string) float64 {
	return testutil.ToFloat64(e.metrics.writes.WithLabelValues(kind))
}

func (e *env) failures(kind string) float64 {
	return testutil.ToFloat64(e.metrics.failures.WithLabelValues(kind))
}

// TestAgainstAPIServer runs the reporter with the ServiceAccount token of
// deploy/'s RBAC against a real kube-apiserver and etcd.
func TestAgainstAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	sa := grantReporter(t, c)

	t.Run("publishes conditions, lease, events, annotations", func(t *testing.T) { testPublish(t, c, sa) })
	t.Run("shim unreachable", func(t *testing.T) { testShimUnreachable(t, c, sa) })
	t.Run("least privilege", func(t *testing.T) { testLeastPrivilege(t, sa) })
	t.Run("every granted verb is needed", func(t *testing.T) { testEveryVerbNeeded(t, c) })
	t.Run("report digest", func(t *testing.T) { testReportDigest(t, c, sa) })
	t.Run("events rate-limited", func(t *testing.T) { testEventRateLimit(t, c, sa) })
	t.Run("lease conflict", func(t *testing.T) { testLeaseConflict(t, c, sa) })
	t.Run("OOM kill events name the pod", func(t *testing.T) { testOOMEvents(t, c, sa) })
	t.Run("recovers from the controller's ReporterStopped", func(t *testing.T) { testRecoverReporterStopped(t, c, sa) })
	t.Run("long poll", func(t *testing.T) { testLongPoll(t, c, sa) })
	t.Run("capability labels", func(t *testing.T) { testCapabilityLabels(t, c, sa) })
	t.Run("capability labels of this node", func(t *testing.T) { testCapabilityLabelsOfThisNode(t, c, sa) })
	t.Run("live shim daemon", func(t *testing.T) { testDaemon(t, c, sa) })
	// Last: it stops and restarts the API server.
	t.Run("API server outage", func(t *testing.T) { testOutage(t, c, sa) })
}

func testPublish(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-publish")
	n := e.getNode()
	ready := e.mustCondition(n, TypeNodeShimReady, corev1.ConditionTrue, condition.ReasonAllReady)
	net := e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionTrue, "CNIConfigured")
	e.mustCondition(n, "NodeShimPluginsReady", corev1.ConditionTrue, "AllRegistered")
	e.checkKubelet(n)
	if got, want := n.Annotations[AnnotationDigest], e.reporter.State().Digest; got != want || !strings.HasPrefix(got, "sha256:") {
		t.Errorf("digest annotation %q, want %q", got, want)
	}
	if got := n.Annotations[AnnotationVersion]; got != "v0.0.0-test" {
		t.Errorf("version annotation %q", got)
	}
	if !ready.LastTransitionTime.Time.Equal(e.clock.Now()) {
		t.Errorf("NodeShimReady transition at %v, want %v", ready.LastTransitionTime, e.clock.Now())
	}
	renew := e.lease()
	if !renew.Time.Equal(e.clock.Now()) {
		t.Errorf("lease renewed at %v, want %v", renew, e.clock.Now())
	}
	ev := e.events()
	if len(ev) != 3 {
		t.Errorf("%d events, want one per new condition (3): %+v", len(ev), ev)
	}

	// Idle: the lease is renewed 10.5 s after each renewal (at the 1 s steps
	// of the fake clock: 11 s and 22 s), the status
	// is not written again.
	e.step(22*time.Second, time.Second)
	if got := e.writes(kindLease); got != 3 {
		t.Errorf("%v lease writes after 22 s (renewals at 11 s and 22 s), want 3", got)
	}
	if got := e.writes(kindStatus); got != 1 {
		t.Errorf("%v status writes while idle, want 1", got)
	}
	if r := e.lease(); !r.Time.Equal(e.clock.Now()) {
		t.Errorf("lease renewed at %v, want %v", r, e.clock.Now())
	}

	// A change on the shim: published within a poll, only that condition
	// (and the Ready summary) move, with an Event each.
	e.shim.Model.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Severity: condition.SeverityError, Reason: "NoCNIConfig", Message: "no CNI config in /etc/cni/net.d"})
	e.step(time.Second, time.Second)
	changedAt := e.clock.Now()
	n = e.getNode()
	net2 := e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionFalse, "NoCNIConfig")
	if !net2.LastTransitionTime.Time.Equal(changedAt) || net2.LastTransitionTime.Equal(&net.LastTransitionTime) {
		t.Errorf("NodeShimNetworkReady transition at %v, want %v", net2.LastTransitionTime, changedAt)
	}
	e.mustCondition(n, TypeNodeShimReady, corev1.ConditionFalse, "NoCNIConfig")
	plugins := e.mustCondition(n, "NodeShimPluginsReady", corev1.ConditionTrue, "AllRegistered")
	if !plugins.LastTransitionTime.Equal(&ready.LastTransitionTime) {
		t.Errorf("NodeShimPluginsReady transition moved to %v without a status change", plugins.LastTransitionTime)
	}
	e.checkKubelet(n)
	var warn *corev1.Event
	for _, x := range e.events() {
		if x.Reason == "NoCNIConfig" && strings.HasPrefix(x.Message, "NodeShimNetworkReady changed from True to False") {
			warn = &x
		}
	}
	if warn == nil || warn.Type != corev1.EventTypeWarning || warn.Source.Component != Component || warn.InvolvedObject.UID != n.UID {
		t.Errorf("no Warning event for the NodeShimNetworkReady transition: %+v", warn)
	}

	// kubelet writes its conditions again: both sides stay intact.
	e.writeKubeletConditions(e.clock.Now())
	e.shim.Model.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "CNIConfigured", Message: "CNI config 10-test.conflist"})
	e.step(time.Second, time.Second)
	n = e.getNode()
	e.checkKubelet(n)
	e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionTrue, "CNIConfigured")
	e.mustCondition(n, TypeNodeShimReady, corev1.ConditionTrue, "")

	// Nothing changes for 5 minutes: one heartbeat patch of the status,
	// transition times kept.
	before := e.writes(kindStatus)
	e.step(DefaultResyncPeriod, time.Second)
	if got := e.writes(kindStatus) - before; got != 1 {
		t.Errorf("%v status writes in 5 idle minutes, want 1 (the resync)", got)
	}
	n2 := e.getNode()
	r1, _ := findCondition(n, TypeNodeShimReady)
	r2 := e.mustCondition(n2, TypeNodeShimReady, corev1.ConditionTrue, "")
	if !r1.LastTransitionTime.Equal(&r2.LastTransitionTime) || !r2.LastHeartbeatTime.After(r1.LastHeartbeatTime.Time) {
		t.Errorf("resync: transition %v -> %v (want kept), heartbeat %v -> %v (want moved)",
			r1.LastTransitionTime, r2.LastTransitionTime, r1.LastHeartbeatTime, r2.LastHeartbeatTime)
	}
	e.checkKubelet(n2)

	// A restarted reporter keeps the transition times it finds.
	e.stop()
	e2 := &env{t: t, admin: e.admin, node: e.node, shim: e.shim, kubelet: e.kubelet}
	e2.clock = testingclock.NewFakeClock(e.clock.Now().Add(time.Minute))
	e2.metrics = NewMetrics(nil)
	shimClient := NewSocketClient(e.shim.Socket)
	defer shimClient.Close()
	r, err := New(Options{NodeName: e.node, Namespace: testNamespace, Client: apiOf(sa), Shim: shimClient, Clock: e2.clock,
		Metrics: e2.metrics, Version: "v0.0.0-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	e2.parked()
	cancel()
	<-done
	n3 := e.getNode()
	r3 := e.mustCondition(n3, TypeNodeShimReady, corev1.ConditionTrue, "")
	if !r3.LastTransitionTime.Equal(&r2.LastTransitionTime) {
		t.Errorf("restarted reporter moved NodeShimReady's transition time: %v -> %v", r2.LastTransitionTime, r3.LastTransitionTime)
	}
	if got := len(e.events()); got != len(ev)+4 {
		t.Errorf("%d events, want %d: the restart must not repeat transitions", got, len(ev)+4)
	}
}

// testLongPoll runs the reporter against the shim's long poll: a change
// reaches the Node without the clock moving, an idle reporter reads the
// shim once per long poll instead of once per PollInterval, and a shim
// that goes away is still seen unreachable.
func testLongPoll(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnvWith(t, c, sa, "node-long-poll", func(o *Options) {
		o.Shim = o.Shim.(pollOnly).Shim
		o.Jitter = func(d time.Duration) time.Duration { return d + d/20 }
	})
	e.mustCondition(e.getNode(), "NodeShimNetworkReady", corev1.ConditionTrue, "CNIConfigured")
	reads := func(mode string) float64 { return testutil.ToFloat64(e.metrics.shimReads.WithLabelValues(mode)) }
	// The first reads are plain, while the status loop rechecks the Node
	// after the first renewal of the Lease (a RenewInterval); then it waits.
	for reads(readLongPoll) < 1 {
		e.step(time.Second, time.Second)
	}

	// A change on the shim reaches the Node with the clock standing still,
	// stamped when it happened.
	changedAt := e.clock.Now()
	e.shim.Model.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Severity: condition.SeverityError, Reason: "NoCNIConfig", Message: "no CNI config"})
	for e.writes(kindStatus) < 2 {
		time.Sleep(time.Millisecond)
	}
	e.parked()
	n := e.getNode()
	net := e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionFalse, "NoCNIConfig")
	if !net.LastTransitionTime.Time.Equal(changedAt) {
		t.Errorf("NodeShimNetworkReady transition at %v, want %v", net.LastTransitionTime, changedAt)
	}
	e.mustCondition(n, TypeNodeShimReady, corev1.ConditionFalse, "NoCNIConfig")

	// Idle for a minute of the clock: a read per long poll (30 s, plus a
	// PollInterval between two), not one per second.
	polls, longPolls := reads(readPoll), reads(readLongPoll)
	e.step(time.Minute, time.Second)
	if got := reads(readPoll) - polls; got != 0 {
		t.Errorf("%v plain reads while idle with long polls, want 0", got)
	}
	if got := reads(readLongPoll) - longPolls; got < 1 || got > 3 {
		t.Errorf("%v long polls in an idle minute, want 1 to 3", got)
	}
	if got := e.writes(kindStatus); got != 2 {
		t.Errorf("%v status writes, want 2 (no write while idle)", got)
	}

	// The shim goes away: the long poll fails at once, and the plain reads
	// that follow see it unreachable as before.
	e.shim.Stop()
	for e.failures(kindShim) < 1 {
		time.Sleep(time.Millisecond)
	}
	e.parked()
	e.step(time.Duration(DefaultUnreachableAfter)*time.Second, time.Second)
	e.mustCondition(e.getNode(), TypeNodeShimReady, corev1.ConditionFalse, ReasonShimUnreachable)
	e.shim.Start()
	e.step(time.Second, time.Second)
	e.mustCondition(e.getNode(), TypeNodeShimReady, corev1.ConditionFalse, "NoCNIConfig")
}

func testShimUnreachable(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-unreachable")
	e.mustCondition(e.getNode(), "NodeShimNetworkReady", corev1.ConditionTrue, "")
	e.shim.Stop()
	// One failed read is a blip: nothing changes yet.
	e.step(time.Second, time.Second)
	e.mustCondition(e.getNode(), TypeNodeShimReady, corev1.ConditionTrue, "")
	e.step(time.Duration(DefaultUnreachableAfter)*time.Second, time.Second)
	n := e.getNode()
	ready := e.mustCondition(n, TypeNodeShimReady, corev1.ConditionFalse, ReasonShimUnreachable)
	if !strings.Contains(ready.Message, e.shim.Socket) {
		t.Errorf("NodeShimReady message %q does not name the socket", ready.Message)
	}
	e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionUnknown, ReasonShimUnreachable)
	e.mustCondition(n, "NodeShimPluginsReady", corev1.ConditionUnknown, ReasonShimUnreachable)
	e.checkKubelet(n)
	if got := testutil.ToFloat64(e.metrics.shimUp); got != 0 {
		t.Errorf("shim_up %v while the shim is down", got)
	}

	e.shim.Start()
	e.step(time.Second, time.Second)
	n = e.getNode()
	e.mustCondition(n, TypeNodeShimReady, corev1.ConditionTrue, condition.ReasonAllReady)
	e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionTrue, "CNIConfigured")
	e.checkKubelet(n)
}

// testLeastPrivilege checks that the reporter's ServiceAccount cannot do
// more than the reporter needs.
func testLeastPrivilege(t *testing.T, sa kubernetes.Interface) {
	ctx := context.Background()
	forbidden := []struct {
		name string
		do   func() error
	}{
		{"list nodes", func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }},
		{"patch a node's spec or labels", func() error {
			_, err := sa.CoreV1().Nodes().Patch(ctx, "node-publish", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
			return err
		}},
		{"update a node's status", func() error {
			_, err := sa.CoreV1().Nodes().UpdateStatus(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-publish"}}, metav1.UpdateOptions{})
			return err
		}},
		{"delete a node", func() error { return sa.CoreV1().Nodes().Delete(ctx, "node-publish", metav1.DeleteOptions{}) }},
		{"read a lease in another namespace", func() error {
			_, err := sa.CoordinationV1().Leases("kube-node-lease").Get(ctx, "x", metav1.GetOptions{})
			return err
		}},
		{"delete its lease", func() error {
			return sa.CoordinationV1().Leases(testNamespace).Delete(ctx, "node-publish", metav1.DeleteOptions{})
		}},
		{"read secrets", func() error { _, err := sa.CoreV1().Secrets(testNamespace).List(ctx, metav1.ListOptions{}); return err }},
		{"list pods", func() error { _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
	}
	for _, f := range forbidden {
		if err := f.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want Forbidden", f.name, err)
		}
	}
}

// testDaemon runs the reporter against the real shim daemon (nodeshim
// serve's daemon.Run) and checks that the Node carries every condition the
// daemon serves, under nodeshim's names.
func testDaemon(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	nstestutil.RequireRoot(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{
			RootDir: filepath.Join(dir, "root"), LockFile: filepath.Join(dir, "nodeshim.lock"),
			HostRoot: filepath.Join(dir, "host"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Listening: func(s string) { listening <- s },
		})
	}()
	var sock string
	select {
	case sock = <-listening:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	admin := c.AdminClient(t)
	node := "node-daemon"
	if _, err := admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shim := NewSocketClient(sock)
	defer shim.Close()
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	r, err := New(Options{NodeName: node, Namespace: testNamespace, Client: apiOf(sa), Shim: shim, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rdone := make(chan struct{})
	go func() { r.Run(rctx); close(rdone) }()
	defer func() { rcancel(); <-rdone }()
	// The daemon's sources settle on their own; poll the reporter until
	// the Node shows what the shim serves.
	for {
		for clk.Waiters() < 2 {
			time.Sleep(time.Millisecond)
		}
		doc, err := shim.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n, err := admin.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if matches(t, doc.Document, n, false) && len(doc.Conditions) >= 4 {
			matches(t, doc.Document, n, true)
			return
		}
		clk.Step(time.Second)
	}
}

// matches reports whether n carries every condition of doc under its
// nodeshim name with the same status and reason; with report set it fails
// t on the first difference.
func matches(t *testing.T, doc status.Document, n *corev1.Node, report bool) bool {
	t.Helper()
	for _, sc := range doc.Conditions {
		nc, ok := findCondition(n, NodeConditionType(sc.Type))
		if !ok || string(nc.Status) != string(sc.Status) || nc.Reason != sc.Reason || nc.Message != sc.Message {
			if report {
				t.Errorf("shim condition %+v published as %+v (found %v)", sc, nc, ok)
			}
			return false
		}
	}
	return true
}

// testOutage stops the API server for 20 s while the reporter runs: it
// backs off, keeps the latest state (a change made during the outage),
// and converges once the API server is back, with no condition flapping.
func testOutage(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-outage")
	n := e.getNode()
	plugins := e.mustCondition(n, "NodeShimPluginsReady", corev1.ConditionTrue, "")
	eventsBefore := len(e.events())
	leaseBefore := e.writes(kindLease)

	c.StopAPIServer()
	outageStart := time.Now()
	e.shim.Model.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Severity: condition.SeverityError, Reason: "NoCNIConfig", Message: "no CNI config"})
	// 20 s of outage, on the fake clock and on the wall clock alike.
	for i := 0; i < 200; i++ {
		e.step(100*time.Millisecond, 100*time.Millisecond)
		time.Sleep(time.Until(outageStart.Add(time.Duration(i+1) * 100 * time.Millisecond)))
	}
	changedAt := e.clock.Now().Add(-20 * time.Second).Add(100 * time.Millisecond)
	// Backoff, not a busy loop: 200 ms doubling to 7 s is 7 or 8 tries in
	// 20 s (the first at the next renewal, up to 10.5 s in).
	leaseFails := e.failures(kindLease)
	statusFails := e.failures(kindStatus)
	if leaseFails < 3 || leaseFails > 8 {
		t.Errorf("%v failed lease renewals in a 20 s outage, want 3..8 (exponential backoff)", leaseFails)
	}
	if statusFails < 5 || statusFails > 9 {
		t.Errorf("%v failed status patches in a 20 s outage, want 5..9 (exponential backoff)", statusFails)
	}
	if err := c.StartAPIServer(t); err != nil {
		t.Fatal(err)
	}
	// Converge: within the longest backoff both loops succeed again.
	e.step(DefaultBackoffMax+time.Second, 100*time.Millisecond)
	n = e.getNode()
	net := e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionFalse, "NoCNIConfig")
	if net.LastTransitionTime.Time.Before(changedAt.Add(-time.Second)) || net.LastTransitionTime.Time.After(changedAt.Add(time.Second)) {
		t.Errorf("NodeShimNetworkReady transition at %v, want when the change was seen (%v), not when it was published", net.LastTransitionTime, changedAt)
	}
	e.mustCondition(n, TypeNodeShimReady, corev1.ConditionFalse, "NoCNIConfig")
	p2 := e.mustCondition(n, "NodeShimPluginsReady", corev1.ConditionTrue, "")
	if !p2.LastTransitionTime.Equal(&plugins.LastTransitionTime) {
		t.Errorf("NodeShimPluginsReady flapped: transition %v -> %v", plugins.LastTransitionTime, p2.LastTransitionTime)
	}
	if e.writes(kindLease) <= leaseBefore {
		t.Error("lease not renewed after the outage")
	}
	if r := e.lease(); e.clock.Since(r.Time) > DefaultBackoffMax+time.Second {
		t.Errorf("lease renewed at %v, %v ago", r, e.clock.Since(r.Time))
	}
	// Exactly the two real transitions were recorded: no flaps, nothing
	// about the outage itself.
	ev := e.events()
	if len(ev) != eventsBefore+2 {
		t.Errorf("%d new events, want 2 (NetworkReady and Ready to False): %+v", len(ev)-eventsBefore, ev)
	}
	for _, x := range ev {
		if x.Reason == ReasonShimUnreachable || x.Type == "" {
			t.Errorf("unexpected event %+v", x)
		}
	}
	// kubelet writes again after the outage; both sides intact.
	e.writeKubeletConditions(e.clock.Now())
	e.step(2*time.Second, time.Second)
	n = e.getNode()
	e.checkKubelet(n)
	e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionFalse, "NoCNIConfig")
}

// testRecoverReporterStopped marks the reporter's conditions Unknown with
// ReasonReporterStopped as the nodeshim controller does when the Lease
// goes stale, while the reporter, frozen on its fake clock, renews nothing.
// Its first renewal after the gap makes it read the Node back, and its next
// publish restores the conditions with a new transition time and an Event,
// without a resync period's wait; kubelet's conditions stay untouched.
func testRecoverReporterStopped(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-stopped")
	// Past the rechecks of the reporter's first renewal.
	e.step(12*time.Second, time.Second)
	n := e.getNode()
	before := Published(n.Status.Conditions)
	if len(before) != 3 {
		t.Fatalf("published %+v, want 3 conditions", before)
	}
	mark := metav1.NewTime(e.clock.Now()).Rfc3339Copy()
	var conds []map[string]any
	for _, c := range before {
		conds = append(conds, map[string]any{"type": c.Type, "status": corev1.ConditionUnknown, "reason": ReasonReporterStopped,
			"message": "stopped", "lastTransitionTime": mark})
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CoreV1().Nodes().Patch(context.Background(), e.node, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "nodeshim-controller"}, "status"); err != nil {
		t.Fatal(err)
	}

	// A gap in the heartbeat: 25 s of the fake clock at once, one renewal
	// more than 2 renewal intervals after the last.
	e.step(25*time.Second, 25*time.Second)
	e.step(time.Second, time.Second)
	n = e.getNode()
	for _, b := range before {
		got := e.mustCondition(n, b.Type, b.Status, b.Reason)
		if got.LastTransitionTime.Time.Before(mark.Time) || got.Message != b.Message {
			t.Errorf("%s after recovery: %+v, want a transition after the mark (%v)", b.Type, got, mark)
		}
	}
	e.checkKubelet(n)
	var recovered int
	for _, x := range e.events() {
		if strings.Contains(x.Message, "changed from Unknown to True") {
			recovered++
		}
	}
	if recovered != 3 {
		t.Errorf("%d recovery events, want 3: %+v", recovered, e.events())
	}
}

// BenchmarkIdleAPIWrites runs the reporter, with its default random
// jitter, against a real API server for an hour of the fake clock in which
// nothing changes, and reports its API writes per 10 s (target: under 1)
// and per hour by kind. One iteration is one hour, whatever b.N is.
func BenchmarkIdleAPIWrites(b *testing.B) {
	c := kubetest.Start(b)
	sa := grantReporter(b, c)
	e := newEnvWith(b, c, sa, "node-idle", func(*Options) {})
	b.ReportAllocs()
	b.ResetTimer()
	status0, lease0, events0 := e.writes(kindStatus), e.writes(kindLease), e.writes(kindEvent)
	const hour = time.Hour
	// Steps of 200 ms: a renewal due between two steps happens at the
	// next one, which lengthens each interval by 100 ms on average.
	e.step(hour, 200*time.Millisecond)
	b.StopTimer()
	status, lease, events := e.writes(kindStatus)-status0, e.writes(kindLease)-lease0, e.writes(kindEvent)-events0
	b.ReportMetric((status+lease+events)/hour.Seconds()*10, "writes/10s")
	b.ReportMetric(lease, "lease-writes/h")
	b.ReportMetric(status, "status-writes/h")
	b.ReportMetric(events, "event-writes")
}

// reportShim serves the status of a testShim's model with a capability
// report summary that the test sets.
type reportShim struct {
	model *status.Model

	mu     sync.Mutex
	report string
}

func (s *reportShim) Status(context.Context) (Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Snapshot{Document: s.model.Snapshot(), Report: json.RawMessage(s.report)}, nil
}

func (s *reportShim) setReport(r string) {
	s.mu.Lock()
	s.report = r
	s.mu.Unlock()
}

func testReportDigest(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	rs := &reportShim{}
	e := newEnvWith(t, c, sa, "node-report", func(o *Options) { rs.model = status.New(nil); o.Shim = rs })
	rs.model.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "CNIConfigured"})
	e.step(time.Second, time.Second)
	n := e.getNode()
	if _, ok := n.Annotations[AnnotationReportDigest]; ok {
		t.Fatalf("report digest annotation %q before the shim has a report", n.Annotations[AnnotationReportDigest])
	}
	writes := e.writes(kindStatus)
	report := `{"generatedAt":"2026-11-23T12:00:00Z","kernelRelease":"6.18.44","summary":{"supported":30,"degraded":2}}`
	rs.setReport(report)
	e.step(time.Second, time.Second)
	n = e.getNode()
	if got, want := n.Annotations[AnnotationReportDigest], ReportDigest(json.RawMessage(report)); got != want || want == "" {
		t.Fatalf("report digest annotation %q, want %q", got, want)
	}
	if got := e.writes(kindStatus) - writes; got != 1 {
		t.Errorf("%v status writes for a new report, want 1", got)
	}
	e.step(2*time.Second, time.Second)
	if got := e.writes(kindStatus) - writes; got != 1 {
		t.Errorf("%v status writes with the report unchanged, want still 1", got)
	}
	e.mustCondition(n, "NodeShimNetworkReady", corev1.ConditionTrue, "CNIConfigured")
}

// testEventRateLimit flips a condition faster than the Event token bucket
// refills: a burst goes out, the rest is dropped and counted, and the
// bucket refills with the clock.
func testEventRateLimit(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-events")
	initial := len(e.events()) // NodeShimReady, NetworkReady, PluginsReady appear
	flip := func(i int) {
		st := condition.True
		if i%2 == 0 {
			st = condition.False
		}
		e.shim.Model.Set(condition.Condition{Type: "PluginsReady", Status: st, Reason: "Flip" + strconv.Itoa(i)})
		// Ready follows PluginsReady: two transitions per flip. The fake
		// clock moves 1 s per flip, too little to refill the bucket much.
		e.step(time.Second, time.Second)
	}
	for i := range 6 {
		flip(i)
	}
	got := len(e.events()) - initial
	dropped := testutil.ToFloat64(e.metrics.eventsDropped)
	// The burst of 10 minus the 3 initial Events leaves 7; 12 transitions.
	if got != DefaultEventBurst-initial || dropped != float64(12-got) {
		t.Fatalf("%d events sent and %v dropped for 12 transitions, want %d sent, %d dropped", got, dropped, DefaultEventBurst-initial, 12-(DefaultEventBurst-initial))
	}
	// One token per 30 s: after a minute two more transitions get through.
	e.step(time.Minute, 10*time.Second)
	flip(6)
	if after := len(e.events()) - initial; after != got+2 {
		t.Errorf("%d events after the refill, want %d", after, got+2)
	}
}

// testOOMEvents records three OOM kills in the shim: one in a container
// of a Pod, one in a namespace that does not exist, one outside any
// container. The first becomes an Event about the Pod in its namespace, the
// second is dropped without holding up the third, an Event about the Node.
func testOOMEvents(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-oom")
	ctx := context.Background()
	const ns = "oom-events"
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	at := e.clock.Now()
	e.shim.Model.AddOOMKill(status.OOMKill{Time: at, PID: 100, TGID: 100, Comm: "tail", RSSBytes: 30 << 20,
		Container: &status.OOMContainer{Namespace: ns, Pod: "hog", PodUID: "0b7c2a4e-1111-2222-3333-444455556666", Container: "eater",
			ContainerID: "c0ffee", ResolvedBy: "cgroupID"}})
	e.shim.Model.AddOOMKill(status.OOMKill{Time: at, PID: 101, Comm: "gone",
		Container: &status.OOMContainer{Namespace: "no-such-namespace", Pod: "p", Container: "x", ContainerID: "dead"}})
	e.shim.Model.AddOOMKill(status.OOMKill{Time: at, PID: 102, Comm: "stress", Unresolved: "victim in cgroup 1: container not found"})
	e.step(time.Second, time.Second)

	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": "hog"}.AsSelector().String()
	l, err := e.admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d Events about pod %s/hog, want 1: %+v", len(l.Items), ns, l.Items)
	}
	ev := l.Items[0]
	if ev.Reason != ReasonOOMKilling || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Namespace != ns ||
		ev.InvolvedObject.FieldPath != "spec.containers{eater}" || ev.InvolvedObject.UID != "0b7c2a4e-1111-2222-3333-444455556666" ||
		!strings.Contains(ev.Message, "container eater of pod "+ns+"/hog") || ev.Source.Host != e.node {
		t.Errorf("Event about the pod: %s %s %+v %q from %+v", ev.Reason, ev.Type, ev.InvolvedObject, ev.Message, ev.Source)
	}
	var onNode []corev1.Event
	for _, x := range e.events() {
		if x.Reason == ReasonOOMKilling {
			onNode = append(onNode, x)
		}
	}
	if len(onNode) != 1 || !strings.Contains(onNode[0].Message, "process 102 (stress)") {
		t.Fatalf("OOM Events about the node: %+v, want the kill of 102", onNode)
	}
	if d := testutil.ToFloat64(e.metrics.eventsDropped); d != 1 {
		t.Errorf("%v Events dropped, want 1 (the namespace that does not exist)", d)
	}

	// Nothing new: no more Events.
	events := e.writes(kindEvent)
	e.step(2*time.Second, time.Second)
	if got := e.writes(kindEvent); got != events {
		t.Errorf("%v Event writes without a new kill", got-events)
	}
}

// testLeaseConflict changes the Lease behind the reporter's back: its next
// update conflicts, it reads the Lease again and renews it after the first
// backoff step.
func testLeaseConflict(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnv(t, c, sa, "node-conflict")
	ctx := context.Background()
	l, err := e.admin.CoordinationV1().Leases(testNamespace).Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptrTo("someone-else")
	if _, err := e.admin.CoordinationV1().Leases(testNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.step(11*time.Second, time.Second)
	if got := e.failures(kindLease); got != 1 {
		t.Fatalf("%v lease failures after a conflicting update, want 1", got)
	}
	e.step(DefaultBackoffInitial, DefaultBackoffInitial)
	if got := e.writes(kindLease); got != 2 {
		t.Fatalf("%v lease writes, want 2 (created, then renewed after the conflict)", got)
	}
	if r := e.lease(); !r.Time.Equal(e.clock.Now()) {
		t.Errorf("lease renewed at %v, want %v", r, e.clock.Now())
	}
}

func ptrTo[T any](v T) *T { return &v }

// neededGrants are the API verbs the reporter uses: where it uses each
// (the failure kind it counts when refused) and the request it makes.
type neededGrant struct {
	key  string // resource/verb as in a Role's rules
	kind string
	ra   authorizationv1.ResourceAttributes
}

var neededGrants = []neededGrant{
	{"nodes/get", kindNode, authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes"}},
	{"nodes/status/patch", kindStatus, authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Subresource: "status"}},
	{"events/create", kindEvent, authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault}},
	{"leases/get", kindLease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "leases", Group: "coordination.k8s.io", Namespace: testNamespace}},
	{"leases/create", kindLease, authorizationv1.ResourceAttributes{Verb: "create", Resource: "leases", Group: "coordination.k8s.io", Namespace: testNamespace}},
	{"leases/update", kindLease, authorizationv1.ResourceAttributes{Verb: "update", Resource: "leases", Group: "coordination.k8s.io", Namespace: testNamespace}},
}

// podCheckpointGrants are the reporter's grants that its PodCheckpoint
// handler uses, not reporter.Reporter: cluster/podcheckpoint's tests take
// them apart the same way.
var podCheckpointGrants = []string{"pods/get", "podcheckpoints/list", "podcheckpoints/watch", "podcheckpoints/update", "podcheckpoints/status/update"}

// testEveryVerbNeeded takes deploy/'s RBAC apart one verb at a time: a
// ServiceAccount bound to everything but that verb runs the reporter, and
// the reporter must fail where it uses the verb. A granted verb the
// reporter never uses fails the test: the RBAC would be broader than
// needed.
func testEveryVerbNeeded(t *testing.T, c *kubetest.Cluster) {
	objs, err := kubetest.Decode(rbacYAML)
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rm := r.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(rm, "resources")
			verbs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
			for _, rr := range res {
				for _, v := range verbs {
					granted = append(granted, rr+"/"+v)
				}
			}
		}
	}
	for _, n := range neededGrants {
		if !slices.Contains(granted, n.key) {
			t.Errorf("deploy/'s RBAC lacks %s, which the reporter uses", n.key)
		}
	}
	for i, g := range granted {
		if slices.Contains(podCheckpointGrants, g) {
			continue
		}
		name := fmt.Sprintf("without-%d", i)
		t.Run(g, func(t *testing.T) {
			j := slices.IndexFunc(neededGrants, func(n neededGrant) bool { return n.key == g })
			if j < 0 {
				t.Fatalf("%s is granted but the reporter never uses it", g)
			}
			slash := strings.LastIndexByte(g, '/')
			c.MustApply(t, reducedRBAC(t, objs, name, g[:slash], g[slash+1:]))
			cs, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, testNamespace, name))
			if err != nil {
				t.Fatal(err)
			}
			waitGranted(t, c, name, g)
			e := newEnv(t, c, cs, "node-"+name)
			e.step(12*time.Second, time.Second) // past the first renewal
			if kind := neededGrants[j].kind; e.failures(kind) == 0 {
				t.Errorf("without %s the reporter saw no %s failure", g, kind)
			}
		})
	}
}

// reducedRBAC returns the roles and bindings of objs, renamed with suffix
// name and bound to the ServiceAccount name, with verb taken off resource.
func reducedRBAC(t *testing.T, objs []*unstructured.Unstructured, name, resource, verb string) []byte {
	t.Helper()
	var docs []string
	for _, o := range objs {
		o = o.DeepCopy()
		switch o.GetKind() {
		case "ClusterRole", "Role":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				rm := r.(map[string]any)
				res, _, _ := unstructured.NestedStringSlice(rm, "resources")
				if !slices.Contains(res, resource) {
					continue
				}
				if len(res) != 1 {
					t.Fatalf("rule %v names several resources", rm)
				}
				verbs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
				verbs = slices.DeleteFunc(verbs, func(v string) bool { return v == verb })
				if len(verbs) == 0 {
					// A rule needs a verb: watch, which the reporter never uses.
					verbs = []string{"watch"}
				}
				if err := unstructured.SetNestedStringSlice(rm, verbs, "verbs"); err != nil {
					t.Fatal(err)
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, rules, "rules"); err != nil {
				t.Fatal(err)
			}
		case "ClusterRoleBinding", "RoleBinding":
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			if err := unstructured.SetNestedField(o.Object, ref+"-"+name, "roleRef", "name"); err != nil {
				t.Fatal(err)
			}
			subjects := []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": testNamespace}}
			if err := unstructured.SetNestedSlice(o.Object, subjects, "subjects"); err != nil {
				t.Fatal(err)
			}
		default:
			continue
		}
		o.SetName(o.GetName() + "-" + name)
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	return []byte(strings.Join(docs, "\n---\n"))
}

// waitGranted waits until the authorizer, which reads RBAC through
// informers, allows the ServiceAccount name every needed grant but
// without (go test's -timeout bounds the wait).
func waitGranted(t *testing.T, c *kubetest.Cluster, name, without string) {
	t.Helper()
	admin := c.AdminClient(t)
	user := "system:serviceaccount:" + testNamespace + ":" + name
	for {
		ready := true
		for _, n := range neededGrants {
			ra := n.ra
			r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &ra},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != (n.key != without) {
				ready = false
			}
		}
		if ready {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
