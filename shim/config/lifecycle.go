package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/shim/config/configstatus"
)

// NodeConfigStatus reports the configuration lifecycle in the shape of
// Kubernetes' NodeConfigStatus (defined in configstatus, which the status
// document's readers link without this package).
type NodeConfigStatus = configstatus.NodeConfigStatus

// Condition types and reasons reported by the lifecycle.
const (
	ConditionConfigHealthy = configstatus.ConditionConfigHealthy

	ReasonConfigActive      = configstatus.ReasonConfigActive
	ReasonConfigTrial       = configstatus.ReasonConfigTrial
	ReasonConfigRolledBack  = configstatus.ReasonConfigRolledBack
	ReasonConfigSourceError = configstatus.ReasonConfigSourceError
)

// RetryableError marks a failure before a payload could be tried (reading
// the source, writing a snapshot or the record): nothing is rolled back
// and the caller retries with backoff.
type RetryableError struct {
	Err error
}

// Error returns the cause's message.
func (e *RetryableError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *RetryableError) Unwrap() error { return e.Err }

// Options configure a Controller.
type Options struct {
	// StateDir holds the snapshots and the state record, normally
	// <root-dir>/config. It is created with mode 0700.
	StateDir string
	// SourceDir is the directory the configuration is delivered in (a
	// ConfigMap volume). Empty, or a directory that does not exist, means
	// no source: the local defaults.
	SourceDir string
	// Defaults is the local default configuration; Defaults() when nil.
	Defaults *ShimConfiguration
	// SoakPeriod, when not zero, is how long every assigned payload must
	// stay active before it becomes last-known-good. When zero, each
	// payload soaks for its own configSoakPeriod.
	SoakPeriod time.Duration
	// Check, when set, is asked about every configuration before it
	// becomes active, beyond Validate: settings that only the running
	// daemon can judge (start-up settings it cannot change, files the
	// configuration names). A payload it refuses is rolled back like one
	// that does not load.
	Check func(ShimConfiguration) error
	// Clock is the time source; the real clock when nil.
	Clock clock.Clock
	// Logger receives one line per lifecycle event; slog.Default() when nil.
	Logger *slog.Logger

	// crashPoint is called between the steps of every disk write (tests).
	crashPoint func(step string)
}

// Controller runs the lifecycle of one configuration source. It is safe
// for concurrent use.
type Controller struct {
	opts  Options
	store store
	log   *slog.Logger
	clock clock.Clock

	mu     sync.Mutex
	rec    record
	active ShimConfiguration
	status NodeConfigStatus // Error is composed from the two below
	// loadErr is why the assigned payload is not active (a rollback).
	loadErr string
	// syncErr is the last retryable failure, cleared by a successful Sync.
	syncErr string
	notify  []chan struct{}
}

// Open loads the state in opts.StateDir and decides the active
// configuration without looking at the source: the assigned payload when it
// loads and validates, else the last-known-good one, else the defaults.
// Leftovers of an interrupted write are removed. Open fails only when the
// state directory cannot be created; an unreadable record comes up on the
// defaults with Error set.
func Open(opts Options) (*Controller, error) {
	if opts.Defaults == nil {
		d := Defaults()
		opts.Defaults = &d
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Controller{
		opts:  opts,
		store: store{dir: opts.StateDir, crashPoint: opts.crashPoint},
		log:   opts.Logger,
		clock: opts.Clock,
	}
	if err := c.store.init(); err != nil {
		return nil, err
	}
	rec, err := c.store.readRecord()
	if err != nil {
		c.log.Error("config state record unreadable, using local defaults", "err", err)
		c.active = *opts.Defaults
		c.loadErr = fmt.Sprintf("state record unreadable, using local defaults: %v", err)
		return c, nil
	}
	c.rec = rec
	if err := c.store.cleanup(rec); err != nil {
		c.log.Warn("config state cleanup", "err", err)
	}
	c.activate()
	return c, nil
}

// activate decides Active from the record. Called with mu held or before
// the controller is shared.
func (c *Controller) activate() {
	c.status.Assigned = copyRef(c.rec.Assigned)
	c.status.LastKnownGood = copyRef(c.rec.LastKnownGood)
	if c.rec.Assigned == nil {
		c.active = *c.opts.Defaults
		c.status.Active = nil
		c.loadErr = ""
		return
	}
	cfg, err := c.loadRef(c.rec.Assigned)
	if err == nil {
		c.active = cfg
		c.status.Active = copyRef(c.rec.Assigned)
		c.loadErr = ""
		return
	}
	lkgCfg, lkgErr := *c.opts.Defaults, error(nil)
	if c.rec.LastKnownGood != nil {
		lkgCfg, lkgErr = c.loadRef(c.rec.LastKnownGood)
	}
	if lkgErr != nil {
		c.active = *c.opts.Defaults
		c.status.Active = nil
		c.loadErr = fmt.Sprintf("assigned config %s failed: %v; last-known-good %s failed too, using local defaults: %v",
			short(c.rec.Assigned.UID), err, short(c.rec.LastKnownGood.UID), lkgErr)
		c.log.Error("config rollback to local defaults", "assigned", c.rec.Assigned.UID, "err", err, "lkgErr", lkgErr)
		return
	}
	c.active = lkgCfg
	c.status.Active = copyRef(c.rec.LastKnownGood)
	what := "local defaults"
	if c.rec.LastKnownGood != nil {
		what = "last-known-good " + short(c.rec.LastKnownGood.UID)
	}
	c.loadErr = fmt.Sprintf("assigned config %s failed, rolled back to %s: %v", short(c.rec.Assigned.UID), what, err)
	c.log.Error("config rolled back", "assigned", c.rec.Assigned.UID, "to", what, "err", err)
}

func (c *Controller) loadRef(ref *SourceRef) (ShimConfiguration, error) {
	p, err := c.store.loadSnapshot(ref.UID)
	if err != nil {
		return ShimConfiguration{}, err
	}
	cfg, err := p.LoadOnto(*c.opts.Defaults)
	if err != nil {
		return ShimConfiguration{}, err
	}
	if c.opts.Check != nil {
		if err := c.opts.Check(cfg); err != nil {
			return ShimConfiguration{}, err
		}
	}
	return cfg, nil
}

// soakPeriod is how long the active, assigned payload soaks. Called with
// mu held.
func (c *Controller) soakPeriod() time.Duration {
	if c.opts.SoakPeriod != 0 {
		return c.opts.SoakPeriod
	}
	return c.active.ConfigSoakPeriod.Duration
}

// Sync reads the source once and moves the lifecycle on: a new payload is
// snapshotted, then recorded as assigned (only then reported), then tried;
// a payload that has soaked long enough becomes last-known-good; no source
// resets to the defaults and clears last-known-good at once. Errors before
// a payload can be tried are *RetryableError and roll nothing back.
func (c *Controller) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.broadcast()

	payload, none, err := c.readSource()
	if err != nil {
		return c.retryable(fmt.Errorf("read config source: %w", err))
	}
	if none {
		if c.rec.Assigned != nil || c.rec.LastKnownGood != nil {
			if err := c.store.writeRecord(record{}); err != nil {
				return c.retryable(fmt.Errorf("record config source reset: %w", err))
			}
			c.log.Info("config source reset to none, using local defaults")
		}
		c.rec = record{}
		c.activate()
		c.gc()
		c.syncErr = ""
		return nil
	}
	uid := payload.UID()
	if c.rec.Assigned == nil || c.rec.Assigned.UID != uid {
		if err := c.store.saveSnapshot(payload); err != nil {
			return c.retryable(fmt.Errorf("snapshot config %s: %w", short(uid), err))
		}
		next := record{
			Assigned:      &SourceRef{UID: uid, AssignedAt: metav1.NewTime(c.clock.Now().UTC().Truncate(time.Second))},
			LastKnownGood: c.rec.LastKnownGood,
		}
		if err := c.store.writeRecord(next); err != nil {
			return c.retryable(fmt.Errorf("record assigned config %s: %w", short(uid), err))
		}
		c.rec = next
		c.log.Info("config assigned", "uid", uid)
		c.activate()
		c.gc()
	}
	if err := c.promote(); err != nil {
		return err
	}
	c.syncErr = ""
	return nil
}

// promote makes Assigned last-known-good once it has been active for the
// soak period, measured from the assignedAt in the record.
func (c *Controller) promote() error {
	a := c.rec.Assigned
	if a == nil || c.status.Active == nil || c.status.Active.UID != a.UID {
		return nil
	}
	if c.rec.LastKnownGood != nil && c.rec.LastKnownGood.UID == a.UID {
		return nil
	}
	if c.clock.Now().Before(a.AssignedAt.Add(c.soakPeriod())) {
		return nil
	}
	next := record{Assigned: copyRef(a), LastKnownGood: copyRef(a)}
	if err := c.store.writeRecord(next); err != nil {
		return c.retryable(fmt.Errorf("record last-known-good config %s: %w", short(a.UID), err))
	}
	c.rec = next
	c.status.LastKnownGood = copyRef(a)
	c.log.Info("config is last-known-good", "uid", a.UID)
	c.gc()
	return nil
}

func (c *Controller) gc() {
	if err := c.store.cleanup(c.rec); err != nil {
		c.log.Warn("config snapshot cleanup", "err", err)
	}
}

func (c *Controller) retryable(err error) error {
	c.syncErr = err.Error()
	c.log.Warn("config sync failed, will retry", "err", err)
	return &RetryableError{Err: err}
}

// readSource returns the source's payload, or none=true when there is no
// source (an empty SourceDir or a directory that does not exist).
func (c *Controller) readSource() (Payload, bool, error) {
	if c.opts.SourceDir == "" {
		return Payload{}, true, nil
	}
	if _, err := os.Stat(c.opts.SourceDir); errors.Is(err, os.ErrNotExist) {
		return Payload{}, true, nil
	}
	p, err := ReadSource(c.opts.SourceDir)
	return p, false, err
}

// NextSoakDeadline returns when the assigned payload becomes last-known-good
// if it stays active, and false when no promotion is pending.
func (c *Controller) NextSoakDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.rec.Assigned
	if a == nil || c.status.Active == nil || c.status.Active.UID != a.UID ||
		(c.rec.LastKnownGood != nil && c.rec.LastKnownGood.UID == a.UID) {
		return time.Time{}, false
	}
	return a.AssignedAt.Add(c.soakPeriod()), true
}

// Status returns the current NodeConfigStatus.
func (c *Controller) Status() NodeConfigStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	if a := c.rec.Assigned; a != nil && s.Active != nil && s.Active.UID == a.UID &&
		(c.rec.LastKnownGood == nil || c.rec.LastKnownGood.UID != a.UID) {
		until := metav1.NewTime(a.AssignedAt.Add(c.soakPeriod()))
		s.SoakingUntil = &until
	}
	s.Error = c.loadErr
	if c.syncErr != "" {
		if s.Error != "" {
			s.Error += "; "
		}
		s.Error += c.syncErr
	}
	s.Assigned, s.Active, s.LastKnownGood = copyRef(s.Assigned), copyRef(s.Active), copyRef(s.LastKnownGood)
	return s
}

// Active returns a copy of the configuration in use.
func (c *Controller) Active() ShimConfiguration {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Merge with no files deep-copies through JSON; it cannot fail on a
	// value that was itself decoded from JSON.
	cp, err := Merge(c.active)
	if err != nil {
		return c.active
	}
	return cp
}

// Changed returns a channel that is closed at the next Sync, whatever its
// outcome. Waiters use it instead of polling.
func (c *Controller) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.notify = append(c.notify, ch)
	return ch
}

func (c *Controller) broadcast() {
	for _, ch := range c.notify {
		close(ch)
	}
	c.notify = nil
}

func copyRef(r *SourceRef) *SourceRef {
	if r == nil {
		return nil
	}
	cp := *r
	return &cp
}

func short(uid string) string {
	if len(uid) > 12 {
		return uid[:12]
	}
	return uid
}
