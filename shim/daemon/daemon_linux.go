// Package daemon assembles nodeshim serve from the shim's parts: the
// single-instance lock, the configuration lifecycle, the network and plugin
// sources feeding the status model, and the node API on a unix socket.
// It only wires; each part is its own package.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/metrics"
	"github.com/nodeshim/nodeshim/shim/network"
	"github.com/nodeshim/nodeshim/shim/plugin"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Options configure Run.
type Options struct {
	// RootDir holds the configuration state and the API socket.
	RootDir string
	// LockFile is the single-instance lock; lock.DefaultPath when empty.
	LockFile string
	// ConfigSource is the directory the configuration is delivered in;
	// empty for the local defaults.
	ConfigSource string
	// HostRoot is where the host's / is seen ("/" unless mounted elsewhere).
	HostRoot string
	// SoakPeriod overrides the configuration soak period when not zero.
	SoakPeriod time.Duration
	// Out receives one line per condition transition.
	Out io.Writer
	// Logger receives the parts' logs; slog.Default() when nil.
	Logger *slog.Logger
	// Listening, when set, is called once the API socket accepts requests.
	Listening func(socket string)
}

// Run serves until ctx is done, then shuts down in order: stop accepting,
// stop the sources, remove the socket, release the lock.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.LockFile == "" {
		opts.LockFile = lock.DefaultPath
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	log := opts.Logger
	l, err := lock.Acquire(opts.LockFile, lock.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if rerr := l.Release(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if err := os.MkdirAll(opts.RootDir, 0o700); err != nil {
		return fmt.Errorf("create root dir %s: %w", opts.RootDir, err)
	}

	soak := opts.SoakPeriod
	cfg, err := config.Open(config.Options{
		StateDir: filepath.Join(opts.RootDir, "config"), SourceDir: opts.ConfigSource, SoakPeriod: soak, Logger: log,
	})
	if err != nil {
		return err
	}
	active := cfg.Active()

	model := status.New(nil)
	trans, unsubscribe := model.Subscribe(256)
	var printer sync.WaitGroup
	printer.Add(1)
	go func() {
		defer printer.Done()
		for t := range trans {
			c := t.Condition
			fmt.Fprintf(opts.Out, "%s %s %s %s %s\n", c.LastTransitionTime.UTC().Format(time.RFC3339), c.Type, c.Status, c.Reason, c.Message)
		}
	}()
	defer func() { unsubscribe(); printer.Wait() }()

	plugins := plugin.New(plugin.Options{
		KubeletRootDir:   filepath.Join(opts.HostRoot, active.KubeletRootDir),
		AcceptedVersions: active.Plugins.AcceptedVersions,
		Expected:         active.Plugins.Expected,
		Logger:           log,
	})
	netmon := network.New(network.Options{Root: opts.HostRoot, CNIConfDir: active.Network.CNIConfDir, Logger: log})

	srcCtx, stopSources := context.WithCancel(context.Background())
	var sources sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		sources.Add(1)
		go func() {
			defer sources.Done()
			if err := f(srcCtx); err != nil {
				log.Error("source stopped", "source", name, "err", err)
			}
		}()
	}
	run("config", cfg.Run)
	run("plugins", plugins.Run)
	run("network", netmon.Run)
	run("config-status", func(ctx context.Context) error {
		for {
			ch := cfg.Changed()
			model.SetConfig(cfg.Status())
			select {
			case <-ctx.Done():
				return nil
			case <-ch:
			}
		}
	})
	run("plugin-status", func(ctx context.Context) error {
		model.Follow(ctx, plugins.Changed, func() []condition.Condition { return []condition.Condition{plugins.Condition("PluginsReady")} })
		return nil
	})
	run("network-status", func(ctx context.Context) error {
		model.Follow(ctx, netmon.Changed, func() []condition.Condition { return []condition.Condition{netmon.Condition()} })
		return nil
	})
	defer func() { stopSources(); sources.Wait() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(model, cfg.Status))
	socket := filepath.Join(opts.RootDir, api.SocketName)
	ln, err := api.Listen(socket, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(socket)
	srv := &http.Server{
		Handler:           api.NewHandler(model, api.Options{Logger: log, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}),
		ConnContext:       api.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving", "socket", socket, "configSource", opts.ConfigSource)
	if opts.Listening != nil {
		opts.Listening(socket)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve %s: %w", socket, err)
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shut down API: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", socket, err)
	}
	return nil
}
