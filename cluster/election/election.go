// Package election elects one leader among replicas through a
// coordination.k8s.io/v1 Lease, with the algorithm and the Lease record of
// client-go's tools/leaderelection (LeaseLock, not coordinated): the holder
// renews the Lease every RetryPeriod, gives up the lead when it has not
// renewed for RenewDeadline, a candidate takes over a Lease that nobody
// renewed for LeaseDuration on its own clock, and a leader that stops
// releases the Lease so that a standby takes over at once. Replicas built on
// client-go's elector and on this one can share a Lease.
//
// It exists because client-go's leaderelection imports the clientset (for
// coordinated election), whose scheme registers every API group of
// Kubernetes; this package needs only a Lease client (cluster/kubeapi).
package election

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// JitterFactor spreads a candidate's retries, as client-go's.
const JitterFactor = 1.2

// Leases reads and writes the election's Lease (kubeapi.Client).
type Leases interface {
	GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	CreateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error)
	UpdateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error)
}

// Config configures an Elector.
type Config struct {
	// Leases is the API client.
	Leases Leases
	// Namespace and Name name the election's Lease.
	Namespace, Name string
	// Identity is this replica's name in the election; unique per replica.
	Identity string
	// FieldManager names the writer of the Lease.
	FieldManager string
	// LeaseDuration is how long a candidate waits, from the last change
	// of the Lease it saw, before it takes the lead from a holder that
	// stopped renewing.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader retries renewing before it
	// gives up the lead.
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire, and the leader
	// renews.
	RetryPeriod time.Duration
	// OnNewLeader is called with the identity of each leader observed
	// (in the election's goroutine); may be nil.
	OnNewLeader func(identity string)
	// Clock stamps the Lease and measures its validity; the real clock
	// when nil.
	Clock clock.PassiveClock
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
}

// Elector takes part in an election.
type Elector struct {
	cfg Config
	log *slog.Logger

	// What the elector last saw of the Lease, and when on its own clock;
	// only Run's goroutine touches these.
	lease          *coordinationv1.Lease // as last read or written: its resourceVersion guards updates
	observed       record
	observedRaw    []byte
	observedTime   time.Time
	reportedLeader string
}

// New returns an Elector for cfg, which it checks as client-go does.
func New(cfg Config) (*Elector, error) {
	switch {
	case cfg.Leases == nil:
		return nil, errors.New("election: no Lease client")
	case cfg.Namespace == "" || cfg.Name == "":
		return nil, errors.New("election: no namespace or name for the Lease")
	case cfg.Identity == "":
		return nil, errors.New("election: no identity")
	case cfg.LeaseDuration < time.Second:
		return nil, fmt.Errorf("election: lease duration %v is under a second (the Lease counts whole seconds)", cfg.LeaseDuration)
	case cfg.LeaseDuration <= cfg.RenewDeadline:
		return nil, fmt.Errorf("election: lease duration %v must be greater than the renew deadline %v", cfg.LeaseDuration, cfg.RenewDeadline)
	case cfg.RetryPeriod <= 0 || cfg.RenewDeadline <= time.Duration(JitterFactor*float64(cfg.RetryPeriod)):
		return nil, fmt.Errorf("election: renew deadline %v must be greater than %v times the retry period %v", cfg.RenewDeadline, JitterFactor, cfg.RetryPeriod)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name)
	return &Elector{cfg: cfg, log: log}, nil
}

// Run stands for election until ctx is done; while this replica leads, it
// runs lead with a context that ends when the lead is lost or ctx is done.
// Run returns once lead has returned and the Lease is released: two
// replicas never lead at once. It returns without leading when ctx is done
// first, and after one term otherwise; call it again to stand again.
func (e *Elector) Run(ctx context.Context, lead func(context.Context)) {
	// Each term starts afresh, as with a new client-go elector.
	e.lease, e.observed, e.observedRaw, e.observedTime, e.reportedLeader = nil, record{}, nil, time.Time{}, ""
	if !e.acquire(ctx) {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); lead(lctx) }()
	e.renew(lctx)
	cancel()
	<-done
	e.release()
}

// isLeader reports whether this replica held the Lease when it last looked.
func (e *Elector) isLeader() bool { return e.observed.holder == e.cfg.Identity }

// acquire tries every RetryPeriod (with jitter) until it holds the Lease or
// ctx is done.
func (e *Elector) acquire(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	acquired := false
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		acquired = e.tryAcquireOrRenew(ctx)
		e.reportTransition()
		if acquired {
			cancel()
		}
	}, e.cfg.RetryPeriod, JitterFactor, true)
	return acquired
}

// renew renews the Lease every RetryPeriod until ctx is done or a renewal
// has failed for RenewDeadline.
func (e *Elector) renew(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		err := wait.PollUntilContextTimeout(ctx, e.cfg.RetryPeriod, e.cfg.RenewDeadline, true, func(ctx context.Context) (bool, error) {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			return e.tryAcquireOrRenew(ctx), nil
		})
		e.reportTransition()
		if err == nil {
			return
		}
		if ctx.Err() == nil {
			e.log.Info("lost the lead: could not renew", "identity", e.cfg.Identity, "err", err)
		}
		cancel()
	}, e.cfg.RetryPeriod)
}

// release hands the Lease back, if this replica still holds it, with a
// duration of one second and no holder, so that a standby takes over at
// once.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	for {
		old, _, err := e.get(ctx)
		if err != nil {
			e.log.Warn("release: read the Lease", "err", err)
			return
		}
		if !e.isLeader() {
			return
		}
		now := e.cfg.Clock.Now()
		r := record{transitions: old.transitions, durationSeconds: 1, renew: now, acquire: now}
		err = e.update(ctx, r)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			e.log.Warn("release the Lease", "err", err)
			return
		}
		e.setObserved(r)
		return
	}
}

// tryAcquireOrRenew is client-go's: it takes the Lease when it is free,
// missing or expired, renews it when this replica holds it, and reports
// whether this replica holds it now.
func (e *Elector) tryAcquireOrRenew(ctx context.Context) bool {
	now := e.cfg.Clock.Now()
	r := record{holder: e.cfg.Identity, durationSeconds: int32(e.cfg.LeaseDuration / time.Second), renew: now, acquire: now}

	// Fast path: the leader renews on what it wrote last.
	if e.isLeader() && e.leaseValid(now) {
		r.acquire, r.transitions = e.observed.acquire, e.observed.transitions
		err := e.update(ctx, r)
		if err == nil {
			e.setObserved(r)
			return true
		}
		e.log.Debug("renew on the last written Lease failed; reading it again", "err", err)
	}

	old, raw, err := e.get(ctx)
	if apierrors.IsNotFound(err) {
		if err := e.create(ctx, r); err != nil {
			e.log.Warn("create the Lease", "err", err)
			return false
		}
		e.setObserved(r)
		return true
	}
	if err != nil {
		e.log.Warn("read the Lease", "err", err)
		return false
	}
	if !bytes.Equal(e.observedRaw, raw) {
		e.setObserved(old)
		e.observedRaw = raw
	}
	if old.holder != "" && e.leaseValid(now) && !e.isLeader() {
		return false
	}
	if e.isLeader() {
		r.acquire, r.transitions = old.acquire, old.transitions
	} else {
		r.transitions = old.transitions + 1
	}
	if err := e.update(ctx, r); err != nil {
		e.log.Warn("update the Lease", "err", err)
		return false
	}
	e.setObserved(r)
	return true
}

// leaseValid reports whether the Lease as last observed still runs at now,
// counted from when this replica observed it.
func (e *Elector) leaseValid(now time.Time) bool {
	return e.observedTime.Add(time.Duration(e.observed.durationSeconds) * time.Second).After(now)
}

func (e *Elector) setObserved(r record) {
	e.observed, e.observedTime = r, e.cfg.Clock.Now()
}

// reportTransition tells OnNewLeader about a change of holder.
func (e *Elector) reportTransition() {
	if e.observed.holder == e.reportedLeader {
		return
	}
	e.reportedLeader = e.observed.holder
	if e.cfg.OnNewLeader != nil {
		e.cfg.OnNewLeader(e.reportedLeader)
	}
}

// get reads the Lease and returns its record and that record's JSON, which
// tells a change of the record from a write of something else.
func (e *Elector) get(ctx context.Context) (record, []byte, error) {
	l, err := e.cfg.Leases.GetLease(ctx, e.cfg.Namespace, e.cfg.Name)
	if err != nil {
		return record{}, nil, err
	}
	e.lease = l
	r := fromSpec(l.Spec)
	raw, err := json.Marshal(r.spec())
	if err != nil {
		return record{}, nil, fmt.Errorf("encode the record of Lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
	}
	return r, raw, nil
}

func (e *Elector) create(ctx context.Context, r record) error {
	l, err := e.cfg.Leases.CreateLease(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
		Spec:       r.spec(),
	}, e.cfg.FieldManager)
	if err != nil {
		return err
	}
	e.lease = l
	return nil
}

// update writes r over the Lease as last read or written: the API server
// refuses it (Conflict) when someone else wrote the Lease since.
func (e *Elector) update(ctx context.Context, r record) error {
	if e.lease == nil {
		return errors.New("the Lease was not read yet")
	}
	l := e.lease.DeepCopy()
	l.Spec = r.spec()
	l, err := e.cfg.Leases.UpdateLease(ctx, l, e.cfg.FieldManager)
	if err != nil {
		return err
	}
	e.lease = l
	return nil
}

// record is the election's state in the Lease's spec, client-go's
// LeaderElectionRecord.
type record struct {
	holder          string
	durationSeconds int32
	acquire, renew  time.Time
	transitions     int32
}

func fromSpec(s coordinationv1.LeaseSpec) record {
	var r record
	if s.HolderIdentity != nil {
		r.holder = *s.HolderIdentity
	}
	if s.LeaseDurationSeconds != nil {
		r.durationSeconds = *s.LeaseDurationSeconds
	}
	if s.AcquireTime != nil {
		r.acquire = s.AcquireTime.Time
	}
	if s.RenewTime != nil {
		r.renew = s.RenewTime.Time
	}
	if s.LeaseTransitions != nil {
		r.transitions = *s.LeaseTransitions
	}
	return r
}

func (r record) spec() coordinationv1.LeaseSpec {
	holder, duration, transitions := r.holder, r.durationSeconds, r.transitions
	return coordinationv1.LeaseSpec{
		HolderIdentity:       &holder,
		LeaseDurationSeconds: &duration,
		AcquireTime:          &metav1.MicroTime{Time: r.acquire},
		RenewTime:            &metav1.MicroTime{Time: r.renew},
		LeaseTransitions:     &transitions,
	}
}
