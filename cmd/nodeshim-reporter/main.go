// Command nodeshim-reporter is nodeshim's reporter as a binary of its own:
// what `nodeshim reporter` does, linked without the shim's code (eBPF,
// CRIU, seccomp, the kernel report) and without client-go's clientset, so
// that the reporter container maps a third of the bytes. The image ships
// it beside nodeshim; deploy/daemonset.yaml's reporter container runs it.
//
//	nodeshim-reporter --socket /var/lib/nodeshim/nodeshim.sock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/shim/reporter"
	"github.com/nodeshim/nodeshim/shim/reporter/kubeapi"
)

// Set by the build (-X main.version=... -X main.commit=...).
var (
	version = "devel"
	commit  = "unknown"
)

// Memory defaults when the environment sets none: the reporter's live heap
// is 2-5 MiB (one Node, one Lease, the shim's status, queued Events), so it
// collects early rather than growing to twice its live heap, and the soft
// limit keeps the start-up peak down (BENCHMARKS.md, footprint: peak VmRSS
// 19.6 MiB with these, 20.2-20.6 with GOGC=50 and 24MiB). The DaemonSet sets
// GOMEMLIMIT from the container's memory limit.
const (
	defaultGOGC       = 25
	defaultMemLimitMB = 12
)

// Exit codes, as nodeshim's: 1 failure, 2 usage.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGOGC)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemLimitMB << 20)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("nodeshim-reporter", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: nodeshim-reporter [flags]

Publish the status that nodeshim serve publishes on its socket to the Node, as
`+"`nodeshim reporter`"+` does (see its --help): nodeshim's conditions on the Node's
status, a heartbeat Lease, an Event per transition, the status digest and version
annotations. It waits on the shim's long poll (GET /status?after=) and falls back
to reading every --poll-interval. Without --kubeconfig it uses the in-cluster
configuration. GOGC defaults to %d and GOMEMLIMIT to %dMiB when unset.

Flags:
`, defaultGOGC, defaultMemLimitMB)
		fs.PrintDefaults()
	}
	var (
		kubeconfig, socket, metricsAddr string
		showVersion                     bool
		opts                            reporter.Options
	)
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "the Node to report on (default $NODE_NAME)")
	fs.StringVar(&opts.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the heartbeat Lease (default $POD_NAMESPACE)")
	fs.StringVar(&opts.EventNamespace, "event-namespace", reporter.DefaultEventNamespace, "namespace of the Events about the Node")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; the in-cluster configuration when empty")
	fs.StringVar(&socket, "socket", filepath.Join("/var/lib/nodeshim", "nodeshim.sock"), "the shim's node API socket")
	fs.StringVar(&metricsAddr, "metrics-addr", ":9808", "address to serve Prometheus metrics on")
	fs.DurationVar(&opts.PollInterval, "poll-interval", reporter.DefaultPollInterval, "how often to read the shim's status when it cannot be long polled")
	fs.DurationVar(&opts.RenewInterval, "lease-renew-interval", reporter.DefaultRenewInterval, "how often to renew the heartbeat Lease (before jitter)")
	fs.DurationVar(&opts.ResyncPeriod, "resync-period", reporter.DefaultResyncPeriod, "longest time between two status patches when nothing changes")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if showVersion {
		fmt.Printf("nodeshim-reporter %s (commit %s)\n", version, commit)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nodeshim-reporter: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	for _, req := range []struct{ v, flag string }{{opts.NodeName, "--node-name (or NODE_NAME)"}, {opts.Namespace, "--namespace (or POD_NAMESPACE)"}} {
		if req.v == "" {
			fmt.Fprintf(os.Stderr, "nodeshim-reporter: %s is required\n", req.flag)
			return exitUsage
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := report(ctx, log, kubeconfig, socket, metricsAddr, opts); err != nil {
		log.Error("reporter failed", "err", err)
		return exitFailure
	}
	return 0
}

func report(ctx context.Context, log *slog.Logger, kubeconfig, socket, metricsAddr string, opts reporter.Options) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "nodeshim-reporter/" + version
	kube, err := kubeapi.ForConfig(cfg)
	if err != nil {
		return err
	}
	shim := reporter.NewSocketClient(socket)
	defer shim.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts.Client, opts.Shim, opts.Version = kube, shim, version
	opts.Metrics = reporter.NewMetrics(reg)
	opts.Logger = log
	r, err := reporter.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", metricsAddr, err)
	}
	// The shim's metrics are relayed: a shim that cannot be read leaves
	// the reporter's own metrics served.
	metrics := promhttp.HandlerFor(prometheus.Gatherers{reg, shim}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	log.Info("reporting", "node", opts.NodeName, "socket", socket, "metrics", ln.Addr().String(), "apiServer", cfg.Host)
	return serve(ctx, ln, metrics, r.Run)
}

// serve runs run until it returns or ctx ends, serving metrics on GET
// /metrics and "ok" on GET /healthz from ln meanwhile, as nodeshim's
// commands do.
func serve(ctx context.Context, ln net.Listener, metrics http.Handler, run func(context.Context) error) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
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
