package report

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// DefaultCacheDir keeps results that stay true for one boot (`criu check`,
// the eBPF program loads, the PSI trigger write), so that the report after
// the first of a boot is quick. It is on the host's disk, not in /run: the
// DaemonSet mounts /var/lib/nodeshim from the host, while a container's
// /run is its own and dies with the container; each record is keyed by the
// boot id, so a record from an earlier boot is never used.
const DefaultCacheDir = "/var/lib/nodeshim/report-cache"

// Options say which host a report probes and where it keeps what holds for
// one boot.
type Options struct {
	// Host is where the host's procfs, sysfs, /boot and modules are seen.
	Host kernel.Host
	// CacheDir holds the per-boot records: the verdicts of requirements
	// marked PerBoot (capability.BootCacheFile) and the results of `criu
	// check` (criu.CheckCacheFile), both keyed by the boot id of Host. Empty
	// probes everything afresh.
	CacheDir string
	// ProbeTimeout is the longest one probe may take before it counts as
	// Unknown; zero means capability.DefaultProbeTimeout.
	ProbeTimeout time.Duration
}

// Run is one collection of the report: the catalogue, with its probes
// answered from the per-boot caches where they hold a record, and the
// cache to save once the probes have run.
type Run struct {
	// Requirements is the catalogue to collect.
	Requirements []capability.Requirement
	verdicts     *capability.BootCache
}

// Start returns the catalogue wired to o's caches. The two caches are one
// idea, kept in one directory under one key (the boot id of o.Host): the
// verdicts of PerBoot requirements, which the collector saves, and the
// results of `criu check`, which CRIU's probes keep themselves because
// theirs also depend on the criu binary's identity.
func (o Options) Start() *Run {
	if o.CacheDir == "" {
		return &Run{Requirements: Catalogue()}
	}
	bootID := o.Host.Path("/proc/sys/kernel/random/boot_id")
	verdicts := &capability.BootCache{
		Dir: o.CacheDir,
		// The boot id of the running kernel, which the eBPF probes load
		// into whatever roots the report reads; the roots are part of the
		// key.
		BootIDPath: "/proc/sys/kernel/random/boot_id",
		Scope:      fmt.Sprintf("proc=%s sys=%s", o.Host.ProcRoot, o.Host.SysRoot),
	}
	reqs := catalogueWith(criu.ReportOptions{Cache: &criu.CheckCache{Dir: o.CacheDir, BootIDPath: bootID}})
	return &Run{Requirements: verdicts.Wrap(reqs), verdicts: verdicts}
}

// Finish keeps the per-boot verdicts the run's probes found. A failure is
// logged and otherwise ignored: the report stands without the cache, and
// the next one probes again.
func (r *Run) Finish() {
	if _, err := r.verdicts.Save(); err != nil {
		slog.Warn("keep per-boot verdicts", "err", err)
	}
}

// Collect collects the whole report against o.Host, keeping the per-boot
// results under o.CacheDir.
func (o Options) Collect(ctx context.Context) (*capability.Report, error) {
	run := o.Start()
	defer run.Finish()
	h := o.Host
	rep, err := capability.Collector{ProbeTimeout: o.ProbeTimeout}.Collect(ctx, &h, run.Requirements)
	if err != nil {
		return nil, fmt.Errorf("collect kernel report: %w", err)
	}
	return rep, nil
}
