// Package fleet is a kubemark-style benchmark of what nodeshim costs one
// API server: many simulated nodes in one process, each a real reporter
// (cluster/reporter, built as `nodeshim reporter` builds it) reading an
// in-process shim (Shim: a status model filled as a healthy node's daemon
// fills it, with a kernel capability report), against the real etcd and
// kube-apiserver of testenv/kubetest, with the nodeshim controller
// (cluster/controller) running.
//
// Run measures, phase by phase, the API server's writes (its own
// apiserver_request_total, by verb and resource), the CPU time and
// resident memory of kube-apiserver and etcd (from /proc), and the time
// from a condition change in a shim to a watch of Nodes showing it:
//
//   - kubelet: the reference, kubelet's own heartbeat for the same nodes
//     (KubeletHeartbeat: a Lease renewal every 10 s, a status patch every
//     5 minutes), alone;
//   - startup: the reporters starting, ramped, until each has published;
//   - idle: nothing changes;
//   - latency: condition changes on distinct nodes at a steady rate;
//   - flap: a fraction of the nodes toggling a condition every period.
//
// Each reporter has its own client, with client-go's default rate limit
// (5 QPS, burst 10) as `nodeshim reporter` has, and by default its own
// HTTP/2 connection, as a DaemonSet's pods each have theirs; Config.Conns
// shares fewer connections among them.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshim/nodeshim/cluster/controller"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

// Where deploy/ puts the reporter and the controller.
const (
	reporterNamespace   = "nodeshim"
	reporterSA          = "nodeshim-reporter"
	controllerNamespace = "nodeshim-controller"
	controllerSA        = "nodeshim-controller"
)

// Config is what Run simulates and for how long.
type Config struct {
	// Nodes is the number of simulated nodes.
	Nodes int
	// Conns is how many HTTP/2 connections the reporters share (and,
	// separately, the kubelet heartbeats); one per node when 0.
	Conns int
	// Ramp spreads the start of the reporters (and of the kubelet
	// heartbeats), as a DaemonSet's pods come up over time.
	Ramp time.Duration
	// Warmup is waited after the start, before a phase is measured.
	Warmup time.Duration
	// Kubelet, Idle, Latency and Flap are the lengths of the measured
	// phases.
	Kubelet, Idle, Latency, Flap time.Duration
	// ChangeRate is the condition changes per second of the latency phase,
	// each on the next node.
	ChangeRate float64
	// FlapFraction of the nodes toggle FlapType every FlapPeriod.
	FlapFraction float64
	FlapPeriod   time.Duration
	// Report is the capability report every shim serves.
	Report *capability.Report
	// Poll makes the reporters read their shims every poll interval, as
	// against a shim without long polls; by default they long-poll.
	Poll bool
	// Logf reports progress; nothing when nil.
	Logf func(format string, args ...any)
}

// Phase is what one phase cost the API server.
type Phase struct {
	// Name is kubelet, startup, idle, latency or flap.
	Name string
	// Seconds is the measured length.
	Seconds float64
	// Writes and Reads count the API server's requests (writes: POST,
	// PUT, PATCH, DELETE; reads: GET, LIST); WritesByResource splits the
	// writes by resource[/subresource].
	Writes, Reads                     float64
	WritesByResource, ReadsByResource map[string]float64
	// APIServerCPU, EtcdCPU and HarnessCPU are CPU cores used on average:
	// CPU seconds per second.
	APIServerCPU, EtcdCPU, HarnessCPU float64
	// APIServerRSS and EtcdRSS are resident memory at the phase's end.
	APIServerRSS, EtcdRSS int64
	// EventsDropped counts the transition Events the reporters' rate
	// limits held back.
	EventsDropped float64
	// Latency is the change-to-Node time, in the latency and flap phases.
	Latency *Latency
	// PatchP50 and PatchP99 are the reporters' status patch durations
	// (the upper bounds of their histogram's buckets), the API server's
	// share of Latency.
	PatchP50, PatchP99 time.Duration
}

// WritesPerNodeSecond is the write rate per node.
func (p Phase) WritesPerNodeSecond(nodes int) float64 {
	return p.Writes / p.Seconds / float64(nodes)
}

// Result is a run's phases.
type Result struct {
	// Nodes and Conns are the run's Config.Nodes and connections.
	Nodes, Conns int
	// Phases in the order they ran.
	Phases []Phase
	// Warnings counts the reporters' and controller's warning logs.
	Warnings int64
}

// Phase returns the phase called name, and false when there is none.
func (r Result) Phase(name string) (Phase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

type harness struct {
	tb        testing.TB
	cfg       Config
	cluster   *kubetest.Cluster
	admin     kubernetes.Interface
	apiPid    int
	etcdPid   int
	metrics   *prometheus.Registry
	logger    *slog.Logger
	warnings  *atomic.Int64
	nodes     []string
	httpConns []*http.Client
}

// Run starts a cluster for tb, runs the phases of cfg against it and
// returns what they cost. The cluster is stopped when tb ends.
func Run(tb testing.TB, cfg Config) (Result, error) {
	tb.Helper()
	if cfg.Nodes <= 0 || cfg.Report == nil {
		return Result{}, errors.New("fleet: no nodes or no capability report")
	}
	if cfg.Conns <= 0 || cfg.Conns > cfg.Nodes {
		cfg.Conns = cfg.Nodes
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	apiBin, etcdBin := kubetest.Binaries(tb)
	h := &harness{tb: tb, cfg: cfg, cluster: kubetest.Start(tb), metrics: prometheus.NewRegistry(), warnings: new(atomic.Int64)}
	defer h.closeConns()
	h.logger = slog.New(&countingHandler{n: h.warnings, logf: tb.Logf})
	var err error
	if h.apiPid, err = FindProc("/proc", apiBin, h.cluster.Dir); err != nil {
		return Result{}, err
	}
	if h.etcdPid, err = FindProc("/proc", etcdBin, h.cluster.Dir); err != nil {
		return Result{}, err
	}
	adminCfg := h.cluster.AdminConfig()
	adminCfg.QPS, adminCfg.Burst = 1000, 2000 // setting up, not measured
	if h.admin, err = kubernetes.NewForConfig(adminCfg); err != nil {
		return Result{}, fmt.Errorf("admin client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.createNodes(ctx); err != nil {
		return Result{}, err
	}
	res := Result{Nodes: cfg.Nodes, Conns: cfg.Conns}
	kubelet, err := h.runKubelet(ctx)
	if err != nil {
		return res, err
	}
	res.Phases = append(res.Phases, kubelet)
	phases, err := h.runNodeshim(ctx)
	res.Phases = append(res.Phases, phases...)
	res.Warnings = h.warnings.Load()
	return res, err
}

func (h *harness) createNodes(ctx context.Context) error {
	h.cfg.Logf("creating %d nodes", h.cfg.Nodes)
	h.nodes = make([]string, h.cfg.Nodes)
	for i := range h.nodes {
		h.nodes[i] = fmt.Sprintf("fleet-%04d", i)
	}
	return parallel(32, len(h.nodes), func(i int) error {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: h.nodes[i], Labels: map[string]string{
				"kubernetes.io/hostname": h.nodes[i], "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
			Status: corev1.NodeStatus{Conditions: KubeletConditions(time.Now())},
		}
		if _, err := h.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", h.nodes[i], err)
		}
		return nil
	})
}

// parallel runs f(0..n-1) on at most workers goroutines and returns the
// first error.
func parallel(workers, n int, f func(int) error) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first error
		once  sync.Once
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// clients returns one clientset per node from base, each with client-go's
// default rate limit, sharing h.cfg.Conns HTTP/2 connections. A Dial
// function keeps client-go from caching the transport by TLS
// configuration, which would put every client on one connection.
func (h *harness) clients(base *rest.Config, userAgent string) ([]kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = 0, 0 // client-go's defaults, as the commands build them
	cfg.UserAgent = userAgent
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	out := make([]kubernetes.Interface, h.cfg.Nodes)
	per := (h.cfg.Nodes + h.cfg.Conns - 1) / h.cfg.Conns
	var hc *http.Client
	for i := range out {
		if i%per == 0 {
			c, err := rest.HTTPClientFor(cfg)
			if err != nil {
				return nil, fmt.Errorf("HTTP client: %w", err)
			}
			hc = c
			h.httpConns = append(h.httpConns, c)
		}
		cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		out[i] = cs
	}
	return out, nil
}

func (h *harness) closeConns() {
	for _, c := range h.httpConns {
		c.CloseIdleConnections()
	}
	h.httpConns = nil
}

// ramped starts run(i) for every node, spread over cfg.Ramp, and returns
// a function that waits for all of them to return.
func (h *harness) ramped(ctx context.Context, run func(ctx context.Context, i int)) (wait func()) {
	var wg sync.WaitGroup
	for i := range h.nodes {
		delay := time.Duration(int64(h.cfg.Ramp) * int64(i) / int64(len(h.nodes)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			run(ctx, i)
		}()
	}
	return wg.Wait
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (h *harness) runKubelet(ctx context.Context) (Phase, error) {
	h.cfg.Logf("kubelet reference: %d heartbeats", len(h.nodes))
	cs, err := h.clients(h.cluster.AdminConfig(), "fleet-kubelet")
	if err != nil {
		return Phase{}, err
	}
	kctx, stop := context.WithCancel(ctx)
	wait := h.ramped(kctx, func(ctx context.Context, i int) {
		// Kubelets started long ago: each reports its status at its own
		// phase of the period.
		hb := &KubeletHeartbeat{Node: h.nodes[i], Client: cs[i], FirstReport: rand.N(KubeletReportPeriod)}
		hb.Run(ctx)
	})
	defer func() { stop(); wait(); h.closeConns() }()
	if err := sleep(ctx, h.cfg.Ramp+h.cfg.Warmup); err != nil {
		return Phase{}, err
	}
	m, err := h.begin()
	if err != nil {
		return Phase{}, err
	}
	if err := sleep(ctx, h.cfg.Kubelet); err != nil {
		return Phase{}, err
	}
	return h.end("kubelet", m)
}

func (h *harness) runNodeshim(ctx context.Context) ([]Phase, error) {
	reporterCfg, controllerCfg, err := h.grant(ctx)
	if err != nil {
		return nil, err
	}
	nctx, stop := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		factory informers.SharedInformerFactory
	)
	defer func() {
		stop()
		if factory != nil {
			factory.Shutdown()
		}
		wg.Wait()
		h.closeConns()
	}()

	// The controller, as `nodeshim controller` builds it.
	capi, err := kubeapi.ForConfig(controllerCfg)
	if err != nil {
		return nil, fmt.Errorf("controller client: %w", err)
	}
	ctl, err := controller.New(controller.Options{
		Client: capi, ReporterNamespace: reporterNamespace, ElectionNamespace: controllerNamespace,
		Identity: "fleet-controller", Logger: h.logger, Metrics: controller.NewMetrics(h.metrics),
	})
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctl.Run(nctx) }()

	// The watch that times the changes.
	tracker := NewTracker()
	factory = informers.NewSharedInformerFactory(h.admin, 0)
	ni := factory.Core().V1().Nodes().Informer()
	if _, err := ni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				tracker.Observe(n, time.Now())
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watch nodes: %w", err)
	}
	factory.Start(nctx.Done())
	if !cache.WaitForCacheSync(nctx.Done(), ni.HasSynced) {
		return nil, errors.New("node watch did not sync")
	}

	h.cfg.Logf("starting %d reporters over %s", len(h.nodes), h.cfg.Ramp)
	rcs, err := h.clients(reporterCfg, "nodeshim-reporter/fleet")
	if err != nil {
		return nil, err
	}
	rm := reporter.NewMetrics(h.metrics) // one set for all: the sums are what is read
	shims := make([]*Shim, len(h.nodes))
	reporters := make([]*reporter.Reporter, len(h.nodes))
	for i, name := range h.nodes {
		shims[i] = NewShim(h.cfg.Report)
		var shim reporter.Shim = shims[i]
		if h.cfg.Poll {
			shim = PollingShim{shims[i]}
		}
		r, err := reporter.New(reporter.Options{
			// The reporter's own narrow client (kubeapi) over this node's
			// REST clients, as nodeshim-reporter builds it from a config.
			NodeName: name, Namespace: reporterNamespace, Shim: shim,
			Client:  kubeapi.New(rcs[i].CoreV1().RESTClient(), rcs[i].CoordinationV1().RESTClient()),
			Version: "fleet", Logger: h.logger, Metrics: rm,
		})
		if err != nil {
			return nil, err
		}
		reporters[i] = r
	}
	var phases []Phase
	m, err := h.begin()
	if err != nil {
		return nil, err
	}
	wait := h.ramped(nctx, func(ctx context.Context, i int) { _ = reporters[i].Run(ctx) })
	wg.Add(1)
	go func() { defer wg.Done(); wait() }()
	if err := h.waitPublished(nctx, reporters); err != nil {
		return nil, err
	}
	if err := sleep(ctx, h.cfg.Warmup); err != nil {
		return nil, err
	}
	p, err := h.end("startup", m)
	if err != nil {
		return nil, err
	}
	phases = append(phases, p)

	h.cfg.Logf("idle for %s", h.cfg.Idle)
	if m, err = h.begin(); err != nil {
		return phases, err
	}
	if err := sleep(ctx, h.cfg.Idle); err != nil {
		return phases, err
	}
	if p, err = h.end("idle", m); err != nil {
		return phases, err
	}
	phases = append(phases, p)

	// Changes on distinct nodes, one at a time.
	h.cfg.Logf("latency: %.0f changes/s for %s", h.cfg.ChangeRate, h.cfg.Latency)
	flapped := make([]bool, len(h.nodes)) // FlapType is False
	toggle := func(phase string, i int) {
		flapped[i] = !flapped[i]
		want := corev1.ConditionTrue
		if flapped[i] {
			want = corev1.ConditionFalse
		}
		tracker.Expect(phase, h.nodes[i], reporter.NodeConditionType(FlapType), want, time.Now())
		shims[i].SetFlap(!flapped[i])
	}
	if m, err = h.begin(); err != nil {
		return phases, err
	}
	every(ctx, time.Duration(float64(time.Second)/h.cfg.ChangeRate), h.cfg.Latency, func(k int) { toggle("latency", k%len(h.nodes)) })
	if p, err = h.end("latency", m); err != nil {
		return phases, err
	}
	if err := sleep(ctx, 3*time.Second); err != nil { // the last changes' way to the watch
		return phases, err
	}
	lat := tracker.Latency("latency")
	p.Latency = &lat
	phases = append(phases, p)

	// A fraction of the nodes flapping, each every FlapPeriod, at phases
	// spread over the period.
	flappers := max(1, int(float64(len(h.nodes))*h.cfg.FlapFraction))
	h.cfg.Logf("flap: %d nodes every %s for %s", flappers, h.cfg.FlapPeriod, h.cfg.Flap)
	if m, err = h.begin(); err != nil {
		return phases, err
	}
	every(ctx, h.cfg.FlapPeriod/time.Duration(flappers), h.cfg.Flap, func(k int) { toggle("flap", len(h.nodes)-1-k%flappers) })
	if p, err = h.end("flap", m); err != nil {
		return phases, err
	}
	if err := sleep(ctx, 3*time.Second); err != nil {
		return phases, err
	}
	flap := tracker.Latency("flap")
	p.Latency = &flap
	phases = append(phases, p)
	return phases, nil
}

// every calls f(0), f(1), ... every interval for d.
func every(ctx context.Context, interval, d time.Duration, f func(int)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	end := time.After(d)
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-end:
			return
		case <-t.C:
			f(k)
		}
	}
}

// grant applies deploy/'s reporter and controller access and returns
// their ServiceAccounts' configurations once RBAC lets them in.
func (h *harness) grant(ctx context.Context) (reporterCfg, controllerCfg *rest.Config, err error) {
	for _, access := range []func() ([]byte, error){deploy.ReporterAccess, deploy.ControllerAccess} {
		b, err := access()
		if err != nil {
			return nil, nil, err
		}
		h.cluster.MustApply(h.tb, b)
	}
	reporterCfg = h.cluster.ServiceAccountConfig(h.tb, reporterNamespace, reporterSA)
	controllerCfg = h.cluster.ServiceAccountConfig(h.tb, controllerNamespace, controllerSA)
	controllerCfg.QPS, controllerCfg.Burst = 0, 0
	controllerCfg.UserAgent = "nodeshim-controller/fleet"
	// RBAC takes effect through the API server's informers.
	cs, err := kubernetes.NewForConfig(reporterCfg)
	if err != nil {
		return nil, nil, err
	}
	for {
		_, err := cs.CoordinationV1().Leases(reporterNamespace).Get(ctx, "probe", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return reporterCfg, controllerCfg, nil
		}
		if !apierrors.IsForbidden(err) {
			return nil, nil, fmt.Errorf("reporter's access: %w", err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
}

// waitPublished waits until every reporter has patched its Node and
// renewed its Lease once.
func (h *harness) waitPublished(ctx context.Context, reporters []*reporter.Reporter) error {
	for {
		done := 0
		for _, r := range reporters {
			if s := r.State(); !s.LastPublish.IsZero() && !s.LastRenew.IsZero() {
				done++
			}
		}
		if done == len(reporters) {
			return nil
		}
		if err := sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("%d of %d reporters published: %w", done, len(reporters), err)
		}
	}
}

// meter is the state at a phase's start.
type meter struct {
	at              time.Time
	req             Requests
	api, etcd, self ProcUsage
	dropped         float64
	patches         []bucket
}

func (h *harness) begin() (meter, error) {
	var m meter
	var err error
	if m.req, err = ScrapeRequests(context.Background(), h.admin); err != nil {
		return m, err
	}
	if m.api, err = ReadProc("/proc", h.apiPid); err != nil {
		return m, err
	}
	if m.etcd, err = ReadProc("/proc", h.etcdPid); err != nil {
		return m, err
	}
	if m.self, err = ReadProc("/proc", os.Getpid()); err != nil {
		return m, err
	}
	m.dropped = h.counter("nodeshim_reporter_events_dropped_total")
	m.patches = h.histogram("nodeshim_reporter_publish_duration_seconds")
	m.at = time.Now()
	return m, nil
}

func (h *harness) end(name string, start meter) (Phase, error) {
	m, err := h.begin()
	if err != nil {
		return Phase{}, err
	}
	secs := m.at.Sub(start.at).Seconds()
	d := m.req.Sub(start.req)
	p := Phase{Name: name, Seconds: secs,
		APIServerCPU: (m.api.CPU - start.api.CPU).Seconds() / secs,
		EtcdCPU:      (m.etcd.CPU - start.etcd.CPU).Seconds() / secs,
		HarnessCPU:   (m.self.CPU - start.self.CPU).Seconds() / secs,
		APIServerRSS: m.api.RSS, EtcdRSS: m.etcd.RSS,
		EventsDropped: m.dropped - start.dropped,
	}
	p.PatchP50, p.PatchP99 = quantile(start.patches, m.patches, 0.5), quantile(start.patches, m.patches, 0.99)
	p.Writes, p.WritesByResource = d.Writes()
	p.Reads, p.ReadsByResource = d.Reads()
	h.cfg.Logf("%s: %.0f s, %.1f writes/s (%s), API server %.2f cores", name, secs, p.Writes/secs,
		FormatRates(p.WritesByResource, secs), p.APIServerCPU)
	return p, nil
}

// counter sums the counter called name in h.metrics.
func (h *harness) counter(name string) float64 {
	fams, err := h.metrics.Gather()
	if err != nil {
		return 0
	}
	var v float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// bucket is one cumulative bucket of a histogram.
type bucket struct {
	le    float64
	count uint64
}

// histogram returns the cumulative buckets of the histogram called name
// in h.metrics, nil when it has none.
func (h *harness) histogram(name string) []bucket {
	fams, err := h.metrics.Gather()
	if err != nil {
		return nil
	}
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		var out []bucket
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			out = append(out, bucket{le: b.GetUpperBound(), count: b.GetCumulativeCount()})
		}
		return out
	}
	return nil
}

// quantile returns the upper bound of the bucket that holds the q-th
// quantile of the observations between before and after; zero when there
// are none, and the last bound when the quantile lies beyond it.
func quantile(before, after []bucket, q float64) time.Duration {
	if len(after) == 0 || len(before) != len(after) {
		return 0
	}
	// Observations beyond the last bound are not in any bucket; the
	// last bucket's count is the best total there is.
	total := after[len(after)-1].count - before[len(before)-1].count
	if total == 0 {
		return 0
	}
	for i := range after {
		if float64(after[i].count-before[i].count) >= q*float64(total) {
			return time.Duration(after[i].le * float64(time.Second))
		}
	}
	return time.Duration(after[len(after)-1].le * float64(time.Second))
}

// countingHandler counts warnings and errors and passes the first few on
// to the test log: 1,000 reporters must not flood it.
type countingHandler struct {
	n     *atomic.Int64
	logf  func(string, ...any)
	attrs []slog.Attr
}

const loggedWarnings = 20

func (c *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (c *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if c.n.Add(1) > loggedWarnings {
		return nil
	}
	var b strings.Builder
	h := slog.NewTextHandler(&b, nil).WithAttrs(c.attrs)
	_ = h.Handle(context.Background(), r)
	c.logf("%s", strings.TrimSpace(b.String()))
	return nil
}

func (c *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &countingHandler{n: c.n, logf: c.logf, attrs: append(append([]slog.Attr(nil), c.attrs...), attrs...)}
}

func (c *countingHandler) WithGroup(string) slog.Handler { return c }
