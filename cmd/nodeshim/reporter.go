package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/reporter"
	"github.com/nodeshim/nodeshim/shim/reporter/kubeapi"
)

func newReporterCommand() *cobra.Command {
	var (
		kubeconfig, socket, metricsAddr string
		opts                            reporter.Options
	)
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
are served on --metrics-addr at /metrics.

Without --kubeconfig it uses the in-cluster configuration (the pod's
ServiceAccount token).`,
		Example: `  # In a DaemonSet pod (NODE_NAME and POD_NAMESPACE from the downward API)
  nodeshim reporter --socket /run/nodeshim/nodeshim.sock

  # From a workstation, against a kubeconfig
  nodeshim reporter --node-name node-1 --namespace nodeshim-system \
    --kubeconfig ~/.kube/config --socket /var/lib/nodeshim/nodeshim.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.NodeName == "" {
				return withExitCode(exitUsage, errors.New("--node-name (or NODE_NAME) is required"))
			}
			if opts.Namespace == "" {
				return withExitCode(exitUsage, errors.New("--namespace (or POD_NAMESPACE) is required"))
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "nodeshim-reporter/" + version
			cs, err := kubeapi.ForConfig(cfg)
			if err != nil {
				return err
			}
			shim := reporter.NewSocketClient(socket)
			defer shim.Close()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			opts.Client, opts.Shim, opts.Version = cs, shim, version
			opts.Metrics = reporter.NewMetrics(reg)
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			r, err := reporter.New(opts)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", metricsAddr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", metricsAddr, err)
			}
			// The shim's metrics are relayed: a shim that cannot be read
			// leaves the reporter's own metrics served.
			metrics := promhttp.HandlerFor(prometheus.Gatherers{reg, shim},
				promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
			opts.Logger.Info("reporting", "node", opts.NodeName, "socket", socket, "metrics", ln.Addr().String(), "apiServer", cfg.Host)
			return runServingMetrics(cmd.Context(), ln, metrics, r.Run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "the Node to report on (default $NODE_NAME)")
	f.StringVar(&opts.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the heartbeat Lease (default $POD_NAMESPACE)")
	f.StringVar(&opts.EventNamespace, "event-namespace", reporter.DefaultEventNamespace, "namespace of the Events about the Node")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; the in-cluster configuration when empty")
	f.StringVar(&socket, "socket", filepath.Join("/var/lib/nodeshim", api.SocketName), "the shim's node API socket")
	f.StringVar(&metricsAddr, "metrics-addr", ":9808", "address to serve Prometheus metrics on")
	f.DurationVar(&opts.PollInterval, "poll-interval", reporter.DefaultPollInterval, "how often to read the shim's status when it cannot be long polled")
	f.DurationVar(&opts.RenewInterval, "lease-renew-interval", reporter.DefaultRenewInterval, "how often to renew the heartbeat Lease (before jitter)")
	f.DurationVar(&opts.ResyncPeriod, "resync-period", reporter.DefaultResyncPeriod, "longest time between two status patches when nothing changes")
	return cmd
}

// restConfig loads kubeconfig, or the in-cluster configuration when empty.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (give --kubeconfig outside a pod): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
