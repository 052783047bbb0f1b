// Package daemon assembles nodeshim serve from the shim's parts: the
// single-instance lock, the configuration lifecycle, the sources feeding
// the status model (capability report, cgroup pressure and PSI, the eBPF
// OOM watcher, network, plugin registry, checkpoint history), and the node
// API on a unix socket and optionally on TCP with TLS.
// It only wires; each part is its own package.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
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
	// ProcRoot is the host's procfs, for the pressure monitor and the
	// checkpoints' process lookup; HostRoot/proc when empty.
	ProcRoot string
	// SoakPeriod overrides the configuration soak period when not zero.
	SoakPeriod time.Duration
	// Report collects the capability report, at start and for GET
	// /report?refresh=true. The caller supplies it because the full
	// requirement catalogue is assembled by the command; nil reports
	// KernelReportSucceeded Unknown.
	Report func(ctx context.Context) (*capability.Report, error)
	// OOMHooks overrides the OOM watcher's hooks (bpf.DefaultOOMHooks when
	// nil).
	OOMHooks []bpf.OOMHook
	// Out receives the capability report at start, then one line per
	// condition transition (a change of status or reason).
	Out io.Writer
	// Logger receives the parts' logs; slog.Default() when nil.
	Logger *slog.Logger
	// Listening, when set, is called once the API socket accepts requests.
	Listening func(socket string)
	// TCPListening, when set, is called with the TCP listener's address
	// once it accepts requests (api.tcpAddress configured).
	TCPListening func(addr net.Addr)

	// extraSources are run beside the built-in ones (tests).
	extraSources map[string]func(context.Context) error
}

// runGuarded runs a source and turns a panic into an error, logging its
// stack.
func runGuarded(ctx context.Context, log *slog.Logger, f func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("source panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f(ctx)
}

// shutdownTimeout bounds the API's shutdown; it outlasts CRIU's kill grace
// so that an aborted checkpoint can finish its cleanup.
const shutdownTimeout = 30 * time.Second

// Run serves until ctx is done, then shuts down in order: stop accepting
// and abort in-flight checkpoints (the workloads keep running), stop the
// sources (the eBPF OOM watcher is detached), remove the socket, release
// the lock.
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
	if opts.ProcRoot == "" {
		opts.ProcRoot = filepath.Join(opts.HostRoot, "proc")
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

	cfg, err := config.Open(config.Options{
		StateDir: filepath.Join(opts.RootDir, "config"), SourceDir: opts.ConfigSource, SoakPeriod: opts.SoakPeriod, Logger: log,
	})
	if err != nil {
		return err
	}
	// Read the source once now, so that a configuration present at start
	// (the listeners, the kubelet root dir) is the one started with; a
	// failure here is retried by cfg.Run.
	if err := cfg.Sync(); err != nil {
		log.Warn("initial config sync failed; retrying in the background", "err", err)
	}
	active := cfg.Active()
	model := status.New(nil)

	// The report comes first, so that the transitions follow it on Out.
	var rep *capability.Report
	repErr := errors.New("no report collector configured")
	if opts.Report != nil {
		rep, repErr = opts.Report(ctx)
		if repErr == nil {
			fmt.Fprintln(opts.Out, rep.Table())
		} else {
			log.Error("capability report failed", "err", repErr)
		}
	}
	trans, unsubscribe := model.Subscribe(256)
	var printer sync.WaitGroup
	printer.Add(1)
	go func() {
		defer printer.Done()
		for t := range trans {
			c := t.Condition
			if t.Previous == c.Status && t.PreviousReason == c.Reason {
				continue // a new message only: not a transition
			}
			fmt.Fprintf(opts.Out, "%s %s %s %s %s\n", c.LastTransitionTime.UTC().Format(time.RFC3339), c.Type, c.Status, c.Reason, c.Message)
		}
	}()
	defer func() { unsubscribe(); printer.Wait() }()
	// Sources that report later start Unknown, so that Ready is never True
	// before they have spoken.
	model.Set(
		condition.Condition{Type: status.TypePressureMonitor, Status: condition.Unknown, Reason: "NotStarted", Message: "the pressure monitor has not started"},
		condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: "NotStarted", Message: "the OOM watcher has not started"},
	)
	if opts.Report != nil {
		model.SetReport(rep, repErr)
	} else {
		model.Set(condition.Condition{Type: status.TypeKernelReport, Status: condition.Unknown, Reason: "NotConfigured", Message: repErr.Error()})
	}

	plugins := plugin.New(plugin.Options{
		KubeletRootDir:   filepath.Join(opts.HostRoot, active.KubeletRootDir),
		AcceptedVersions: active.Plugins.AcceptedVersions,
		Expected:         active.Plugins.Expected,
		Logger:           log,
	})
	netmon := network.New(network.Options{Root: opts.HostRoot, CNIConfDir: active.Network.CNIConfDir, Logger: log})

	srcCtx, stopSources := context.WithCancel(context.Background())
	var sources sync.WaitGroup
	model.SetShim(time.Now(), os.Getpid())
	// run starts a source. One that fails or panics while the daemon runs
	// turns ShimHealthy False; the daemon and the other sources go on.
	run := func(name string, f func(context.Context) error) {
		sources.Add(1)
		model.SetSource(name, status.SourceRunning, "")
		go func() {
			defer sources.Done()
			err := runGuarded(srcCtx, log, f)
			switch {
			case srcCtx.Err() != nil:
				// shutting down
			case err != nil:
				log.Error("source failed", "source", name, "err", err)
				model.SetSource(name, status.SourceFailed, err.Error())
			default:
				model.SetSource(name, status.SourceDone, "")
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
	run("pressure", func(ctx context.Context) error {
		runPressure(ctx, model, pressureOptions{
			ProcRoot: opts.ProcRoot, KubeletRoot: filepath.Join(opts.HostRoot, active.KubeletRootDir), Logger: log,
		})
		return nil
	})
	run("oom", func(ctx context.Context) error { return runOOM(ctx, model, opts.OOMHooks, log) })
	for name, f := range opts.extraSources {
		run(name, f)
	}
	// Shutdown order after the API: stop the sources (the eBPF OOM watcher
	// is detached), then remove the socket; the lock goes last.
	var socket string
	defer func() {
		stopSources()
		sources.Wait()
		if socket != "" {
			os.Remove(socket)
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(model, cfg.Status))
	ckpts := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			a := cfg.Active()
			return checkpoint.Settings{Enabled: a.Checkpoint.Enabled, Dir: a.Checkpoint.Dir,
				DefaultTimeout: a.Checkpoint.DefaultTimeout.Duration, RuntimeEndpoint: a.ContainerRuntimeEndpoint}
		},
		ProcRoot: opts.ProcRoot,
		Model:    model,
		Metrics:  metrics.NewCheckpoints(reg),
		Logger:   log,
	})
	ckptsClosed := false
	closeCkpts := func() error {
		if ckptsClosed {
			return nil
		}
		ckptsClosed = true
		return ckpts.Close()
	}
	defer closeCkpts()
	apiOpts := api.Options{
		Logger:     log,
		Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Checkpoint: ckpts,
	}
	if opts.Report != nil {
		apiOpts.RefreshReport = func(ctx context.Context) { model.SetReport(opts.Report(ctx)) }
	}

	servers, err := listen(opts, active.API, model, apiOpts)
	if err != nil {
		return err
	}
	socket = servers[0].addr
	serveErr := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("serve %s: %w", s.addr, err)
				return
			}
			serveErr <- nil
		}()
	}
	log.Info("serving", "socket", socket, "configSource", opts.ConfigSource)
	if opts.Listening != nil {
		opts.Listening(socket)
	}
	if len(servers) > 1 && opts.TCPListening != nil {
		opts.TCPListening(servers[1].ln.Addr())
	}

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-serveErr:
	}
	log.Info("shutting down")
	// Abort in-flight checkpoints while the servers stop accepting: the
	// handlers answer 500 once CRIU has backed out.
	ckptErr := make(chan error, 1)
	go func() { ckptErr <- closeCkpts() }()
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	if failed != nil {
		errs = append(errs, failed)
	}
	for _, s := range servers {
		if err := s.srv.Shutdown(shutCtx); err != nil {
			errs = append(errs, fmt.Errorf("shut down API on %s: %w", s.addr, err))
		}
	}
	for range len(servers) - btoi(failed != nil) {
		if err := <-serveErr; err != nil {
			errs = append(errs, err)
		}
	}
	if err := <-ckptErr; err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// server is one API listener and its HTTP server.
type server struct {
	addr string
	ln   net.Listener
	srv  *http.Server
}

// listen opens the unix socket (first) and, when configured, the TLS
// listener. The socket is 0600 root; with reporter gids it is 0660 with
// the first gid as group; with reporter uids only it is 0666, and
// SO_PEERCRED is what keeps everyone else out (401). With reporters the
// root dir becomes 0711 so that they can reach the socket by its name.
func listen(opts Options, c config.APIConfig, model *status.Model, apiOpts api.Options) (out []server, err error) {
	defer func() {
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			if len(out) > 0 {
				os.Remove(out[0].addr)
			}
		}
	}()
	socket := filepath.Join(opts.RootDir, api.SocketName)
	// The root dir is 0700; a reporter needs to search it (not list it) to
	// reach the socket. Everything else in it is 0600 root.
	dirPerm := os.FileMode(0o700)
	if len(c.ReadOnlyUIDs) > 0 || len(c.ReadOnlyGIDs) > 0 {
		dirPerm = 0o711
	}
	if err := os.Chmod(opts.RootDir, dirPerm); err != nil {
		return nil, fmt.Errorf("set the mode of root dir %s: %w", opts.RootDir, err)
	}
	perm, gid := os.FileMode(0o600), -1
	switch {
	case len(c.ReadOnlyGIDs) > 0:
		perm, gid = 0o660, int(c.ReadOnlyGIDs[0])
	case len(c.ReadOnlyUIDs) > 0:
		perm = 0o666
	}
	uln, err := api.ListenGroup(socket, perm, gid)
	if err != nil {
		return nil, err
	}
	unixOpts := apiOpts
	unixOpts.Auth = api.UnixPeer(nil, c.ReadOnlyUIDs, c.ReadOnlyGIDs)
	out = append(out, server{addr: socket, ln: uln, srv: &http.Server{
		Handler:           api.NewHandler(model, unixOpts),
		ConnContext:       api.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}})
	if c.TCPAddress == "" {
		return out, nil
	}
	tlsCfg, err := api.TLSConfig(c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile)
	if err != nil {
		return out, err
	}
	var token []byte
	if c.TokenFile != "" {
		if token, err = api.ReadToken(c.TokenFile); err != nil {
			return out, err
		}
	}
	tln, err := net.Listen("tcp", c.TCPAddress)
	if err != nil {
		return out, fmt.Errorf("listen on %s: %w", c.TCPAddress, err)
	}
	tcpOpts := apiOpts
	tcpOpts.Auth = api.Bearer(token)
	out = append(out, server{addr: tln.Addr().String(), ln: tls.NewListener(tln, tlsCfg), srv: &http.Server{
		Handler:           api.NewHandler(model, tcpOpts),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}})
	return out, nil
}
