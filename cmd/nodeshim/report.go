package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/report"
	"github.com/spf13/cobra"
)

// reportOptions are the flags of `nodeshim report`.
type reportOptions struct {
	output       string
	nfdFile      string
	require      []string
	probeTimeout time.Duration
	cacheDir     string
	host         kernel.Host
}

// options are the report package's options for the flags.
func (o *reportOptions) options() report.Options {
	return report.Options{Host: o.host, CacheDir: o.cacheDir, ProbeTimeout: o.probeTimeout}
}

func newReportCommand() *cobra.Command {
	def := kernel.DefaultHost()
	o := reportOptions{host: *def}
	cmd := &cobra.Command{
		Annotations: map[string]string{shortLived: "true"},
		Use:         "report",
		Short:       "Report what this node's kernel can and cannot do for Kubernetes",
		Long: `Probe the running kernel and report, with evidence, what it can do for
Kubernetes and for nodeshim.

The report names the kernel (release, version, distribution suffix, the
kubernetes.io/arch and kubernetes.io/os labels, its build config), then gives a
verdict on every requirement in the catalogue: Supported, Degraded,
Unsupported or Unknown, with one line of evidence. Verdicts come from real
probes (system calls, files, tools), not from the version number; the version
alone is shown beside them and a disagreement (a backported or a disabled
feature) is marked.

Exit status: 0 on success; 3 when --require names a requirement that is not
Supported; 2 on a usage error; 1 on any other failure.`,
		Example: `  # Print the report as a table
  nodeshim report

  # Machine-readable, schema nodeshim.io/v1alpha1 KernelReport
  nodeshim report -o json

  # Fail (exit 3) unless cgroup v2 and PSI triggers are fully supported
  nodeshim report --require cgroup.v2,psi.triggers

  # Hand the verdicts to node-feature-discovery as node labels
  nodeshim report --nfd-features-file /etc/kubernetes/node-feature-discovery/features.d/nodeshim

  # Run every probe afresh, ignoring results cached earlier in this boot
  nodeshim report --cache-dir ""

  # Probe a host whose filesystems are mounted under /host
  nodeshim report --proc-root /host/proc --sys-root /host/sys --boot-root /host/boot`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return withExitCode(exitUsage, err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			run := o.options().Start()
			defer run.Finish()
			return runReport(cmd.Context(), cmd.OutOrStdout(), &o, run.Requirements)
		},
	}
	addOutputFlag(cmd, &o.output)
	f := cmd.Flags()
	f.StringVar(&o.nfdFile, "nfd-features-file", "", "also write the verdicts as a node-feature-discovery feature file (features.d format) to this path")
	f.StringSliceVar(&o.require, "require", nil, "requirement IDs that must be Supported; exit 3 naming the reasons if any is not")
	f.DurationVar(&o.probeTimeout, "probe-timeout", capability.DefaultProbeTimeout, "longest time one probe may take before it counts as Unknown")
	f.StringVar(&o.cacheDir, "cache-dir", report.DefaultCacheDir, "where results that hold for one boot (criu check, eBPF program loads, PSI triggers) are kept between runs; empty to probe everything afresh")
	f.StringVar(&o.host.ProcRoot, "proc-root", def.ProcRoot, "where the host's procfs is mounted")
	f.StringVar(&o.host.SysRoot, "sys-root", def.SysRoot, "where the host's sysfs is mounted")
	f.StringVar(&o.host.BootRoot, "boot-root", def.BootRoot, "where the host's /boot is")
	f.StringVar(&o.host.ModulesRoot, "modules-root", def.ModulesRoot, "where the host's /lib/modules is")
	return cmd
}

// runReport collects the report for reqs and writes it to w, then writes
// the NFD feature file and checks --require.
func runReport(ctx context.Context, w io.Writer, o *reportOptions, reqs []capability.Requirement) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := checkRequired(o.require, reqs); err != nil {
		return err
	}
	if !slices.Contains([]string{"", "table", "json", "yaml"}, o.output) {
		return writeOutput(w, o.output, nil, nil) // reports the usage error
	}
	h := o.host
	rep, err := capability.Collector{ProbeTimeout: o.probeTimeout}.Collect(ctx, &h, reqs)
	if err != nil {
		return fmt.Errorf("collect kernel report: %w", err)
	}
	slog.Debug("kernel report collected", "requirements", rep.Summary.Total, "elapsed", time.Duration(rep.ElapsedMicroseconds)*time.Microsecond)
	if err := writeOutput(w, o.output, rep, rep.Table); err != nil {
		return err
	}
	if o.nfdFile != "" {
		b, err := rep.NFDFeatures()
		if err != nil {
			return fmt.Errorf("render NFD features for %s: %w", o.nfdFile, err)
		}
		if err := atomicfile.WriteFile(o.nfdFile, b, 0o644); err != nil {
			return fmt.Errorf("write NFD feature file: %w", err)
		}
	}
	return requireSupported(rep, o.require)
}

// checkRequired rejects --require IDs that are not in the catalogue.
func checkRequired(ids []string, reqs []capability.Requirement) error {
	var unknown []string
	for _, id := range ids {
		if !slices.ContainsFunc(reqs, func(r capability.Requirement) bool { return r.ID == id }) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return withExitCode(exitUsage, fmt.Errorf("--require: unknown requirement %s (see `nodeshim report -o json` for the IDs)", strings.Join(unknown, ", ")))
	}
	return nil
}

// errRequirementNotMet is wrapped in the exit-3 error of --require.
var errRequirementNotMet = errors.New("required kernel features are not Supported")

// requireSupported returns an exit-3 error naming every required ID that
// is not Supported, with its verdict and evidence.
func requireSupported(rep *capability.Report, ids []string) error {
	var reasons []string
	for _, id := range ids {
		res, _ := rep.Result(id)
		if res.Verdict != capability.Supported {
			reasons = append(reasons, fmt.Sprintf("%s is %s: %s", id, res.Verdict, res.Evidence))
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return withExitCode(exitProblem, fmt.Errorf("%w: %s", errRequirementNotMet, strings.Join(reasons, "; ")))
}
