package criu

import (
	"time"

	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// MinVersion is the oldest CRIU that nodeshim accepts: the version Podman
// requires to checkpoint containers out of pods (3.16). Older releases are
// reported Degraded; whether CRIU works on this kernel is `criu check`'s
// call, not the version's (bookworm's 3.17.1 is new enough by number and
// still fails on kernels >= 6.13).
var MinVersion = Version{Major: 3, Minor: 16}

// ProbedFeatures are the `criu check --feature` names shown in the
// capability report, with what needs them.
var ProbedFeatures = []struct {
	Name     string
	NeededBy string
}{
	{"mem_dirty_track", "nodeshim: incremental checkpoints (pre-dump)"},
	{"uffd-noncoop", "nodeshim: lazy restore (post-copy migration)"},
	{"pidfd_store", "CRIU: reliable pid reuse detection across pre-dumps"},
	{"timens", "CRIU: time namespaces of restored containers"},
	{"clone3_set_tid", "CRIU: restoring processes with their original pids in a pid namespace"},
	{"network_lock_nftables", "CRIU: locking the network of containers with TCP connections"},
}

// probe holds the binary, version, `criu check` and feature results for
// the requirements of one Requirements call, so that a report runs criu
// once per question, or not at all when a CheckCache has the answers.
type probe struct {
	once    sync.Once
	cache   *CheckCache
	now     func() time.Time
	bin     Binary
	findErr error
	checkResults
	// note says why the cache was not used or not written, or what was
	// cleared in KerndatDir; logged in the evidence of criu.check only.
	note string
	// kerndat prepares KerndatDir for the criu runs (kerndatRun): whether
	// the first will leave its kernel facts for the others, how to start
	// them, how to end what that needed, and a note of what it cleared
	// for the evidence of criu.check.
	kerndat func() (checkFirst bool, start starter, stop func(), note string)
}

// KerndatDir is where criu keeps the facts it gathers about the kernel
// (criu.kdat) for the criu runs after it, when it is a tmpfs (as /run is on
// a systemd host): with them a `criu check --feature` costs about 5 ms of
// CPU here instead of 20.
const KerndatDir = "/run"

func (p *probe) run(ctx context.Context) {
	p.once.Do(func() {
		p.bin, p.findErr = Find("", nil)
		if p.findErr != nil {
			return
		}
		names := make([]string, len(ProbedFeatures))
		for i, f := range ProbedFeatures {
			names[i] = f.Name
		}
		if p.cache != nil && os.Geteuid() == 0 {
			r, err := p.cache.load(p.bin, names)
			if err == nil {
				p.checkResults = r
				return
			}
			if !errors.Is(err, errCacheMiss) {
				p.addNote(fmt.Sprintf("check cache unusable: %v", err))
			}
		}
		var checkFirst bool
		var start starter
		if p.kerndat != nil && os.Geteuid() == 0 {
			var stop func()
			var note string
			checkFirst, start, stop, note = p.kerndat()
			defer stop()
			p.addNote(note)
		}
		p.checkResults = runChecks(ctx, p.bin, start, names, checkFirst)
		if p.cache != nil && os.Geteuid() == 0 {
			if _, err := p.cache.store(p.bin, p.checkResults, p.now()); err != nil {
				p.addNote(fmt.Sprintf("check cache not written: %v", err))
			}
		}
	})
}

// addNote adds note, if any, to the notes of criu.check's evidence.
func (p *probe) addNote(note string) {
	p.note = joinNotes(p.note, note)
}

// joinNotes joins the notes that are not empty with "; ".
func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// runChecks answers `criu --version`, `criu check` and `criu check
// --feature` for each name. One `criu swrk` session (rpcChecks) answers the
// version, the check and the features CRIU's RPC knows; the other features,
// and those the session reports missing (for CRIU's message), each run as
// a `criu check --feature` process (CRIU checks one feature per run: a
// second --feature replaces the first). Every criu process gathers the
// same facts about the kernel unless an earlier one left them in
// KerndatDir. start, if not nil, starts every criu process (see
// kerndatRun). When checkFirst is set (the first run will leave them), the
// feature processes start, all at once, when the session's FEATURE_CHECK
// has answered (its child has then saved the facts), alongside the
// session's CHECK; when the check fails they are stopped and their answers
// are not used (they only count when it passes). Otherwise they run
// alongside the whole session. If the session fails, every answer comes
// from the command line, in the same order, with the features after
// `criu check` when checkFirst is set, and not run at all when it fails.
func runChecks(ctx context.Context, bin Binary, start starter, names []string, checkFirst bool) checkResults {
	if os.Geteuid() != 0 {
		// criu check refuses to run unprivileged; that says nothing
		// about the node.
		r := checkResults{features: make(map[string]error, len(names))}
		r.version, r.verErr = bin.version(ctx, start)
		r.checkErr = fmt.Errorf("criu check needs root (euid %d)", os.Geteuid())
		return r
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	features := make(map[string]error, len(names))
	started := make(map[string]bool, len(names))
	// Feature runs are stopped when a failed check makes their answers
	// unused.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	feature := func(name string) {
		if started[name] {
			return
		}
		started[name] = true
		wg.Go(func() {
			err := bin.checkFeature(fctx, start, name)
			mu.Lock()
			features[name] = err
			mu.Unlock()
		})
	}
	notRun := func(r *checkResults) {
		for _, name := range names {
			r.features[name] = fmt.Errorf("criu check --feature %s: %w: not used: criu check fails", name, ErrCheckFailed)
		}
	}
	if !checkFirst {
		for _, name := range names {
			if rpcFeatures[name] == nil {
				feature(name)
			}
		}
	}
	r, rest, err := rpcChecks(ctx, bin, start, names, func(rest []string) {
		for _, name := range rest {
			feature(name)
		}
	})
	if err != nil {
		r = checkResults{features: make(map[string]error, len(names))}
		wg.Go(func() { r.version, r.verErr = bin.version(ctx, start) })
		if checkFirst {
			r.checkMsg, r.checkErr = bin.check(ctx, start)
		} else {
			wg.Go(func() { r.checkMsg, r.checkErr = bin.check(ctx, start) })
		}
		rest = names
	}
	if checkFirst && r.checkErr != nil {
		stop()
		wg.Wait()
		notRun(&r)
		return r
	}
	for _, name := range rest {
		feature(name)
	}
	wg.Wait()
	for name, err := range features {
		r.features[name] = err
	}
	return r
}

// cached is the note a finding from a cached result carries.
func (p *probe) cached() string {
	if p.cachedAt.IsZero() {
		return ""
	}
	return fmt.Sprintf(" (cached: criu ran at %s in this boot; binary unchanged)", p.cachedAt.UTC().Format(time.RFC3339))
}

// checkTimeout bounds the CRIU probes of the capability report.
const checkTimeout = 15 * time.Second

// ReportOptions tune the CRIU entries of the capability report.
type ReportOptions struct {
	// Cache, if not nil, keeps the results of criu between reports of one
	// boot (see CheckCache); findings taken from it say so.
	Cache *CheckCache
	// Now is the clock that dates cache records; nil means time.Now.
	Now func() time.Time
}

// RequirementsWith returns the CRIU entries of the capability report: a
// criu binary found (through $NODESHIM_CRIU or PATH), its version, the
// result of `criu check`, and one entry per feature in ProbedFeatures, each
// probed with `criu check --feature NAME`; opts carry the boot's cache.
// criu.check also asks the kernel whether ctnetlink answers (see
// ConntrackModule), which `criu check` does not and every container dump
// needs.
func RequirementsWith(opts ReportOptions) []capability.Requirement {
	p := &probe{cache: opts.Cache, now: opts.Now, kerndat: func() (bool, starter, func(), string) {
		return kerndatRun(KerndatDir, time.Now())
	}}
	if p.now == nil {
		p.now = time.Now
	}
	checkpoint := []string{"Kubernetes: kubelet Checkpoint API (ContainerCheckpoint)", "nodeshim: checkpoint and restore"}
	reqs := []capability.Requirement{
		{
			ID: "criu.binary", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, _ capability.Host) capability.Finding {
				p.run(ctx)
				if p.findErr != nil {
					if errors.Is(p.findErr, ErrNoBinary) {
						return capability.Findingf(capability.Unsupported, "%v", p.findErr)
					}
					return capability.Findingf(capability.Unknown, "%v", p.findErr)
				}
				return capability.Findingf(capability.Supported, "%s (found through %s)", p.bin.Path, p.bin.Source)
			},
		},
		{
			ID: "criu.version", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, _ capability.Host) capability.Finding {
				p.run(ctx)
				switch {
				case p.findErr != nil:
					return capability.Findingf(capability.Unsupported, "no criu binary: %v", p.findErr)
				case p.verErr != nil:
					return capability.Findingf(capability.Unknown, "%v", p.verErr)
				case !p.version.AtLeast(MinVersion):
					return capability.Findingf(capability.Degraded, "criu %s is older than %s%s", p.version, MinVersion, p.cached())
				}
				return capability.Findingf(capability.Supported, "criu --version: %s%s", p.version, p.cached())
			},
		},
		{
			ID: "criu.check", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, h capability.Host) capability.Finding {
				p.run(ctx)
				f := checkFinding(p.findErr, p.checkMsg, p.checkErr)
				f.Evidence += p.cached()
				if f.Verdict == capability.Supported {
					f = withConntrack(f, probeConntrack(h, func() error { return askConntrack(ctx) }))
				}
				if p.note != "" {
					f.Evidence += "; " + p.note
				}
				return f
			},
		},
	}
	for _, f := range ProbedFeatures {
		reqs = append(reqs, capability.Requirement{
			ID: "criu.feature." + f.Name, Group: "criu", NeededBy: []string{f.NeededBy},
			Probe: func(ctx context.Context, _ capability.Host) capability.Finding {
				p.run(ctx)
				if p.findErr != nil {
					return capability.Findingf(capability.Unsupported, "no criu binary: %v", p.findErr)
				}
				if errors.Is(p.checkErr, ErrCheckFailed) {
					return capability.Findingf(capability.Unsupported, "criu check fails, so no feature is usable: %v%s", p.checkErr, p.cached())
				}
				if p.checkErr != nil {
					return capability.Findingf(capability.Unknown, "%v", p.checkErr)
				}
				fd := featureFinding(f.Name, p.features[f.Name], ctx.Err())
				fd.Evidence += p.cached()
				return fd
			},
		})
	}
	reqs = append(reqs, capability.Requirement{
		ID: "criu.lazy_pages", Group: "criu", MinKernel: capability.V(4, 11, 0),
		NeededBy: []string{"nodeshim: checkpoint --lazy / restore --lazy-from (post-copy migration)"},
		Probe: func(ctx context.Context, h capability.Host) capability.Finding {
			p.run(ctx)
			if p.findErr != nil {
				return capability.Findingf(capability.Unsupported, "no criu binary: %v", p.findErr)
			}
			return lazyPagesFinding(h.Path("/proc"))
		},
	})
	// Every entry waits on the one shared run of the criu processes,
	// which takes about half a second when nothing is cached: start them
	// before the other probes (they mostly wait on criu) and give them
	// longer than the collector's default.
	for i := range reqs {
		reqs[i].Slow = true
		reqs[i].Waits = true
		reqs[i].Timeout = checkTimeout
	}
	return reqs
}

// checkFinding turns a `criu check` result into a Finding.
func checkFinding(findErr error, msg string, err error) capability.Finding {
	switch {
	case findErr != nil:
		return capability.Findingf(capability.Unsupported, "no criu binary: %v", findErr)
	case errors.Is(err, ErrCheckFailed):
		return capability.Findingf(capability.Unsupported, "%v", err)
	case err != nil:
		return capability.Findingf(capability.Unknown, "criu check could not run: %v", err)
	}
	return capability.Findingf(capability.Supported, "criu check: %s", msg)
}

// featureFinding turns a `criu check --feature` result into a Finding: a
// feature CRIU reports missing only degrades checkpointing.
func featureFinding(name string, err, ctxErr error) capability.Finding {
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "criu check --feature %s: supported", name)
	case ctxErr != nil:
		return capability.Findingf(capability.Unknown, "criu check --feature %s: %v", name, err)
	case errors.Is(err, ErrCheckFailed):
		return capability.Findingf(capability.Degraded, "%v", err)
	}
	return capability.Findingf(capability.Unknown, "criu check --feature %s could not run: %v", name, err)
}
