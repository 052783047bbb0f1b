package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/shim/daemon"
	"github.com/nodeshim/nodeshim/shim/lock"
)

func newServeCommand() *cobra.Command {
	var opts daemon.Options
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the node daemon: status model, configuration lifecycle and node API",
		Long: `Run nodeshim as the node's privileged daemon, in the foreground.

serve takes the single-instance lock, keeps its configuration safe with
assigned / active / last-known-good checkpoints under --root-dir, watches the
network and kubelet's plugin registry, prints one line per condition
transition on stdout, and serves the node API on <root-dir>/nodeshim.sock
(mode 0600, root only). SIGTERM or SIGINT shuts it down cleanly.`,
		Example: `  # Serve with the local default configuration
  nodeshim serve --root-dir /var/lib/nodeshim

  # Take the configuration from a ConfigMap volume
  nodeshim serve --config-source /etc/nodeshim/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			return daemon.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.RootDir, "root-dir", "/var/lib/nodeshim", "directory for nodeshim's state and API socket")
	f.StringVar(&opts.LockFile, "lock-file", lock.DefaultPath, "single-instance lock file")
	f.StringVar(&opts.ConfigSource, "config-source", "", "directory holding config.yaml and *.conf drop-ins (a ConfigMap volume); empty for local defaults")
	f.StringVar(&opts.HostRoot, "host-root", "/", "where the host's root filesystem is mounted")
	f.DurationVar(&opts.SoakPeriod, "config-soak-period", 10*time.Minute, "how long a new configuration must stay active before it becomes last-known-good")
	return cmd
}
