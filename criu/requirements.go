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
	// cacheNote says why the cache was not used or not written; logged
	// in the evidence of criu.check only.
	cacheNote string
	// keepsKerndat says whether the first criu run will leave its kernel
	// facts for the others (criuKeepsKerndat on KerndatDir).
	keepsKerndat func() bool
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
				p.cacheNote = fmt.Sprintf("check cache unusable: %v", err)
			}
		}
		p.checkResults = runChecks(ctx, p.bin, names, p.keepsKerndat != nil && p.keepsKerndat())
		if p.cache != nil && os.Geteuid() == 0 {
			if _, err := p.cache.store(p.bin, p.checkResults, p.now()); err != nil {
				p.cacheNote = fmt.Sprintf("check cache not written: %v", err)
			}
		}
	})
}

// runChecks runs `criu --version`, `criu check` and `criu check --feature`
// for each name. Each is a separate criu process (CRIU checks one feature
// per run: a second --feature replaces the first), and each gathers the
// same facts about the kernel unless an earlier run left them in
// KerndatDir. When checkFirst is set (the first run will leave them), the
// features run after `criu check`, all at once, and not at all when it
// fails (they are only used when it passes); otherwise everything runs at
// once.
func runChecks(ctx context.Context, bin Binary, names []string, checkFirst bool) checkResults {
	r := checkResults{features: make(map[string]error, len(names))}
	if os.Geteuid() != 0 {
		// criu check refuses to run unprivileged; that says nothing
		// about the node.
		r.version, r.verErr = bin.Version(ctx)
		r.checkErr = fmt.Errorf("criu check needs root (euid %d)", os.Geteuid())
		return r
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Go(func() { r.version, r.verErr = bin.Version(ctx) })
	if checkFirst {
		r.checkMsg, r.checkErr = bin.Check(ctx)
		if r.checkErr != nil {
			for _, name := range names {
				r.features[name] = fmt.Errorf("criu check --feature %s: %w: not run: criu check fails", name, ErrCheckFailed)
			}
			wg.Wait()
			return r
		}
	} else {
		wg.Go(func() { r.checkMsg, r.checkErr = bin.Check(ctx) })
	}
	for _, name := range names {
		wg.Go(func() {
			err := bin.CheckFeature(ctx, name)
			mu.Lock()
			r.features[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
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
func RequirementsWith(opts ReportOptions) []capability.Requirement {
	p := &probe{cache: opts.Cache, now: opts.Now, keepsKerndat: func() bool { return criuKeepsKerndat(KerndatDir) }}
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
					if errors.Is(p.findErr, ErrNotFound) {
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
			Probe: func(ctx context.Context, _ capability.Host) capability.Finding {
				p.run(ctx)
				f := checkFinding(p.findErr, p.checkMsg, p.checkErr)
				f.Evidence += p.cached()
				if p.cacheNote != "" {
					f.Evidence += "; " + p.cacheNote
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
	// early and give them longer than the collector's default.
	for i := range reqs {
		reqs[i].Slow = true
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
