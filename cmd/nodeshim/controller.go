package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/internal/metricsserver"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/cluster/controller"
	"github.com/nodeshim/nodeshim/cluster/migration"
	"github.com/nodeshim/nodeshim/cluster/reporter"
)

func newControllerCommand() *cobra.Command {
	var (
		kubeconfig, metricsAddr string
		podMigrations           bool
		opts                    controller.Options
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Mark nodes whose reporter went silent: their NodeShim conditions turn Unknown",
		Long: `Run the cluster-wide controller that does for nodeshim's conditions what
kube-controller-manager does for kubelet's: it watches the reporters' Leases (one
per node, named after the node, in --reporter-namespace) and, once a node's Lease
has not been renewed for --grace-period, sets each of the node's NodeShim
conditions to Unknown with reason ReporterStopped and the time of the last
renewal. It never touches kubelet's conditions, and never writes anything but
Unknown: when the reporter comes back, it publishes its conditions itself.

Replicas elect a leader through a Lease named --leader-election-name in
--namespace; only the leader writes. Prometheus metrics are served on
--metrics-addr at /metrics, and /healthz answers ok.

Without --kubeconfig it uses the in-cluster configuration (the pod's
ServiceAccount token).`,
		Example: `  # In the Deployment's pod (POD_NAMESPACE and POD_NAME from the downward API)
  nodeshim controller --reporter-namespace nodeshim

  # From a workstation, against a kubeconfig
  nodeshim controller --kubeconfig ~/.kube/config --namespace nodeshim-controller \
    --reporter-namespace nodeshim --grace-period 40s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ElectionNamespace == "" {
				return withExitCode(exitUsage, errors.New("--namespace (or POD_NAMESPACE) is required"))
			}
			if opts.GracePeriod <= 0 || opts.SyncPeriod <= 0 {
				return withExitCode(exitUsage, errors.New("--grace-period and --sync-period must be positive"))
			}
			id, err := identity(opts.Identity)
			if err != nil {
				return err
			}
			opts.Identity = id
			cfg, err := kubeapi.LoadConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "nodeshim-controller/" + version
			api, err := kubeapi.ForConfig(cfg)
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			opts.Client = api
			opts.Metrics = controller.NewMetrics(reg)
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			if podMigrations {
				mc, err := migration.New(migration.Options{API: api, Logger: opts.Logger.With("controller", "podmigrations")})
				if err != nil {
					return err
				}
				opts.WhileLeading = mc.Run
			}
			c, err := controller.New(opts)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", metricsAddr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", metricsAddr, err)
			}
			opts.Logger.Info("controller", "identity", id, "metrics", ln.Addr().String(), "apiServer", cfg.Host)
			return metricsserver.Run(cmd.Context(), ln, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil, c.Run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; the in-cluster configuration when empty")
	f.StringVar(&opts.ReporterNamespace, "reporter-namespace", "nodeshim", "namespace of the reporters' Leases (the DaemonSet's namespace)")
	f.StringVar(&opts.ElectionNamespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election's Lease (default $POD_NAMESPACE)")
	f.StringVar(&opts.ElectionName, "leader-election-name", controller.DefaultElectionName, "name of the leader election's Lease")
	f.StringVar(&opts.Identity, "identity", "", "this replica's identity in the election (default $POD_NAME or the host name, with a random suffix)")
	f.StringVar(&opts.EventNamespace, "event-namespace", reporter.DefaultEventNamespace, "namespace of the Events about Nodes")
	f.StringVar(&metricsAddr, "metrics-addr", ":9809", "address to serve Prometheus metrics and /healthz on")
	f.BoolVar(&podMigrations, "pod-migrations", false, "while leading, also move pods as PodMigrations ask (cluster/migration; needs deploy/'s crd-podmigration.yaml and rbac-podmigration.yaml, and reporters run with --pod-migrations)")
	f.DurationVar(&opts.GracePeriod, "grace-period", controller.DefaultGracePeriod, "how long a reporter's Lease may go unrenewed before its node's NodeShim conditions turn Unknown")
	f.DurationVar(&opts.SyncPeriod, "sync-period", controller.DefaultSyncPeriod, "how often every node is looked at again")
	f.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", controller.DefaultLeaseDuration, "how long a standby waits before it takes over an unrenewed lead")
	f.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", controller.DefaultRenewDeadline, "how long the leader retries renewing before it gives up the lead")
	f.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", controller.DefaultRetryPeriod, "how often the election is retried")
	f.IntVar(&opts.Workers, "workers", controller.DefaultWorkers, "how many nodes are synced at once")
	return cmd
}

// identity returns id, or $POD_NAME (else the host name) with a random
// suffix, as kube-controller-manager names itself in its election.
func identity(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	base := os.Getenv("POD_NAME")
	if base == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("identity: %w", err)
		}
		base = h
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	return base + "_" + hex.EncodeToString(b), nil
}
