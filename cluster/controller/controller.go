package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/cluster/election"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/reporter"
)

// Defaults of Options.
const (
	// DefaultGracePeriod is how long a reporter's Lease may go unrenewed
	// before its node's conditions turn Unknown: kubelet's node monitor
	// grace period, four of the reporter's renewal intervals.
	DefaultGracePeriod = 40 * time.Second
	// DefaultSyncPeriod is how often the leader looks at every node again,
	// besides the Lease and Node events and the timer of each Lease's
	// grace period (kube-controller-manager's node monitor period).
	DefaultSyncPeriod = 5 * time.Second
	// DefaultElectionName names the leader election's Lease.
	DefaultElectionName = "nodeshim-controller"
	// client-go's defaults for core components.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultWorkers       = 2
	DefaultEventQPS      = 1
	DefaultEventBurst    = 100
	// DefaultRequestTimeout bounds each write.
	DefaultRequestTimeout = 10 * time.Second
	// Component is the field manager of the controller's patches and the
	// source of its Events.
	Component = "nodeshim-controller"
)

// Options configure a Controller. Zero values take the defaults above.
type Options struct {
	// Client talks to the API server.
	Client *kubeapi.Client
	// ReporterNamespace holds the reporters' Leases, one per node, named
	// after the node (the reporters' --namespace).
	ReporterNamespace string
	// ElectionNamespace and ElectionName name the leader election's Lease
	// (the controller's own namespace).
	ElectionNamespace, ElectionName string
	// Identity is this replica's name in the election; unique per replica.
	Identity string
	// EventNamespace holds the Events about Nodes;
	// reporter.DefaultEventNamespace when empty.
	EventNamespace string

	// GracePeriod is how long a Lease may go unrenewed before the node's
	// conditions turn Unknown.
	GracePeriod time.Duration
	// SyncPeriod is how often every node is looked at again.
	SyncPeriod time.Duration
	// LeaseDuration, RenewDeadline and RetryPeriod drive the election as in
	// client-go's leaderelection (see cluster/election).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Workers is how many nodes are synced at once.
	Workers int
	// EventQPS and EventBurst shape the token bucket of ReporterStopped
	// Events: a cluster-wide outage must not turn into an Event storm.
	EventQPS   float32
	EventBurst int
	// RequestTimeout bounds each write.
	RequestTimeout time.Duration

	// WhileLeading, when set, runs while this replica leads, beside the
	// marking of silent nodes, until the lead is lost (its context
	// ends): another controller of the cluster's, e.g. PodMigrations'
	// (cluster/migration). Its error is logged.
	WhileLeading func(ctx context.Context) error

	// Clock measures the grace periods; the real clock when nil.
	Clock clock.WithTicker
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Metrics; unregistered metrics when nil.
	Metrics *Metrics
}

// Controller marks the nodes whose reporter went silent.
type Controller struct {
	opts    Options
	log     *slog.Logger
	m       *Metrics
	clk     clock.WithTicker
	limiter flowcontrol.PassiveRateLimiter

	// Informers on Nodes and on the reporters' Leases, and their caches
	// (Nodes keyed by name, Leases by namespace/name).
	nodeInformer, leaseInformer cache.SharedIndexInformer
	nodes, leases               cache.Indexer
	elector                     *election.Elector
	observed                    observations
	eventSequence               int

	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[string] // nil while not leading
	silent map[string]bool
}

// New returns a Controller for opts.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil {
		return nil, errors.New("controller: no API client")
	}
	if opts.ReporterNamespace == "" || opts.ElectionNamespace == "" {
		return nil, errors.New("controller: no namespace for the reporters' Leases or for the election")
	}
	if opts.Identity == "" {
		return nil, errors.New("controller: no identity for the election")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.GracePeriod, DefaultGracePeriod)
	def(&opts.SyncPeriod, DefaultSyncPeriod)
	def(&opts.LeaseDuration, DefaultLeaseDuration)
	def(&opts.RenewDeadline, DefaultRenewDeadline)
	def(&opts.RetryPeriod, DefaultRetryPeriod)
	def(&opts.RequestTimeout, DefaultRequestTimeout)
	if opts.ElectionName == "" {
		opts.ElectionName = DefaultElectionName
	}
	if opts.EventNamespace == "" {
		opts.EventNamespace = reporter.DefaultEventNamespace
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.EventQPS <= 0 {
		opts.EventQPS = DefaultEventQPS
	}
	if opts.EventBurst <= 0 {
		opts.EventBurst = DefaultEventBurst
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	c := &Controller{
		opts:    opts,
		log:     opts.Logger,
		m:       opts.Metrics,
		clk:     opts.Clock,
		limiter: flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(opts.EventQPS, opts.EventBurst, opts.Clock),
		silent:  map[string]bool{},
	}
	elector, err := election.New(election.Config{
		Leases: opts.Client, Namespace: opts.ElectionNamespace, Name: opts.ElectionName, Identity: opts.Identity,
		FieldManager:  Component,
		LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
		OnNewLeader: func(id string) {
			c.log.Info("leader", "identity", id, "self", id == opts.Identity)
		},
		Clock: opts.Clock, Logger: opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	c.elector = elector
	// The informers client-go's informer factory would build, on the
	// small client. No resync: the leader's own SyncPeriod looks at every
	// node again from the caches.
	cl, ns := opts.Client, opts.ReporterNamespace
	c.nodeInformer = newInformer(&corev1.Node{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cl.ListNodes(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cl.WatchNodes(ctx, o) })
	c.leaseInformer = newInformer(&coordinationv1.Lease{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cl.ListLeases(ctx, ns, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cl.WatchLeases(ctx, ns, o)
		})
	c.nodes, c.leases = c.nodeInformer.GetIndexer(), c.leaseInformer.GetIndexer()
	if _, err := c.nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { c.nodeChanged(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.observed.forget(key)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watch nodes: %w", err)
	}
	if _, err := c.leaseInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.leaseChanged(obj, false) },
		UpdateFunc: func(_, obj any) { c.leaseChanged(obj, false) },
		DeleteFunc: func(obj any) { c.leaseChanged(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("watch leases in %s: %w", opts.ReporterNamespace, err)
	}
	return c, nil
}

// newInformer returns a shared informer of objects like example through
// list and watch, with the namespace index of client-go's generated
// informers.
func newInformer(example runtime.Object, list cache.ListWithContextFunc, watch cache.WatchFuncWithContext) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformerWithOptions(
		&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watch},
		example,
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
	)
}

// nodeChanged queues a Node that carries nodeshim conditions.
func (c *Controller) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || len(reporter.Published(n.Status.Conditions)) == 0 {
		return
	}
	c.observed.observeHeartbeat(n.Name, heartbeat(n.Status.Conditions), c.clk.Now())
	c.enqueue(n.Name)
}

// leaseChanged records a sighting of a reporter's Lease, in every replica,
// and queues its node.
func (c *Controller) leaseChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	name := l.Name
	if deleted {
		l = nil
	}
	c.observed.observeLease(name, l, c.clk.Now())
	c.enqueue(name)
}

func (c *Controller) enqueue(name string) {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q != nil {
		q.Add(name)
	}
}

// Run watches Leases and Nodes and takes part in the election until ctx is
// done; while it leads, it marks silent nodes. A replica that loses the
// lead stops writing and stands for election again.
func (c *Controller) Run(ctx context.Context) error {
	var informers sync.WaitGroup
	defer informers.Wait()
	for _, inf := range []cache.SharedIndexInformer{c.nodeInformer, c.leaseInformer} {
		informers.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.nodeInformer.HasSynced, c.leaseInformer.HasSynced) {
		return nil // ctx done
	}
	c.log.Info("watching", "reporterNamespace", c.opts.ReporterNamespace, "grace", c.opts.GracePeriod,
		"election", c.opts.ElectionNamespace+"/"+c.opts.ElectionName, "identity", c.opts.Identity)
	for ctx.Err() == nil {
		if err := c.campaign(ctx); err != nil {
			return err
		}
	}
	return nil
}

// campaign runs one election: it waits for the lead, marks silent nodes
// while it holds it, and returns when ctx is done or the lead is lost.
// The workers stop before the election's Lease is released, so that two
// replicas never write at once.
func (c *Controller) campaign(ctx context.Context) error {
	c.elector.Run(ctx, c.lead)
	return nil
}

// lead marks silent nodes until ctx is done.
func (c *Controller) lead(ctx context.Context) {
	c.log.Info("leading")
	c.m.leader.Set(1)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	c.mu.Lock()
	c.queue = q
	clear(c.silent)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); c.work(ctx, q) }()
	}
	if f := c.opts.WhileLeading; f != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("while leading", "err", err)
			}
		}()
	}
	c.enqueueAll()
	t := c.clk.NewTicker(c.opts.SyncPeriod)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C():
			c.enqueueAll()
		}
	}
	t.Stop()
	c.mu.Lock()
	c.queue = nil
	clear(c.silent)
	c.mu.Unlock()
	q.ShutDown()
	wg.Wait()
	c.m.silent.Set(0)
	c.m.leader.Set(0)
	c.log.Info("stopped leading")
}

// enqueueAll queues every Node with nodeshim conditions.
func (c *Controller) enqueueAll() {
	for _, n := range c.nodes.List() {
		c.nodeChanged(n)
	}
}

func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) {
	for {
		name, shutdown := q.Get()
		if shutdown {
			return
		}
		// A queue shut down still hands out what it holds: a replica
		// that no longer leads must not write.
		if ctx.Err() != nil {
			q.Done(name)
			return
		}
		after, err := c.sync(ctx, name)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				c.m.failures.Inc()
				c.log.Warn("mark node", "node", name, "err", err)
				q.AddRateLimited(name)
			}
		default:
			q.Forget(name)
			if after > 0 {
				q.AddAfter(name, after)
			}
		}
		q.Done(name)
	}
}

// sync looks at one node: when its reporter's Lease is stale it marks the
// node's nodeshim conditions Unknown; otherwise it returns when to look
// again, at the end of the grace period.
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.nodes.GetByKey(name)
	if err != nil {
		return 0, err
	}
	node, ok := obj.(*corev1.Node)
	if !exists || !ok {
		c.observed.forget(name)
		c.setSilent(name, false)
		return 0, nil
	}
	if len(reporter.Published(node.Status.Conditions)) == 0 {
		c.setSilent(name, false)
		return 0, nil
	}
	obj, exists, err = c.leases.GetByKey(c.opts.ReporterNamespace + "/" + name)
	if err != nil {
		return 0, err
	}
	var lease *coordinationv1.Lease
	if exists {
		lease, _ = obj.(*coordinationv1.Lease)
	}
	// The caches may be ahead of the event handlers: record what they
	// hold before deciding.
	now := c.clk.Now()
	c.observed.observeHeartbeat(name, heartbeat(node.Status.Conditions), now)
	seen := c.observed.observeLease(name, lease, now)
	stale, left := Stale(seen, now, c.opts.GracePeriod)
	c.setSilent(name, stale)
	if !stale {
		return left, nil
	}
	msg := Message(c.opts.ReporterNamespace, name, lease)
	marks := Unknown(node.Status.Conditions, msg, metav1.NewTime(now).Rfc3339Copy())
	if len(marks) == 0 {
		return 0, nil
	}
	if err := c.patch(ctx, node, marks); err != nil {
		return 0, err
	}
	c.m.marked.Inc()
	c.log.Info("marked node's nodeshim conditions Unknown", "node", name, "conditions", len(marks), "message", msg)
	c.event(ctx, node, msg, now)
	return 0, nil
}

// patch writes marks onto the Node's status with a strategic-merge patch
// that names only those condition types (merged by type: kubelet's and
// every other condition stay as they are) and carries the resourceVersion
// the decision was made on: if the Node changed since (the reporter came
// back and published), the API server answers Conflict and the node is
// looked at again rather than overwritten.
func (c *Controller) patch(ctx context.Context, node *corev1.Node, marks []corev1.NodeCondition) error {
	conds := make([]map[string]any, 0, len(marks))
	for _, m := range marks {
		// Only these fields: lastHeartbeatTime stays the reporter's.
		conds = append(conds, map[string]any{
			"type": m.Type, "status": m.Status, "reason": m.Reason, "message": m.Message,
			"lastTransitionTime": m.LastTransitionTime,
		})
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"status":   map[string]any{"conditions": conds},
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if err := c.opts.Client.PatchNodeStatus(rctx, node.Name, body, Component); err != nil {
		return fmt.Errorf("patch status of node %s: %w", node.Name, err)
	}
	return nil
}

// event records a Warning Event about the Node, through the token bucket.
func (c *Controller) event(ctx context.Context, node *corev1.Node, msg string, now time.Time) {
	if !c.limiter.TryAccept() {
		c.m.eventsDropped.Inc()
		return
	}
	c.mu.Lock()
	c.eventSequence++
	seq := c.eventSequence
	c.mu.Unlock()
	ts := metav1.NewTime(now)
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      node.Name + "." + strconv.FormatInt(now.UnixNano(), 16) + "." + strconv.Itoa(seq),
			Namespace: c.opts.EventNamespace,
		},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		Reason:              reporter.ReasonReporterStopped,
		Message:             "nodeshim conditions set to Unknown: " + msg,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: Component},
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
		ReportingController: "nodeshim.io/controller",
		ReportingInstance:   c.opts.Identity,
		Action:              "MarkUnknown",
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if err := c.opts.Client.CreateEvent(rctx, e); err != nil {
		c.m.eventsDropped.Inc()
		c.log.Warn("create event", "node", node.Name, "err", err)
	}
}

// setSilent keeps the silent-nodes gauge.
func (c *Controller) setSilent(name string, silent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil { // not leading
		return
	}
	if silent {
		c.silent[name] = true
	} else {
		delete(c.silent, name)
	}
	c.m.silent.Set(float64(len(c.silent)))
}
