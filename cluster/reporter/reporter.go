package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults of Options.
const (
	DefaultPollInterval     = time.Second
	DefaultLongPollWait     = 30 * time.Second
	DefaultRenewInterval    = 10 * time.Second
	DefaultLeaseDuration    = 40 * time.Second
	DefaultResyncPeriod     = 5 * time.Minute
	DefaultBackoffInitial   = 200 * time.Millisecond
	DefaultBackoffMax       = 7 * time.Second
	DefaultJitterFactor     = 0.1
	DefaultUnreachableAfter = 3
	DefaultEventQPS         = 1.0 / 30
	DefaultEventBurst       = 10
	DefaultRequestTimeout   = 10 * time.Second
	// DefaultEventNamespace holds the Events about Nodes: the API server
	// accepts core/v1 Events about a cluster-scoped object only there.
	DefaultEventNamespace = metav1.NamespaceDefault
	// Component is the Events' source component and the Lease's holder prefix.
	Component = "nodeshim-reporter"
)

// Options configure a Reporter. Zero durations take the defaults above.
type Options struct {
	// NodeName is the Node to report on, and the Lease's name.
	NodeName string
	// Namespace holds the Lease (the reporter's own namespace).
	Namespace string
	// EventNamespace holds the Events; DefaultEventNamespace when empty.
	EventNamespace string
	// Client talks to the API server: kubeapi.ForConfig, or kubeapi.New
	// over a clientset's REST clients.
	Client API
	// Shim is read for the status.
	Shim Shim
	// Clock drives every interval; the real clock when nil.
	Clock clock.WithTicker
	// Version goes into AnnotationVersion.
	Version string
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Metrics; unregistered metrics when nil.
	Metrics *Metrics

	// PollInterval is how often the shim is read, when it is not long
	// polled (a Shim that is not a LongPoller, or something to retry).
	PollInterval time.Duration
	// LongPollWait is the longest a long poll of a LongPoller shim waits
	// for a change; the resync period shortens it when due sooner.
	LongPollWait time.Duration
	// RenewInterval is how often the Lease is renewed, before jitter.
	RenewInterval time.Duration
	// LeaseDuration is the Lease's spec.leaseDurationSeconds.
	LeaseDuration time.Duration
	// ResyncPeriod is the longest time between two status patches.
	ResyncPeriod time.Duration
	// BackoffInitial and BackoffMax bound the retry delays after failures.
	BackoffInitial, BackoffMax time.Duration
	// Jitter returns the wait before the next renewal for a RenewInterval;
	// up to DefaultJitterFactor longer, at random, when nil.
	Jitter func(time.Duration) time.Duration
	// UnreachableAfter is how many reads of the shim in a row must fail
	// before the conditions say it is unreachable.
	UnreachableAfter int
	// EventQPS and EventBurst shape the token bucket of transition Events.
	EventQPS   float32
	EventBurst int
	// RequestTimeout bounds each API request and each read of the shim.
	RequestTimeout time.Duration

	// Report, when set and Client is a NodeLabeler, is read for the
	// Node's capability labels (v1alpha1.LabelPrefix; labels.go).
	Report ReportReader
	// RestoreHandler is the runtime handler of the restoring
	// RuntimeClass; DefaultRestoreHandler when empty.
	RestoreHandler string
}

// API is what the reporter asks of the Kubernetes API server;
// kubeapi.Client implements it.
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	PatchNodeStatus(ctx context.Context, name string, patch []byte, fieldManager string) error
	CreateEvent(ctx context.Context, e *corev1.Event) error
	GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	CreateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error)
	UpdateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error)
}

// Reporter publishes the shim's status for one Node.
type Reporter struct {
	opts    Options
	log     *slog.Logger
	m       *Metrics
	clk     clock.WithTicker
	limiter flowcontrol.PassiveRateLimiter

	// Owned by the status loop.
	nodeUID       types.UID
	seeded        bool
	published     []corev1.NodeCondition
	observed      []corev1.NodeCondition
	digest        string
	reportSent    string
	lastSent      time.Time
	resyncAt      time.Time
	shimErrs      int
	lastDoc       Snapshot
	haveDoc       bool
	pending       []corev1.Event
	statusRetry   Backoff
	oomSeen       uint64
	oomLimiter    flowcontrol.PassiveRateLimiter
	lastRecheck   time.Time
	polledGen     int64 // the generation the last long poll waited after
	publishFailed bool
	lastChange    time.Time // when a long poll last returned a change
	labels        labelState

	// Owned by the lease loop.
	lease       *coordinationv1.Lease
	leaseRetry  Backoff
	leaseFailed bool
	lastRenewOK time.Time

	// wake ends the status loop's long poll early: the lease loop asked
	// for a recheck.
	wake chan struct{}

	mu    sync.Mutex
	state State
	// rechecks is how many more times the status loop reads the Node back
	// after the Lease was renewed following a gap (see renewLease).
	rechecks int
}

// State is what a Reporter has published, for status pages and tests.
type State struct {
	// Conditions are the nodeshim conditions last patched onto the Node.
	Conditions []corev1.NodeCondition
	// Digest is the published AnnotationDigest.
	Digest string
	// LastPublish is when the status was last patched.
	LastPublish time.Time
	// LastRenew is when the Lease was last renewed.
	LastRenew time.Time
	// Labels are the capability labels last written to the Node.
	Labels map[string]string
}

// State returns what the reporter has published so far.
func (r *Reporter) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state
	s.Conditions = append([]corev1.NodeCondition(nil), s.Conditions...)
	s.Labels = maps.Clone(s.Labels)
	return s
}

// maxPendingEvents bounds the Events kept while the API server is away.
const maxPendingEvents = 64

// New returns a Reporter for opts.
func New(opts Options) (*Reporter, error) {
	if opts.NodeName == "" {
		return nil, errors.New("reporter: no node name")
	}
	if opts.Namespace == "" {
		return nil, errors.New("reporter: no namespace for the Lease")
	}
	if opts.Client == nil || opts.Shim == nil {
		return nil, errors.New("reporter: no API client or no shim")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.PollInterval, DefaultPollInterval)
	def(&opts.LongPollWait, DefaultLongPollWait)
	def(&opts.RenewInterval, DefaultRenewInterval)
	def(&opts.LeaseDuration, DefaultLeaseDuration)
	def(&opts.ResyncPeriod, DefaultResyncPeriod)
	def(&opts.BackoffInitial, DefaultBackoffInitial)
	def(&opts.BackoffMax, DefaultBackoffMax)
	def(&opts.RequestTimeout, DefaultRequestTimeout)
	if opts.EventNamespace == "" {
		opts.EventNamespace = DefaultEventNamespace
	}
	if opts.RestoreHandler == "" {
		opts.RestoreHandler = DefaultRestoreHandler
	}
	if opts.UnreachableAfter <= 0 {
		opts.UnreachableAfter = DefaultUnreachableAfter
	}
	if opts.EventQPS <= 0 {
		opts.EventQPS = DefaultEventQPS
	}
	if opts.EventBurst <= 0 {
		opts.EventBurst = DefaultEventBurst
	}
	if opts.Jitter == nil {
		opts.Jitter = func(d time.Duration) time.Duration {
			return d + time.Duration(rand.Float64()*DefaultJitterFactor*float64(d))
		}
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
	r := &Reporter{
		opts:        opts,
		log:         opts.Logger.With("node", opts.NodeName),
		m:           opts.Metrics,
		clk:         opts.Clock,
		limiter:     flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(opts.EventQPS, opts.EventBurst, opts.Clock),
		oomLimiter:  flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(opts.EventQPS, opts.EventBurst, opts.Clock),
		statusRetry: Backoff{Initial: opts.BackoffInitial, Max: opts.BackoffMax},
		leaseRetry:  Backoff{Initial: opts.BackoffInitial, Max: opts.BackoffMax},
		wake:        make(chan struct{}, 1),
	}
	return r, nil
}

// Run publishes until ctx is done. The status and the Lease have loops of
// their own, so that a slow status patch never delays a heartbeat.
func (r *Reporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.loop(ctx, r.syncStatus) }()
	go func() { defer wg.Done(); r.loop(ctx, r.renewLease) }()
	wg.Wait()
	return nil
}

// loop runs step until ctx is done, waiting on the clock for the delay
// each step returns.
func (r *Reporter) loop(ctx context.Context, step func(context.Context) time.Duration) {
	for {
		d := step(ctx)
		if d <= 0 && ctx.Err() == nil {
			continue // a long poll just returned a change: wait for the next
		}
		t := r.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// syncStatus reads the shim and, when needed, patches the Node's status;
// it returns the delay before the next call.
func (r *Reporter) syncStatus(ctx context.Context) time.Duration {
	doc, longPolled, err := r.readShim(ctx)
	var shimErr error
	if err != nil {
		r.m.failures.WithLabelValues(kindShim).Inc()
		r.m.shimUp.Set(0)
		r.shimErrs++
		if r.shimErrs == 1 || r.shimErrs == r.opts.UnreachableAfter {
			r.log.Warn("cannot read the shim", "failures", r.shimErrs, "err", err)
		}
		if r.shimErrs >= r.opts.UnreachableAfter || !r.haveDoc {
			shimErr = err
		} else {
			doc = r.lastDoc // a blip: keep the last answer for now
		}
	} else {
		r.m.shimUp.Set(1)
		r.shimErrs = 0
		r.lastDoc, r.haveDoc = doc, true
	}
	if ctx.Err() != nil {
		return 0
	}
	if err := r.publish(ctx, doc, shimErr); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("publish node status", "err", err)
		}
		r.publishFailed = true
		return r.statusRetry.Next()
	}
	r.publishFailed = false
	r.statusRetry.Reset()
	if shimErr == nil {
		r.queueOOMEvents(doc.OOMKills)
	}
	r.syncLabels(ctx, doc, shimErr)
	r.flushEvents(ctx)
	if longPolled && err == nil && doc.Generation != r.polledGen {
		// A change, or a shim restarted: wait for the next one at once,
		// unless changes come faster than PollInterval.
		now := r.clk.Now()
		quick := !r.lastChange.IsZero() && now.Sub(r.lastChange) < r.opts.PollInterval
		r.lastChange = now
		if !quick {
			return 0
		}
	}
	// Nothing changed within the long poll's wait (or a shim without long
	// polls answered at once, or the shim was read plainly): read again
	// after PollInterval, as a polling reporter does.
	return r.opts.PollInterval
}

// readShim reads the shim's status: a long poll when the shim is a
// LongPoller and nothing is left for the status loop to retry or recheck,
// a plain read otherwise. A long poll that ends unanswered, because its wait
// is over or the lease loop woke it, returns the last document: nothing
// changed.
func (r *Reporter) readShim(ctx context.Context) (doc Snapshot, longPolled bool, err error) {
	// A wake-up sent while a recheck was pending was for the plain reads
	// that followed: drop it, then look for a recheck again.
	select {
	case <-r.wake:
	default:
	}
	lp, ok := r.opts.Shim.(LongPoller)
	wait := r.opts.LongPollWait
	if !r.lastSent.IsZero() {
		wait = min(wait, r.opts.ResyncPeriod-r.clk.Since(r.lastSent))
	}
	if !ok || wait < time.Second || !r.haveDoc || r.shimErrs > 0 || len(r.pending) > 0 ||
		r.publishFailed || r.recheckPending() {
		r.m.shimReads.WithLabelValues(readPoll).Inc()
		rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
		defer cancel()
		doc, err = r.opts.Shim.Status(rctx)
		return doc, false, err
	}
	r.polledGen = r.lastDoc.Generation
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The shim answers when the wait is over; the clock's timer, a little
	// later, ends a poll that a shim without a wait would hold.
	t := r.clk.NewTimer(wait + time.Second)
	defer t.Stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-t.C():
			cancel()
		case <-r.wake:
			cancel()
		case <-wctx.Done():
		}
	}()
	r.m.shimReads.WithLabelValues(readLongPoll).Inc()
	doc, err = lp.StatusAfter(wctx, r.polledGen, wait)
	ended := wctx.Err() != nil && ctx.Err() == nil
	cancel()
	<-stopped
	if err != nil && ended {
		return r.lastDoc, true, nil
	}
	return doc, true, err
}

// recheckPending reports whether the lease loop asked the status loop to
// read the Node back.
func (r *Reporter) recheckPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rechecks > 0
}

func (r *Reporter) publish(ctx context.Context, doc Snapshot, shimErr error) error {
	if !r.seeded {
		// Learn what an earlier run published, so that a restart of the
		// reporter keeps the transition times.
		rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
		node, err := r.opts.Client.GetNode(rctx, r.opts.NodeName)
		cancel()
		if err != nil {
			r.m.failures.WithLabelValues(kindNode).Inc()
			return fmt.Errorf("get node %s: %w", r.opts.NodeName, err)
		}
		r.nodeUID = node.UID
		r.published = Published(node.Status.Conditions)
		r.observed = r.published
		r.digest = node.Annotations[AnnotationDigest]
		r.reportSent = node.Annotations[AnnotationReportDigest]
		r.seeded = true
	} else if r.recheckDue() {
		// Best effort: without an answer this sync goes on with what it
		// knows (a change is still stamped when seen), and the recheck
		// is tried again on the next one.
		if err := r.recheck(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug("read the node back", "err", err)
		}
	}
	known := make([]corev1.NodeConditionType, 0, len(r.observed))
	for _, c := range r.observed {
		known = append(known, c.Type)
	}
	want := Desired(doc.Document, shimErr, known)
	// The API server keeps condition times to the second: stamp them so,
	// and what is published compares equal to what is read back.
	now := metav1.NewTime(r.clk.Now()).Rfc3339Copy()
	// Transitions are stamped when observed, not when the API server
	// answers: a change seen during an outage keeps its time.
	observed, _, trans := Plan(r.observed, want, now)
	r.observed = observed
	for _, t := range trans {
		r.queueEvent(t, now.Time)
	}
	digest := Digest(want)
	// The report's digest stays as it was while the shim cannot be read.
	report := r.reportSent
	if shimErr == nil {
		if d := ReportDigest(doc.Report); d != "" {
			report = d
		}
	}
	if sameConditions(observed, r.published) && digest == r.digest && report == r.reportSent &&
		!r.lastSent.IsZero() && now.Time.Before(r.resyncAt) {
		return nil
	}
	annotations := map[string]string{AnnotationDigest: digest, AnnotationVersion: r.opts.Version}
	if report != "" {
		annotations[AnnotationReportDigest] = report
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations},
		"status":   map[string]any{"conditions": patchConditions(observed)},
	})
	if err != nil {
		return err
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	err = r.opts.Client.PatchNodeStatus(rctx, r.opts.NodeName, body, Component)
	cancel()
	if err != nil {
		r.m.failures.WithLabelValues(kindStatus).Inc()
		if apierrors.IsNotFound(err) {
			r.seeded = false // the Node was recreated: learn it again
		}
		return fmt.Errorf("patch status of node %s: %w", r.opts.NodeName, err)
	}
	r.m.publishDuration.Observe(time.Since(start).Seconds())
	r.m.writes.WithLabelValues(kindStatus).Inc()
	r.m.lastPublish.Set(float64(now.Unix()))
	changed := !sameConditions(observed, r.published)
	r.published, r.digest, r.reportSent, r.lastSent = observed, digest, report, now.Time
	// The next resync comes 90-100% of the period later, so that reporters
	// started together (a DaemonSet rollout) do not resync together.
	r.resyncAt = now.Time.Add(r.opts.ResyncPeriod - time.Duration(rand.Int64N(int64(r.opts.ResyncPeriod)/10+1)))
	if changed {
		r.log.Info("published node status", "digest", digest)
	}
	r.mu.Lock()
	r.state.Conditions, r.state.Digest, r.state.LastPublish = observed, digest, now.Time
	r.mu.Unlock()
	return nil
}

// recheckDue reports whether the status loop should read the Node back
// now: a recheck is pending and the last one is a RenewInterval old.
func (r *Reporter) recheckDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	if r.rechecks == 0 || (!r.lastRecheck.IsZero() && now.Sub(r.lastRecheck) < r.opts.RenewInterval) {
		return false
	}
	r.rechecks--
	r.lastRecheck = now
	return true
}

// recheck reads the Node back and takes every condition the nodeshim
// controller marked ReasonReporterStopped as the one observed last, so that
// Plan sees its status change and the next patch replaces it, with a new
// transition time. Other conditions keep what this reporter observed, with
// the times it observed them.
func (r *Reporter) recheck(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	node, err := r.opts.Client.GetNode(rctx, r.opts.NodeName)
	cancel()
	if err != nil {
		r.m.failures.WithLabelValues(kindNode).Inc()
		r.mu.Lock()
		r.rechecks++ // try again on the next sync
		r.lastRecheck = time.Time{}
		r.mu.Unlock()
		return fmt.Errorf("get node %s: %w", r.opts.NodeName, err)
	}
	r.published = Published(node.Status.Conditions)
	observed := slices.Clone(r.observed)
	for i, o := range observed {
		j := slices.IndexFunc(r.published, func(p corev1.NodeCondition) bool { return p.Type == o.Type })
		if j >= 0 && r.published[j].Reason == ReasonReporterStopped {
			observed[i] = r.published[j]
		}
	}
	r.observed = observed
	return nil
}

// patchConditions spells out every field of conds for a strategic-merge
// patch, which merges each condition's fields into the one of the same
// type: an empty reason or message must be sent as "" (the API types omit
// it) so that it replaces the one on the Node, such as the nodeshim
// controller's ReporterStopped message.
func patchConditions(conds []corev1.NodeCondition) []map[string]any {
	out := make([]map[string]any, 0, len(conds))
	for _, c := range conds {
		out = append(out, map[string]any{
			"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastHeartbeatTime": c.LastHeartbeatTime, "lastTransitionTime": c.LastTransitionTime,
		})
	}
	return out
}

// sameConditions reports whether a and b agree on everything but the
// heartbeat time.
func sameConditions(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

func (r *Reporter) queueEvent(t Transition, now time.Time) {
	if !r.limiter.TryAccept() || len(r.pending) >= maxPendingEvents {
		r.m.eventsDropped.Inc()
		return
	}
	c := t.Condition
	typ := corev1.EventTypeWarning
	if normal(c) {
		typ = corev1.EventTypeNormal
	}
	prev := t.Previous
	if prev == "" {
		prev = "absent"
	}
	ts := metav1.NewTime(now)
	r.pending = append(r.pending, corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      r.opts.NodeName + "." + strconv.FormatInt(now.UnixNano(), 16) + "." + strconv.Itoa(len(r.pending)),
			Namespace: r.opts.EventNamespace,
		},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.opts.NodeName, UID: r.nodeUID},
		Reason:              c.Reason,
		Message:             fmt.Sprintf("%s changed from %s to %s: %s", c.Type, prev, c.Status, c.Message),
		Type:                typ,
		Source:              corev1.EventSource{Component: Component, Host: r.opts.NodeName},
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
		ReportingController: "nodeshim.io/reporter",
		ReportingInstance:   r.opts.NodeName,
		Action:              "ConditionChanged",
	})
}

// flushEvents sends the queued Events; one that fails stays queued for the
// next round.
func (r *Reporter) flushEvents(ctx context.Context) {
	for len(r.pending) > 0 {
		e := r.pending[0]
		rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
		err := r.opts.Client.CreateEvent(rctx, &e)
		cancel()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			r.m.failures.WithLabelValues(kindEvent).Inc()
			r.log.Warn("create event", "reason", e.Reason, "namespace", e.Namespace, "err", err)
			if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
				// A Pod's namespace that is gone, or an Event the API
				// server will never take: retrying would block the rest.
				r.m.eventsDropped.Inc()
				r.pending = r.pending[1:]
				continue
			}
			return
		}
		r.m.writes.WithLabelValues(kindEvent).Inc()
		r.pending = r.pending[1:]
	}
}

// renewLease creates or renews the node's Lease and returns the delay
// before the next renewal: RenewInterval with jitter after a success, the
// next backoff step after a failure.
func (r *Reporter) renewLease(ctx context.Context) time.Duration {
	if err := r.tryRenewLease(ctx); err != nil {
		if ctx.Err() != nil {
			return 0
		}
		r.m.failures.WithLabelValues(kindLease).Inc()
		r.leaseFailed = true
		d := r.leaseRetry.Next()
		r.log.Warn("renew lease", "retryIn", d, "err", err)
		return d
	}
	r.leaseRetry.Reset()
	// After a gap in the heartbeat (the first renewal of this process, a
	// renewal that failed, or one long overdue), the nodeshim controller
	// may have marked the conditions Unknown (ReasonReporterStopped) while
	// the status loop, seeing nothing change, would not patch for up to
	// ResyncPeriod: have it read the Node back, now and once more a
	// RenewInterval later in case the controller's patch was already on
	// its way when the renewal landed.
	now := r.clk.Now()
	if r.lastRenewOK.IsZero() || r.leaseFailed || now.Sub(r.lastRenewOK) > 2*r.opts.RenewInterval {
		r.mu.Lock()
		r.rechecks = 2
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	r.leaseFailed, r.lastRenewOK = false, now
	r.m.leaseRenewals.Inc()
	r.m.writes.WithLabelValues(kindLease).Inc()
	return r.opts.Jitter(r.opts.RenewInterval)
}

func (r *Reporter) tryRenewLease(ctx context.Context) error {
	now := metav1.NewMicroTime(r.clk.Now())
	rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	defer cancel()
	if r.lease == nil {
		l, err := r.opts.Client.GetLease(rctx, r.opts.Namespace, r.opts.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName, Namespace: r.opts.Namespace,
					OwnerReferences: r.nodeOwner(rctx)},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(r.opts.NodeName),
					LeaseDurationSeconds: ptr.To(int32(r.opts.LeaseDuration / time.Second)),
					RenewTime:            &now,
					AcquireTime:          &now,
				},
			}
			created, err := r.opts.Client.CreateLease(rctx, l, Component)
			if err != nil {
				return fmt.Errorf("create lease %s/%s: %w", r.opts.Namespace, r.opts.NodeName, err)
			}
			r.setLease(created, now)
			return nil
		case err != nil:
			return fmt.Errorf("get lease %s/%s: %w", r.opts.Namespace, r.opts.NodeName, err)
		}
		r.lease = l
	}
	l := r.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(r.opts.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(r.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	updated, err := r.opts.Client.UpdateLease(rctx, l, Component)
	if err != nil {
		// A conflict or a deleted Lease: read it again on the next try.
		r.lease = nil
		return fmt.Errorf("renew lease %s/%s: %w", r.opts.Namespace, r.opts.NodeName, err)
	}
	r.setLease(updated, now)
	return nil
}

// nodeOwner returns the Node as the Lease's owner, as kubelet sets it, so
// that deleting the Node collects its Lease; none when the Node cannot be
// read (the Lease then lives on, which only costs an object).
func (r *Reporter) nodeOwner(ctx context.Context) []metav1.OwnerReference {
	node, err := r.opts.Client.GetNode(ctx, r.opts.NodeName)
	if err != nil {
		r.log.Warn("lease created without an owner", "err", err)
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
}

func (r *Reporter) setLease(l *coordinationv1.Lease, now metav1.MicroTime) {
	r.lease = l
	r.mu.Lock()
	r.state.LastRenew = now.Time
	r.mu.Unlock()
}
