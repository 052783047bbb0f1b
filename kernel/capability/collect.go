package capability

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultProbeTimeout bounds one probe when the Collector sets no timeout.
// Probes normally answer in well under a millisecond; the bound only keeps
// a hung tool or netlink socket from holding up the boot-time report.
const DefaultProbeTimeout = 2 * time.Second

// ErrBadCatalogue is wrapped by Collect and Validate when the requirement
// list itself is wrong: an empty or repeated ID, or a requirement without a
// probe.
var ErrBadCatalogue = errors.New("bad requirement catalogue")

// Collector runs the probes of a requirement list against a host and
// assembles the Report.
type Collector struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ProbeTimeout bounds each probe; zero means DefaultProbeTimeout. A
	// probe that does not answer in time is reported Unknown. A
	// requirement with a longer Timeout of its own gets that one.
	ProbeTimeout time.Duration
	// Workers is how many quick probes run at once; zero means
	// DefaultWorkers. Slow probes always get a goroutine each.
	Workers int
}

// DefaultWorkers is how many quick probes run at once by default. Quick
// probes are short file reads and system calls, so a small pool keeps
// the number of OS threads a boot-time agent starts low; the slow probes,
// which dominate the report's time, run beside it on their own goroutines.
// BenchmarkReport compares it with one worker and one goroutine per probe.
const DefaultWorkers = 4

// Collect describes the host (which loads the facts its probes share),
// runs every probe concurrently and returns the report, with the
// requirements in the order given. A probe
// that panics, returns no valid verdict or runs out of time yields Unknown
// with the reason; only a malformed requirement list is an error.
func (c Collector) Collect(ctx context.Context, h Host, reqs []Requirement) (*Report, error) {
	if err := Validate(reqs); err != nil {
		return nil, err
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	timeout := c.ProbeTimeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	start := now()
	node := h.Describe(ctx)

	type outcome struct {
		f       Finding
		elapsed time.Duration
	}
	chans := make([]chan outcome, len(reqs))
	// started[i] receives probe i's context as the probe starts: its time
	// runs from its own start, not from the report's, so that a quick probe
	// queued behind slower ones on a busy node is not cut off before it ran.
	started := make([]chan context.Context, len(reqs))
	cancels := make([]context.CancelFunc, len(reqs))
	jobs := make(chan int, len(reqs))
	timeouts := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		chans[i] = make(chan outcome, 1) // buffered: a late probe never blocks
		started[i] = make(chan context.Context, 1)
		timeouts[i] = timeout
		// A requirement's own timeout is a floor for a probe known to take
		// longer, not a cap: a longer ProbeTimeout (--probe-timeout on a
		// slow node) raises it too.
		if r.Timeout > timeouts[i] {
			timeouts[i] = r.Timeout
		}
	}
	run := func(i int) {
		pctx, cancel := context.WithTimeout(ctx, timeouts[i])
		cancels[i] = cancel // read by the collector after started[i]
		started[i] <- pctx
		t0 := now()
		f := runProbe(pctx, h, reqs[i])
		chans[i] <- outcome{f, now().Sub(t0)}
	}
	worker := func() {
		for i := range jobs {
			run(i)
		}
	}
	for _, i := range launchOrder(reqs) {
		if reqs[i].Slow {
			go run(i)
		} else {
			jobs <- i
		}
	}
	close(jobs)
	workers := c.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	for range min(workers, len(jobs)) {
		go worker()
	}
	results := make([]Result, len(reqs))
	for i, r := range reqs {
		var pctx context.Context
		select {
		case pctx = <-started[i]:
		case <-ctx.Done():
			results[i] = newResult(r, node.Kernel, Findingf(Unknown, "probe did not start: %v", ctx.Err()), 0)
			continue
		}
		var o outcome
		select {
		case o = <-chans[i]:
		case <-pctx.Done():
			// The probe may have answered just as the deadline passed.
			select {
			case o = <-chans[i]:
			default:
				o = outcome{f: Findingf(Unknown, "probe gave no answer within %v: %v", timeouts[i], pctx.Err()), elapsed: timeouts[i]}
				if !r.Slow {
					// Its worker may stay in a probe that ignores its
					// context: another one takes the queue on.
					go worker()
				}
			}
		}
		cancels[i]()
		results[i] = newResult(r, node.Kernel, o.f, o.elapsed)
	}
	return newReport(node, results, start, now().Sub(start)), nil
}

// launchOrder is the order in which Collect starts the probes of reqs, as
// indexes: the slow probes that mostly wait (Requirement.Waits), then the
// other slow ones, then the quick ones, each in the order given.
func launchOrder(reqs []Requirement) []int {
	order := make([]int, 0, len(reqs))
	for _, pick := range []func(Requirement) bool{
		func(r Requirement) bool { return r.Slow && r.Waits },
		func(r Requirement) bool { return r.Slow && !r.Waits },
		func(r Requirement) bool { return !r.Slow },
	} {
		for i, r := range reqs {
			if pick(r) {
				order = append(order, i)
			}
		}
	}
	return order
}

// runProbe calls the probe, turning a panic or a malformed finding into
// Unknown with the reason.
func runProbe(ctx context.Context, h Host, r Requirement) (f Finding) {
	defer func() {
		if p := recover(); p != nil {
			f = Findingf(Unknown, "probe panicked: %v", p)
		}
	}()
	f = r.Probe(ctx, h)
	switch f.Verdict {
	case Supported, Degraded, Unsupported, Unknown:
	default:
		return Findingf(Unknown, "probe returned no valid verdict (%q): %s", f.Verdict, f.Evidence)
	}
	if f.Evidence == "" {
		f.Evidence = "probe gave no evidence"
		if f.Verdict != Unknown {
			f.Evidence = fmt.Sprintf("probe said %s without evidence", f.Verdict)
			f.Verdict = Unknown
		}
	}
	return f
}

// Validate checks a requirement list as Collect does before running it:
// every requirement has an ID, no ID is listed twice, every one has a
// probe, and only slow ones are marked Waits. The error wraps
// ErrBadCatalogue.
func Validate(reqs []Requirement) error {
	seen := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		switch {
		case r.ID == "":
			return fmt.Errorf("%w: requirement %d has no ID", ErrBadCatalogue, i)
		case seen[r.ID]:
			return fmt.Errorf("%w: requirement %q listed twice", ErrBadCatalogue, r.ID)
		case r.Probe == nil:
			return fmt.Errorf("%w: requirement %q has no probe", ErrBadCatalogue, r.ID)
		case r.Waits && !r.Slow:
			return fmt.Errorf("%w: requirement %q waits but is not slow", ErrBadCatalogue, r.ID)
		}
		seen[r.ID] = true
	}
	return nil
}

// VersionVerdict is what the version of the running kernel k alone says
// about r: Supported when k is at least r.MinKernel, Unsupported when
// older, Unknown when k's identity could not be read, and "" when r has no
// version threshold.
func VersionVerdict(r Requirement, k Kernel) Verdict {
	switch {
	case r.MinKernel.IsZero():
		return ""
	case k.Error != "":
		return Unknown
	case k.Version.AtLeast(r.MinKernel):
		return Supported
	default:
		return Unsupported
	}
}

// Mismatch names a disagreement between the version verdict and the probe.
type Mismatch string

// The disagreements the report flags.
const (
	// Backport: the kernel is older than the feature upstream, yet the
	// probe finds it fully working (a distribution backported it). A
	// Degraded finding is not flagged: it may stand on a fallback (a v1
	// controller, say) rather than on the versioned feature.
	Backport Mismatch = "backport"
	// Disabled: the kernel is new enough, yet the probe does not find the
	// feature (configured out, disabled at boot, or blocked).
	Disabled Mismatch = "disabled"
)

// mismatchOf compares the version verdict with the probe's verdict.
func mismatchOf(byVersion, byProbe Verdict) Mismatch {
	switch {
	case byVersion == Unsupported && byProbe == Supported:
		return Backport
	case byVersion == Supported && byProbe == Unsupported:
		return Disabled
	default:
		return ""
	}
}
