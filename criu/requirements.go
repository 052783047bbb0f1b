package criu

import (
	"time"

	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/nodeshim/nodeshim/kernel"
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

// probe caches the binary, version and `criu check` result for the
// requirements of one Requirements call, so that a report runs criu once.
type probe struct {
	once     sync.Once
	bin      Binary
	findErr  error
	version  Version
	verErr   error
	checkMsg string
	checkErr error
}

func (p *probe) run(ctx context.Context) {
	p.once.Do(func() {
		p.bin, p.findErr = Find("", nil)
		if p.findErr != nil {
			return
		}
		p.version, p.verErr = p.bin.Version(ctx)
		if os.Geteuid() != 0 {
			// criu check refuses to run unprivileged; that says nothing
			// about the node.
			p.checkErr = fmt.Errorf("criu check needs root (euid %d)", os.Geteuid())
			return
		}
		p.checkMsg, p.checkErr = p.bin.Check(ctx)
	})
}

// checkTimeout bounds the CRIU probes of the capability report.
const checkTimeout = 15 * time.Second

// Requirements returns the CRIU entries of the capability report: a criu
// binary found (through $NODESHIM_CRIU or PATH), its version, the result
// of `criu check`, and one entry per feature in ProbedFeatures, each probed
// with `criu check --feature NAME`.
func Requirements() []kernel.Requirement {
	p := &probe{}
	checkpoint := []string{"Kubernetes: kubelet Checkpoint API (ContainerCheckpoint)", "nodeshim: checkpoint and restore"}
	reqs := []kernel.Requirement{
		{
			ID: "criu.binary", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, _ *kernel.Host) kernel.Finding {
				p.run(ctx)
				if p.findErr != nil {
					if errors.Is(p.findErr, ErrNotFound) {
						return kernel.Findingf(kernel.Unsupported, "%v", p.findErr)
					}
					return kernel.Findingf(kernel.Unknown, "%v", p.findErr)
				}
				return kernel.Findingf(kernel.Supported, "%s (found through %s)", p.bin.Path, p.bin.Source)
			},
		},
		{
			ID: "criu.version", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, _ *kernel.Host) kernel.Finding {
				p.run(ctx)
				switch {
				case p.findErr != nil:
					return kernel.Findingf(kernel.Unsupported, "no criu binary: %v", p.findErr)
				case p.verErr != nil:
					return kernel.Findingf(kernel.Unknown, "%v", p.verErr)
				case !p.version.AtLeast(MinVersion):
					return kernel.Findingf(kernel.Degraded, "criu %s is older than %s", p.version, MinVersion)
				}
				return kernel.Findingf(kernel.Supported, "criu --version: %s", p.version)
			},
		},
		{
			ID: "criu.check", Group: "criu", NeededBy: checkpoint,
			Probe: func(ctx context.Context, _ *kernel.Host) kernel.Finding {
				p.run(ctx)
				return checkFinding(p.findErr, p.checkMsg, p.checkErr)
			},
		},
	}
	for _, f := range ProbedFeatures {
		reqs = append(reqs, kernel.Requirement{
			ID: "criu.feature." + f.Name, Group: "criu", NeededBy: []string{f.NeededBy},
			Probe: func(ctx context.Context, _ *kernel.Host) kernel.Finding {
				p.run(ctx)
				if p.findErr != nil {
					return kernel.Findingf(kernel.Unsupported, "no criu binary: %v", p.findErr)
				}
				if errors.Is(p.checkErr, ErrCheckFailed) {
					return kernel.Findingf(kernel.Unsupported, "criu check fails, so no feature is usable: %v", p.checkErr)
				}
				if p.checkErr != nil {
					return kernel.Findingf(kernel.Unknown, "%v", p.checkErr)
				}
				return featureFinding(f.Name, p.bin.CheckFeature(ctx, f.Name), ctx.Err())
			},
		})
	}
	// Every entry waits on the one shared run of `criu check`, which
	// forks CRIU and takes about a second on its own: start them early
	// and give them longer than the collector's default.
	for i := range reqs {
		reqs[i].Slow = true
		reqs[i].Timeout = checkTimeout
	}
	return reqs
}

// checkFinding turns a `criu check` result into a Finding.
func checkFinding(findErr error, msg string, err error) kernel.Finding {
	switch {
	case findErr != nil:
		return kernel.Findingf(kernel.Unsupported, "no criu binary: %v", findErr)
	case errors.Is(err, ErrCheckFailed):
		return kernel.Findingf(kernel.Unsupported, "%v", err)
	case err != nil:
		return kernel.Findingf(kernel.Unknown, "criu check could not run: %v", err)
	}
	return kernel.Findingf(kernel.Supported, "criu check: %s", msg)
}

// featureFinding turns a `criu check --feature` result into a Finding: a
// feature CRIU reports missing only degrades checkpointing.
func featureFinding(name string, err, ctxErr error) kernel.Finding {
	switch {
	case err == nil:
		return kernel.Findingf(kernel.Supported, "criu check --feature %s: supported", name)
	case ctxErr != nil:
		return kernel.Findingf(kernel.Unknown, "criu check --feature %s: %v", name, err)
	case errors.Is(err, ErrCheckFailed):
		return kernel.Findingf(kernel.Degraded, "%v", err)
	}
	return kernel.Findingf(kernel.Unknown, "criu check --feature %s could not run: %v", name, err)
}
