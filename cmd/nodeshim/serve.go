package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/report"
	"github.com/nodeshim/nodeshim/shim/daemon"
	"github.com/nodeshim/nodeshim/shim/lock"
)

func newServeCommand() *cobra.Command {
	var (
		opts         daemon.Options
		probeTimeout time.Duration
		noReport     bool
	)
	cmd := &cobra.Command{
		Use:         "serve",
		Annotations: map[string]string{longLived: "true"},
		Short:       "Run the node daemon: status model, configuration lifecycle and node API",
		Long: `Run nodeshim as the node's privileged daemon, in the foreground.

serve takes the single-instance lock, collects the capability report (the
same catalogue as ` + "`nodeshim report`" + `) and prints it, keeps its configuration
safe with assigned / active / last-known-good snapshots under --root-dir,
watches cgroup pressure and PSI, OOM kills (eBPF), the network and kubelet's
plugin registry, prints one line per condition transition on stdout, and
serves the node API on <root-dir>/nodeshim.sock (mode 0600, root only;
reporter uids/gids from the configuration may read the status endpoints)
and, when configured, on TCP with TLS and a bearer token:

  GET  /status  /report[?refresh=true]  /healthz  /readyz  /metrics
  POST /checkpoint/{namespace}/{pod}/{container}?timeout=SECONDS

SIGTERM or SIGINT shuts it down cleanly: in-flight checkpoints are aborted
with the workload left running, the eBPF programs detached, the socket
removed and the lock released.`,
		Example: `  # Serve with the local default configuration
  nodeshim serve --root-dir /var/lib/nodeshim

  # Take the configuration from a ConfigMap volume
  nodeshim serve --config-source /etc/nodeshim/config

  # Run from a source tree without installing (what make run does)
  nodeshim serve --root-dir .state/root --lock-file .state/nodeshim.lock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			if !noReport {
				opts.Report = &report.Options{ProbeTimeout: probeTimeout}
			}
			// The start-up work (the capability report, kernel BTF
			// decoded for the eBPF loads) leaves the heap at several
			// times what serve keeps live, and an idle daemon allocates
			// too little to collect it: give it back once settled.
			opts.Settled = debug.FreeOSMemory
			return daemon.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.RootDir, "root-dir", "/var/lib/nodeshim", "directory for nodeshim's state and API socket")
	f.StringVar(&opts.LockFile, "lock-file", lock.DefaultPath, "single-instance lock file")
	f.StringVar(&opts.ConfigSource, "config-source", "", "directory holding config.yaml and *.conf drop-ins (a ConfigMap volume); empty for local defaults")
	f.StringVar(&opts.HostRoot, "host-root", "/", "where the host's root filesystem is mounted")
	f.StringVar(&opts.ProcRoot, "proc-root", "", "where the host's procfs is mounted (default <host-root>/proc)")
	f.DurationVar(&opts.SoakPeriod, "config-soak-period", 0, "how long every new configuration must stay active before it becomes last-known-good; 0 for each configuration's own configSoakPeriod")
	f.DurationVar(&probeTimeout, "probe-timeout", capability.DefaultProbeTimeout, "longest time one capability probe may take before it counts as Unknown")
	f.BoolVar(&noReport, "no-report", false, "do not collect the capability report (KernelReportSucceeded stays Unknown)")
	return cmd
}
