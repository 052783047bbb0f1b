// Package command is the reporter as a process: its flags, its Kubernetes
// client, and its metrics and health endpoints around a reporter.Reporter.
// `nodeshim reporter` and the nodeshim-reporter binary both run it.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/migrationsend"
	"github.com/nodeshim/nodeshim/cluster/podcheckpoint"
	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/internal/metricsserver"
	"github.com/nodeshim/nodeshim/shim/client"
)

// DefaultSocket is the shim's node API socket as the DaemonSet mounts it.
var DefaultSocket = filepath.Join("/var/lib/nodeshim", "nodeshim.sock")

// Config is a reporter process's configuration.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// Socket is the shim's node API socket.
	Socket string
	// MetricsAddr is where /metrics, /healthz and /readyz are served.
	MetricsAddr string
	// PodCheckpoints serves the PodCheckpoint objects of this node's pods
	// (cluster/podcheckpoint); their CustomResourceDefinition must be
	// installed, and the shim must grant the reporter's uid
	// api.podCheckpointUIDs.
	PodCheckpoints bool
	// PodMigrations has this node's shim send the pod checkpoints of the
	// PodMigrations from this node to their targets
	// (cluster/migrationsend); their definition and the reporters' rights
	// (deploy/rbac-podmigration.yaml) must be installed, and the shim
	// must send (checkpoint.transfer.send).
	PodMigrations bool
	// Options are the reporter's; Client, Shim, Version, Metrics and
	// Logger are set by Run.
	Options reporter.Options
}

// AddFlags registers c's flags on fs, with their defaults; the node name and
// namespace default to $NODE_NAME and $POD_NAMESPACE.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Options.NodeName, "node-name", os.Getenv("NODE_NAME"), "the Node to report on (default $NODE_NAME)")
	fs.StringVar(&c.Options.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the heartbeat Lease (default $POD_NAMESPACE)")
	fs.StringVar(&c.Options.EventNamespace, "event-namespace", reporter.DefaultEventNamespace, "namespace of the Events about the Node")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; the in-cluster configuration when empty")
	fs.StringVar(&c.Socket, "socket", DefaultSocket, "the shim's node API socket")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", ":9808", "address to serve Prometheus metrics, /healthz and /readyz on")
	fs.BoolVar(&c.PodMigrations, "pod-migrations", false, "send the pod checkpoints of the PodMigrations from this node (needs their definition and rights, and the shim's checkpoint.transfer.send)")
	fs.BoolVar(&c.PodCheckpoints, "pod-checkpoints", false, "serve the PodCheckpoint objects of this node's pods (needs their CustomResourceDefinition, and the shim's api.podCheckpointUIDs)")
	fs.DurationVar(&c.Options.PollInterval, "poll-interval", reporter.DefaultPollInterval, "how often to read the shim's status when it cannot be long polled")
	fs.DurationVar(&c.Options.RenewInterval, "lease-renew-interval", reporter.DefaultRenewInterval, "how often to renew the heartbeat Lease (before jitter)")
	fs.DurationVar(&c.Options.ResyncPeriod, "resync-period", reporter.DefaultResyncPeriod, "longest time between two status patches when nothing changes")
}

// Check returns an error naming the first required flag that is empty.
func (c *Config) Check() error {
	switch {
	case c.Options.NodeName == "":
		return errors.New("--node-name (or NODE_NAME) is required")
	case c.Options.Namespace == "":
		return errors.New("--namespace (or POD_NAMESPACE) is required")
	}
	return nil
}

// Run runs the reporter c describes until ctx ends, with metrics (its own
// and the shim's, relayed) on c.MetricsAddr, "ok" on /healthz, and /readyz
// answering 200 once the reporter has both published the Node's status and
// renewed its Lease.
func Run(ctx context.Context, c Config, version string, log *slog.Logger) error {
	cfg, err := kubeapi.LoadConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "nodeshim-reporter/" + version
	kube, err := kubeapi.ForConfig(cfg)
	if err != nil {
		return err
	}
	shim := reporter.NewSocketClient(c.Socket)
	defer shim.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := c.Options
	opts.Client, opts.Shim, opts.Report, opts.Version = kube, shim, shim, version
	opts.Metrics = reporter.NewMetrics(reg)
	opts.Logger = log
	r, err := reporter.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.MetricsAddr, err)
	}
	// The shim's metrics are relayed: a shim that cannot be read leaves
	// the reporter's own metrics served.
	metrics := promhttp.HandlerFor(prometheus.Gatherers{reg, shim}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	runs := []func(context.Context) error{r.Run}
	if c.PodCheckpoints || c.PodMigrations {
		ckpt := client.New(c.Socket)
		defer ckpt.Close()
		if c.PodCheckpoints {
			h, err := podcheckpoint.New(podcheckpoint.Options{NodeName: opts.NodeName, API: kube, Shim: ckpt, Logger: log})
			if err != nil {
				return err
			}
			runs = append(runs, h.Run)
		}
		if c.PodMigrations {
			s, err := migrationsend.New(migrationsend.Options{NodeName: opts.NodeName, API: kube, Shim: migrationsend.SocketShim{C: ckpt},
				Logger: log.With("handler", "podmigrations")})
			if err != nil {
				return err
			}
			runs = append(runs, s.Run)
		}
	}
	run := func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, f := range runs {
			g.Go(func() error { return f(gctx) })
		}
		return g.Wait()
	}
	log.Info("reporting", "node", opts.NodeName, "socket", c.Socket, "metrics", ln.Addr().String(), "apiServer", cfg.Host,
		"podCheckpoints", c.PodCheckpoints, "podMigrations", c.PodMigrations)
	return metricsserver.Run(ctx, ln, metrics, func() error { return Ready(r.State()) }, run)
}

// Ready returns nil once s shows a published status and a renewed Lease,
// else an error saying which is missing.
func Ready(s reporter.State) error {
	switch {
	case s.LastPublish.IsZero() && s.LastRenew.IsZero():
		return errors.New("the Node's status is not published and the Lease not renewed yet")
	case s.LastPublish.IsZero():
		return errors.New("the Node's status is not published yet")
	case s.LastRenew.IsZero():
		return errors.New("the Lease is not renewed yet")
	}
	return nil
}
