// Package checkpoint serves kubelet-style container checkpoints for the node
// API: it resolves namespace/pod/container to a process through the node's
// CRI runtime (runtimes/cri), checkpoints it with CRIU (criu/), and records the
// outcome in the status model (progress, history) and in the metrics.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/metrics"
	"github.com/nodeshim/nodeshim/shim/status"
)

// ErrNotFound is wrapped by every error for which kubelet's checkpoint
// endpoint answers 404: an unknown namespace, pod or container, and the
// feature being disabled. It is the error class errdefs.ErrNotFound.
var ErrNotFound = errdefs.ErrNotFound

// ErrDisabled says that checkpoints are off in the active configuration.
var ErrDisabled = fmt.Errorf("checkpoints are disabled in the configuration: %w", ErrNotFound)

// ErrBusy: a checkpoint of the same container is already running (class
// errdefs.ErrBusy).
var ErrBusy = errdefs.New(errdefs.ErrBusy, "a checkpoint of this container is already in progress")

// ErrShuttingDown: nodeshim is stopping and takes no new checkpoint (class
// errdefs.ErrUnavailable).
var ErrShuttingDown = errdefs.New(errdefs.ErrUnavailable, "nodeshim is shutting down")

// ErrNoRoom says a checkpoint was refused before freezing anything: CRIU's
// images and the archive do not fit in the free space of their
// filesystems (SpacePlan), or the archive not in the retention byte
// budget, even after pruning. Its class is errdefs.ErrUnavailable: the
// same checkpoint may succeed once space is freed.
var ErrNoRoom = errdefs.New(errdefs.ErrUnavailable, "no room for the checkpoint")

// Settings are the parts of the active configuration a checkpoint reads.
type Settings struct {
	// Enabled turns checkpoints on.
	Enabled bool
	// Dir receives the archives.
	Dir string
	// DefaultTimeout bounds a checkpoint requested without a timeout.
	DefaultTimeout time.Duration
	// RuntimeEndpoint is the CRI runtime socket.
	RuntimeEndpoint string
	// Retention bounds the archives kept in Dir.
	Retention retention.Policy
	// Seal names the keys that encrypt and sign archives (the
	// configuration's checkpoint.encryption and checkpoint.signing); they
	// are read at each checkpoint, so that a rotated key applies at once.
	Seal seal.Config
	// PreDump is the number of pre-dump rounds run before each container
	// checkpoint where the kernel tracks dirty memory (the
	// configuration's checkpoint.preDumpRounds); elsewhere none run and
	// the record says why.
	PreDump int
	// PageServer are the node API settings a lazy pod checkpoint's page
	// servers use (PodOptions.Lazy); without them lazy pod checkpoints
	// are refused.
	PageServer PageServerSettings
}

// RetentionPolicy converts a ShimConfiguration's checkpoint.retention into
// retention's Policy: maxPerContainer 0 is the default, negative is no
// limit; maxBytes unset or not positive is no limit.
func RetentionPolicy(c config.CheckpointRetention) retention.Policy {
	p := retention.Policy{MaxPerContainer: int(c.MaxPerContainer), MaxAge: c.MaxAge.Duration}
	switch {
	case c.MaxPerContainer == 0:
		p.MaxPerContainer = retention.DefaultMaxPerContainer
	case c.MaxPerContainer < 0:
		p.MaxPerContainer = 0
	}
	if c.MaxBytes != nil && c.MaxBytes.Sign() > 0 {
		p.MaxBytes = c.MaxBytes.Value()
	}
	return p
}

// Options configure a Service.
type Options struct {
	// Settings returns the active configuration's settings; it is called
	// for every request, so that a configuration change applies at once.
	Settings func() Settings
	// FindCriu locates criu; criu.Find("", os.Getenv) when nil.
	FindCriu func() (criu.Binary, error)
	// Dial connects to a CRI runtime; cri.Dial when nil.
	Dial func(endpoint string) (cri.Resolver, func() error, error)
	// ProcRoot is where the host's procfs is mounted; "/proc" when empty.
	ProcRoot string
	// LockDir holds the target locks (workentry.LockTarget) that this
	// service and the CLI's checkpoints share: <root dir>/checkpoint-locks
	// of nodeshim serve (workentry.LockDirName). Empty: .nodeshim-locks
	// in the checkpoint directory, shared with no CLI.
	LockDir string
	// Parallel bounds the checkpoints that run at once (at least 1).
	Parallel int
	// Model receives progress, results and history; required.
	Model *status.Model
	// Metrics, when set, counts and times the checkpoints.
	Metrics *metrics.Checkpoints
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Now is the clock of records and archive names; time.Now when nil.
	Now func() time.Time
}

// Service runs checkpoints. Close aborts those in flight.
type Service struct {
	opts   Options
	base   context.Context
	cancel context.CancelFunc
	sem    chan struct{}

	mu        sync.Mutex
	closed    bool
	inflight  sync.WaitGroup
	busy      map[criu.ContainerRef]bool
	resolvers map[string]resolverConn
	// serving are the lazy pod checkpoints whose memory is being served,
	// by name.
	serving map[string]*lazyServe
	// preDumpOK keeps criu.CheckPreDump's answer per criu binary path.
	preDumpOK map[string]error

	// pruneMu serializes retention; removed counts its removals.
	pruneMu sync.Mutex
	removed int
}

type resolverConn struct {
	r     cri.Resolver
	close func() error
}

// New returns a Service.
func New(opts Options) *Service {
	if opts.FindCriu == nil {
		opts.FindCriu = func() (criu.Binary, error) { return criu.Find("", nil) }
	}
	if opts.Dial == nil {
		opts.Dial = func(endpoint string) (cri.Resolver, func() error, error) {
			r, err := cri.Dial(endpoint)
			if err != nil {
				return nil, nil, err
			}
			return r, r.Close, nil
		}
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Parallel < 1 {
		opts.Parallel = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	base, cancel := context.WithCancel(context.Background())
	return &Service{opts: opts, base: base, cancel: cancel, sem: make(chan struct{}, opts.Parallel),
		busy: map[criu.ContainerRef]bool{}, resolvers: map[string]resolverConn{}, serving: map[string]*lazyServe{}}
}

// containerKey is how archive names group a container's archives.
func containerKey(ref criu.ContainerRef) string {
	return ref.Pod + "_" + ref.Namespace + "-" + ref.Container
}

// busyExcept reports an archive as busy while a checkpoint of its
// container other than self is in progress: that checkpoint applies
// retention to the container's archives itself when it ends.
func (s *Service) busyExcept(self criu.ContainerRef) func(retention.Archive) bool {
	s.mu.Lock()
	keys := map[string]bool{}
	for ref := range s.busy {
		if ref != self {
			keys[containerKey(ref)] = true
		}
	}
	s.mu.Unlock()
	return func(a retention.Archive) bool { return keys[a.Container] }
}

// ApplyRetention thaws what a checkpoint killed mid-dump left frozen
// (workentry.ThawLeftFrozen), finishes removals a crash interrupted and
// applies the configured retention to the checkpoint directory: the
// daemon calls it at
// start, and every checkpoint calls it when it ends. Archives of
// containers being checkpointed, and archives another process holds
// (retention.Hold: a restore, an image being built), are kept. Each
// removal is logged with the archive's name and reason and counted; the
// status document shows what is left.
func (s *Service) ApplyRetention() (retention.Result, error) {
	return s.applyRetention(s.opts.Settings(), criu.ContainerRef{})
}

func (s *Service) applyRetention(set Settings, self criu.ContainerRef) (retention.Result, error) {
	if set.Dir == "" {
		return retention.Result{}, nil
	}
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	// A checkpoint killed while its workload was frozen (nodeshim
	// killed mid-dump) left it frozen: thaw it before anything else.
	thawed, terr := workentry.ThawLeftFrozen(s.lockDir(set))
	if len(thawed) > 0 {
		s.opts.Logger.Warn("thawed cgroups that a killed checkpoint left frozen", "cgroups", thawed)
	}
	if terr != nil {
		s.opts.Logger.Warn("thaw cgroups that a killed checkpoint left frozen", "err", terr)
	}
	res, err := retention.Apply(set.Dir, set.Retention, s.opts.Now(), s.applyOptions(set, self))
	s.reportRetention(set, res, err)
	return res, err
}

// lockDir is where this service's target locks live.
func (s *Service) lockDir(set Settings) string {
	if s.opts.LockDir != "" {
		return s.opts.LockDir
	}
	return filepath.Join(set.Dir, ".nodeshim-locks")
}

// applyOptions are the options of retention's Apply and Execute: the
// busy containers' archives are kept, the work entries judged by this
// process's procfs and the target locks, and each removal is logged and
// counted.
func (s *Service) applyOptions(set Settings, self criu.ContainerRef) retention.ApplyOptions {
	return retention.ApplyOptions{
		Busy:   s.busyExcept(self),
		Owners: workentry.Owners{LockDir: s.lockDir(set), Now: s.opts.Now},
		Removed: func(r retention.Removal) {
			s.removed++
			s.opts.Logger.Info("checkpoint archive removed", "archive", r.Name, "reason", r.Reason,
				"container", r.Container, "bytes", r.Size, "dir", set.Dir)
			if s.opts.Metrics != nil {
				s.opts.Metrics.Removed(r.Reason)
			}
		},
		RemovedLeftover: func(w retention.Leftover) {
			s.opts.Logger.Info("removed the work files of a killed checkpoint or restore", "entry", w.Name,
				"bytes", w.Size, "why", w.Why, "dir", set.Dir)
		},
	}
}

// reportRetention logs what a retention pass found and shows what is left
// in the status document.
func (s *Service) reportRetention(set Settings, res retention.Result, err error) {
	if len(res.Swept) > 0 {
		s.opts.Logger.Info("finished removing checkpoint archives of an interrupted prune", "dir", set.Dir, "archives", res.Swept)
	}
	for _, r := range res.Skipped {
		s.opts.Logger.Info("checkpoint archive kept: in use", "archive", r.Name, "reason", r.Reason)
	}
	if err != nil {
		s.opts.Logger.Warn("checkpoint retention", "dir", set.Dir, "err", err)
	}
	a := status.CheckpointArchives{Dir: set.Dir, RemovedTotal: s.removed}
	for _, sum := range retention.Summarize(res.Kept) {
		a.Containers = append(a.Containers, status.ArchiveSummary(sum))
	}
	s.opts.Model.SetCheckpointArchives(a)
}

// makeRoom refuses a checkpoint of ref whose space plan does not fit,
// after pruning, in the free space of its filesystems, or whose archive
// (plan.Estimate) does not fit in the retention byte budget. It lists and
// plans the checkpoint directory once: the work entries that killed
// checkpoints left are removed, and the archives the plan removes are
// removed when the checkpoint fits only after that.
func (s *Service) makeRoom(set Settings, ref criu.ContainerRef, plan SpacePlan) error {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	if swept, err := retention.Sweep(set.Dir); err != nil {
		return err
	} else if len(swept) > 0 {
		s.opts.Logger.Info("finished removing checkpoint archives of an interrupted prune", "dir", set.Dir, "archives", swept)
	}
	o := s.applyOptions(set, ref)
	l, err := retention.Scan(set.Dir, o.Owners)
	if err != nil {
		return err
	}
	est, working, stale := plan.Estimate, l.LeftoverBytes(true), l.LeftoverBytes(false)
	all := l.ArchiveBytes()
	// The removals that make room for the new archive in the budget;
	// the work entries in use count against it as archives do.
	removals, kept := retention.Plan(set.Retention, l.Archives, s.opts.Now(), est+working, o.Busy)
	if set.Retention.MaxBytes > 0 && kept+working+est > set.Retention.MaxBytes {
		return fmt.Errorf("checkpoint %s: estimated archive size %s (resident memory and writable layer) does not fit in the retention budget maxBytes %s: %s of archives and %s of work files in use stay after pruning: %w",
			ref, sizeString(est), sizeString(set.Retention.MaxBytes), sizeString(kept), sizeString(working), ErrNoRoom)
	}
	if err := plan.Check(stale + all - kept); err != nil {
		return fmt.Errorf("checkpoint %s: %w", ref, err)
	}
	if plan.Check(stale) == nil && (set.Retention.MaxBytes == 0 || all+working+est <= set.Retention.MaxBytes) {
		// Room without pruning: retention runs when the checkpoint ends.
		removals = nil
	}
	if stale == 0 && len(removals) == 0 {
		return nil
	}
	res, err := retention.Execute(set.Dir, l, removals, o)
	s.reportRetention(set, res, err)
	if err != nil {
		return err
	}
	if err := plan.Check(0); err != nil {
		return fmt.Errorf("checkpoint %s: after pruning: %w", ref, err)
	}
	return nil
}

// sizeString formats n bytes for an error message: exact, and in MiB.
func sizeString(n int64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}

// Close refuses new checkpoints, aborts the ones in flight and waits for
// them: each is cancelled through CRIU, which cures the tasks it seized,
// and criu.Checkpoint checks that the workload runs on, unfrozen and
// untraced, and removes every file it made. Then it closes the runtime
// connections.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.inflight.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for ep, rc := range s.resolvers {
		if rc.close != nil {
			if err := rc.close(); err != nil {
				errs = append(errs, fmt.Errorf("close CRI connection %s: %w", ep, err))
			}
		}
		delete(s.resolvers, ep)
	}
	return errors.Join(errs...)
}

// ValidRef checks the names as Kubernetes defines them (namespace and
// container: DNS labels; pod: a DNS subdomain). A name that breaks them
// cannot exist, so the error wraps ErrNotFound.
func ValidRef(ref criu.ContainerRef) error {
	for _, p := range []struct {
		what string
		errs []string
	}{
		{"namespace", validation.IsDNS1123Label(ref.Namespace)},
		{"pod", validation.IsDNS1123Subdomain(ref.Pod)},
		{"container", validation.IsDNS1123Label(ref.Container)},
	} {
		if len(p.errs) > 0 {
			return fmt.Errorf("%s: invalid %s name: %s: %w", ref, p.what, strings.Join(p.errs, "; "), ErrNotFound)
		}
	}
	return nil
}

// Checkpoint checkpoints the container ref within timeout (zero: the
// configured default) and returns CRIU's result. Errors wrapping
// ErrNotFound mean an unknown container or the feature being off; every
// other error is a failure of the runtime, of CRIU or of nodeshim.
func (s *Service) Checkpoint(ctx context.Context, ref criu.ContainerRef, timeout time.Duration) (criu.Result, error) {
	set := s.opts.Settings()
	if !set.Enabled {
		return criu.Result{}, ErrDisabled
	}
	if err := ValidRef(ref); err != nil {
		return criu.Result{}, err
	}
	if timeout <= 0 {
		timeout = set.DefaultTimeout
	}
	if timeout <= 0 {
		timeout = criu.DefaultTimeout
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return criu.Result{}, ErrShuttingDown
	}
	if s.busy[ref] {
		s.mu.Unlock()
		return criu.Result{}, fmt.Errorf("checkpoint %s: %w", ref, ErrBusy)
	}
	s.busy[ref] = true
	s.inflight.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.busy, ref)
		s.mu.Unlock()
		s.inflight.Done()
	}()

	started := s.opts.Now()
	ctx, cancel := s.bound(ctx, timeout)
	defer cancel()

	resolver, err := s.resolver(set.RuntimeEndpoint)
	if err != nil {
		return criu.Result{}, err
	}
	proc, err := resolver.Resolve(ctx, ref)
	if errors.Is(err, cri.ErrNotFound) {
		return criu.Result{}, fmt.Errorf("%w: %w", err, ErrNotFound)
	}
	if err != nil {
		return criu.Result{}, s.abortedOr(ctx, err)
	}
	var target criu.Target
	if proc.Spec != nil {
		// A container the runtime describes: dump it as runc would.
		target, err = criu.ContainerTarget(s.opts.ProcRoot, proc.PID, proc.Spec, "", started)
	} else {
		target, err = criu.PIDTarget(s.opts.ProcRoot, proc.PID, started)
	}
	if err != nil {
		return criu.Result{}, fmt.Errorf("container %s (%s): %w", ref, proc.ContainerID, err)
	}
	target.Ref, target.ID, target.Runtime = ref, proc.ContainerID, "cri"
	target.Image, target.ImageRef, target.Status = proc.Image, proc.ImageRef, proc.Status
	if !proc.Created.IsZero() {
		target.Created = proc.Created
	}
	if target.ID == "" {
		target.ID = fmt.Sprintf("pid-%d", proc.PID)
	}
	bin, err := s.opts.FindCriu()
	if err != nil {
		return criu.Result{}, err
	}
	sealing, _, err := set.Seal.Load(config.SealFieldNames)
	if err != nil {
		return criu.Result{}, fmt.Errorf("checkpoint %s: %w", ref, err)
	}
	// The process's lock, shared with the CLI: another checkpoint of it
	// (of another name, or by another nodeshim) is turned away as busy,
	// as one of the same name is above.
	lock, err := lockTarget(s.lockDir(set), proc.PID, fmt.Sprintf("checkpoint %s (pid %d)", ref, proc.PID))
	if err != nil {
		return criu.Result{}, err
	}
	defer func() {
		if err := lock.Unlock(); err != nil {
			s.opts.Logger.Warn("checkpoint lock", "container", ref, "err", err)
		}
	}()

	// From here the request reaches CRIU: it is recorded whatever happens.
	rec := status.CheckpointRecord{Namespace: ref.Namespace, Pod: ref.Pod, Container: ref.Container,
		ContainerID: proc.ContainerID, PID: proc.PID, StartedAt: started}
	done := func(string, time.Duration, time.Duration) {}
	if s.opts.Metrics != nil {
		done = s.opts.Metrics.Start()
	}
	what := "checkpoint " + ref.String()
	s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress, what+": waiting for a free slot", 1, 3))
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		err := s.abortedOr(ctx, fmt.Errorf("%s: waiting for a free slot: %w", what, ctx.Err()))
		s.finish(rec, criu.Result{}, err, done)
		return criu.Result{}, err
	}
	defer func() { <-s.sem }()
	// Whatever the outcome, the directory is brought back within the
	// retention limits when this checkpoint ends.
	defer s.applyRetention(set, ref) //nolint:errcheck // logged inside
	var phaseMu sync.Mutex
	phase := criu.PhaseDumping
	// Before anything is frozen, runLocked refuses a checkpoint whose
	// images and archive cannot be written, even after pruning.
	rec.PreDumpRounds, rec.PreDumpSkipped = s.preDumpRounds(ctx, bin, set.PreDump)
	if rec.PreDumpSkipped != "" {
		s.opts.Logger.Warn("checkpoint without pre-dump rounds", "container", ref, "rounds", set.PreDump, "reason", rec.PreDumpSkipped)
	}
	res, err := runLocked(ctx, target, criu.Options{
		PreDump:    rec.PreDumpRounds,
		Seal:       sealing,
		Binary:     bin,
		ArchiveDir: set.Dir,
		ProcRoot:   s.opts.ProcRoot,
		LockDir:    s.lockDir(set),
		Now:        s.opts.Now,
		Logger:     s.opts.Logger,
		Progress: func(p criu.Progress) {
			phaseMu.Lock()
			defer phaseMu.Unlock()
			if p.Phase == phase || p.Phase != criu.PhaseArchiving {
				return
			}
			phase = p.Phase
			s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress, what+": writing the archive", 3, 3))
		},
	}, func(plan SpacePlan) error {
		if err := s.makeRoom(set, ref, plan); err != nil {
			return err
		}
		s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress, what+": dumping with CRIU", 2, 3))
		return nil
	})
	if err != nil {
		err = s.abortedOr(ctx, err)
	}
	s.finish(rec, res, err, done)
	return res, err
}

// abortedOr marks err as an abort by shutdown when the service is closing.
func (s *Service) abortedOr(ctx context.Context, err error) error {
	if s.base.Err() != nil {
		return fmt.Errorf("%w: %w", ErrShuttingDown, err)
	}
	return err
}

// finish records the outcome of a checkpoint that reached CRIU.
func (s *Service) finish(rec status.CheckpointRecord, res criu.Result, err error, done func(string, time.Duration, time.Duration)) {
	elapsed := s.opts.Now().Sub(rec.StartedAt)
	rec.DurationSeconds = elapsed.Seconds()
	ref := rec.Namespace + "/" + rec.Pod + "/" + rec.Container
	if rec.Container == "" {
		ref = "pod " + rec.Namespace + "/" + rec.Pod
	}
	c := condition.Condition{Type: status.TypeCheckpoint}
	switch {
	case err == nil:
		rec.Result, rec.Path, rec.SizeBytes, rec.FrozenSeconds = status.CheckpointSucceeded, res.Path, res.Size, res.Frozen.Seconds()
		c.Status, c.Reason = condition.True, "Checkpointed"
		c.Message = fmt.Sprintf("%s checkpointed to %s in %s (frozen %s)", ref, res.Path, elapsed.Round(time.Millisecond), res.Frozen.Round(time.Millisecond))
		s.opts.Logger.Info("checkpoint written", "container", ref, "path", res.Path, "bytes", res.Size, "frozen", res.Frozen, "total", elapsed)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrShuttingDown):
		rec.Result, rec.Error = status.CheckpointAborted, err.Error()
		c.Status, c.Severity, c.Reason = condition.False, condition.SeverityWarning, "CheckpointAborted"
		c.Message = fmt.Sprintf("%s aborted, the workload was left running: %v", ref, err)
		s.opts.Logger.Warn("checkpoint aborted", "container", ref, "err", err)
	default:
		rec.Result, rec.Error = status.CheckpointFailed, err.Error()
		c.Status, c.Severity, c.Reason = condition.False, condition.SeverityWarning, "CheckpointFailed"
		if errors.Is(err, criu.ErrTargetLost) {
			c.Severity = condition.SeverityError
		}
		c.Message = fmt.Sprintf("%s failed: %v", ref, err)
		s.opts.Logger.Error("checkpoint failed", "container", ref, "err", err)
	}
	s.opts.Model.AddCheckpoint(rec)
	s.opts.Model.Set(c)
	done(rec.Result, elapsed, res.Frozen)
}

// resolver returns the resolver of endpoint, connecting at first use.
func (s *Service) resolver(endpoint string) (cri.Resolver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rc, ok := s.resolvers[endpoint]; ok {
		return rc.r, nil
	}
	r, closeFn, err := s.opts.Dial(endpoint)
	if err != nil {
		return nil, err
	}
	s.resolvers[endpoint] = resolverConn{r: r, close: closeFn}
	return r, nil
}

// bound returns ctx with a request's timeout, ended too when the service
// closes, and the function that releases both.
func (s *Service) bound(ctx context.Context, timeout time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}
