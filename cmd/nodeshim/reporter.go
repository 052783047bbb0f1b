package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/cluster/reporter/command"
)

func newReporterCommand() *cobra.Command {
	var c command.Config
	cmd := &cobra.Command{
		Use:   "reporter",
		Short: "Publish the shim's node status to the Kubernetes API server",
		Long: `Run the unprivileged reporter: read the status that nodeshim serve publishes
on its socket and keep the Node in step with it.

The reporter patches nodeshim's own conditions (NodeShimReady and NodeShim<Type>,
never kubelet's Ready or pressure conditions) onto the Node's status, leaving
every other condition untouched, when something changes and at least every 5
minutes; renews a heartbeat Lease named after the node in --namespace every
10 s with jitter (retrying with backoff from 200 ms to 7 s); records an Event
per condition transition; and annotates the Node with the status digest and
its version. When the shim cannot be read, NodeShimReady turns False with
reason ShimUnreachable. Prometheus metrics, its own and the shim's relayed,
are served on --metrics-addr at /metrics; /healthz answers ok, and /readyz
answers 200 once the Node's status is published and the Lease renewed.

Without --kubeconfig it uses the in-cluster configuration (the pod's
ServiceAccount token).`,
		Example: `  # In a DaemonSet pod (NODE_NAME and POD_NAMESPACE from the downward API)
  nodeshim reporter --socket /run/nodeshim/nodeshim.sock

  # From a workstation, against a kubeconfig
  nodeshim reporter --node-name node-1 --namespace nodeshim-system \
    --kubeconfig ~/.kube/config --socket /var/lib/nodeshim/nodeshim.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.Check(); err != nil {
				return withExitCode(exitUsage, err)
			}
			return command.Run(cmd.Context(), c, version, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	fs := flag.NewFlagSet("reporter", flag.ContinueOnError)
	c.AddFlags(fs)
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}
