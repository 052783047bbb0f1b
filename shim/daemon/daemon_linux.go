// Package daemon assembles nodeshim serve: the single-instance lock, the
// configuration lifecycle, the capability report, the sources feeding the
// status model (each its own package, run by a source.Supervisor), and the
// node API on a unix socket and optionally on TCP with TLS. When a new
// configuration becomes active, the sources and listeners whose settings
// changed are restarted with the new ones, so that what the status calls
// active is what runs.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/report"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/complaints"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/metrics"
	"github.com/nodeshim/nodeshim/shim/network"
	"github.com/nodeshim/nodeshim/shim/oom"
	"github.com/nodeshim/nodeshim/shim/plugin"
	"github.com/nodeshim/nodeshim/shim/pressure"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/shim/profiles/ociprofile"
	"github.com/nodeshim/nodeshim/shim/source"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/shim/transfer"
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
	// SoakPeriod, when not zero, overrides every configuration's
	// configSoakPeriod.
	SoakPeriod time.Duration
	// Report, when not nil, has serve collect the capability report (the
	// catalogue of `nodeshim report`) at start and for GET
	// /report?refresh=true. Its Host defaults to the host under HostRoot
	// (procfs at ProcRoot) and its CacheDir to <RootDir>/report-cache, so
	// that a serve started after a report of the same boot (or restarted)
	// does not probe the per-boot requirements again. Nil reports
	// KernelReportSucceeded Unknown.
	Report *report.Options
	// OOMHooks overrides the OOM watcher's hooks (bpf.DefaultOOMHooks when
	// nil).
	OOMHooks []bpf.OOMHook
	// Out receives the capability report at start, then one line per
	// condition transition (a change of status or reason).
	Out io.Writer
	// Logger receives the parts' logs; slog.Default() when nil.
	Logger *slog.Logger
	// Listening, when set, is called once the API socket first accepts
	// requests.
	Listening func(socket string)
	// Settled, when set, is called once, when every source has reported
	// its first state (no condition is NotStarted any more): the start-up
	// work (the capability report, the eBPF program loads, the first
	// pressure sample) is over.
	Settled func()
	// TCPListening, when set, is called with the TCP listener's address
	// each time one starts accepting requests (api.tcpAddress configured).
	TCPListening func(addr net.Addr)
	// APILimits bounds what the API's peers can hold (time-outs, connections
	// per uid, refusal log interval); a zero field takes api.DefaultLimits'.
	APILimits api.Limits

	// extraSources are run beside the built-in ones (tests).
	extraSources []source.Source
	// collectReport, when set, replaces the collection of Report (tests).
	collectReport func(ctx context.Context) (*capability.Report, error)
}

// shutdownTimeout bounds the API's shutdown; it outlasts CRIU's kill grace
// so that an aborted checkpoint can finish its cleanup.
const shutdownTimeout = 30 * time.Second

// Run serves until ctx is done, then shuts down in order: stop accepting
// and abort in-flight checkpoints (the workloads keep running), stop the
// sources (the eBPF OOM watcher is detached), remove the socket, release
// the lock.
func Run(ctx context.Context, opts Options) (err error) {
	if err := opts.complete(); err != nil {
		return err
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
	// The root dir's state (configuration, socket, manifests) is guarded by
	// a lock inside it, whatever --lock-file says: two serves with one root
	// dir never run together.
	rl, err := lock.AcquireDir(opts.RootDir, lock.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if rerr := rl.Release(); rerr != nil && err == nil {
			err = rerr
		}
	}()

	d := &daemon{opts: opts, log: log, model: status.New(nil), fatal: make(chan error, 4), node: profiles.Node()}
	if d.cfg, err = d.openConfig(); err != nil {
		return err
	}
	active := d.cfg.Active()
	d.settings, err = active.NodeSettings(opts.HostRoot)
	if err != nil {
		// Only an unreadable kubelet configuration gets here (the
		// configuration itself passed the same check when it loaded):
		// serve on kubelet's defaults and say so.
		log.Error("node settings", "err", err)
		def := config.Defaults()
		d.settings, _ = def.NodeSettings("/")
	}

	// The report comes first, so that the transitions follow it on Out.
	setReport := d.collectReport(ctx)
	stopPrinting := printTransitions(d.model, opts.Out)
	defer stopPrinting()
	// Sources that report later start Unknown, so that Ready is never True
	// before they have spoken (not even between the report and them).
	d.model.Set(pressure.NotStarted(), oom.NotStarted(), profiles.NotStarted(), complaints.NotStarted())
	setReport()
	d.model.SetShim(time.Now(), os.Getpid())

	d.sup = source.New(context.Background(), d.model, log)
	var socket string
	defer func() {
		// After the API: stop the sources (the eBPF OOM watcher is
		// detached), then remove the socket; the lock goes last.
		d.sup.StopAll()
		if socket != "" {
			d.removeSocket()
		}
	}()
	d.sup.Start(source.Func{SourceName: "config", F: func(ctx context.Context, _ *status.Model) error { return d.cfg.Run(ctx) }})
	for _, p := range d.parts(active) {
		d.applied = append(d.applied, p)
		d.sup.Start(p.src)
	}
	for _, s := range opts.extraSources {
		d.sup.Start(s)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(d.model, d.cfg.Status))
	d.ckpts = checkpoint.New(checkpoint.Options{
		Settings: d.checkpointSettings,
		ProcRoot: opts.ProcRoot,
		LockDir:  filepath.Join(opts.RootDir, workentry.LockDirName),
		Model:    d.model,
		Metrics:  metrics.NewCheckpoints(reg),
		Logger:   log,
	})
	// Finish removals a crash interrupted, remove the work files of
	// checkpoints killed with a nodeshim, and apply retention at start.
	d.ckpts.ApplyRetention() //nolint:errcheck // logged inside
	d.apiOpts = api.Options{Logger: log, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Checkpoint: d.ckpts,
		Transfer: transfer.Handler(d.transferOptions), Send: transfer.SendHandler(d.sendOptions),
		TransferInfo: transfer.InfoHandler(d.transferInfo)}
	if collect := d.reportCollector(); collect != nil {
		d.apiOpts.RefreshReport = func(ctx context.Context) { d.model.SetReport(collect(ctx)) }
	}
	g, err := d.startAPI(active.API)
	if err != nil {
		d.ckpts.Close()
		return err
	}
	d.api, d.apiConfig = g, active.API
	socket = g.socket()
	log.Info("serving", "socket", socket, "configSource", opts.ConfigSource)
	if opts.Listening != nil {
		opts.Listening(socket)
	}
	// From here on, each configuration that becomes active is applied.
	d.sup.Start(source.Func{SourceName: "config-status", F: d.followConfig})
	if opts.Settled != nil {
		settleCtx, stopSettle := context.WithCancel(ctx)
		defer stopSettle()
		go whenSettled(settleCtx, d.model, opts.Settled)
	}

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-d.fatal:
	}
	log.Info("shutting down")
	d.sup.Stop("config-status") // no restart from here on
	// Abort in-flight checkpoints while the servers stop accepting: the
	// handlers answer 500 once CRIU has backed out.
	ckptErr := make(chan error, 1)
	go func() { ckptErr <- d.ckpts.Close() }()
	errs := []error{failed}
	d.mu.Lock()
	g = d.api
	d.mu.Unlock()
	if g != nil {
		errs = append(errs, g.shutdown())
	}
	errs = append(errs, <-ckptErr)
	return errors.Join(errs...)
}

// whenSettled calls settled once no condition of m is NotStarted, unless
// ctx ends first.
func whenSettled(ctx context.Context, m *status.Model, settled func()) {
	for {
		doc := m.Snapshot()
		if !slices.ContainsFunc(doc.Conditions, func(c condition.Condition) bool { return c.Reason == condition.ReasonNotStarted }) {
			settled()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.Changed(doc.Generation):
		}
	}
}

// complete fills in the defaults of o.
func (o *Options) complete() error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.LockFile == "" {
		o.LockFile = lock.DefaultPath
	}
	if o.HostRoot == "" {
		o.HostRoot = "/"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = filepath.Join(o.HostRoot, "proc")
	}
	for _, p := range []*string{&o.RootDir, &o.LockFile} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", *p, err)
		}
		*p = abs
	}
	return nil
}

// daemon is one run of serve.
type daemon struct {
	opts    Options
	log     *slog.Logger
	model   *status.Model
	cfg     *config.Controller
	sup     *source.Supervisor
	ckpts   *checkpoint.Service
	apiOpts api.Options
	// fatal receives an API listener's failure, which ends Run.
	fatal chan error
	// node is what seccomp profiles are checked and compiled for.
	node seccomp.ParseOptions

	// applied are the parts started with the active configuration; only
	// followConfig changes them after start.
	applied []part

	mu        sync.Mutex
	settings  config.NodeSettings
	api       *apiGroup
	apiConfig config.API
}

// openConfig opens the configuration lifecycle. Its defaults carry the
// running root dir and lock file, and every configuration is checked
// against what this process can put in force before it becomes active.
func (d *daemon) openConfig() (*config.Controller, error) {
	def := config.Defaults()
	def.RootDir, def.LockFile = d.opts.RootDir, d.opts.LockFile
	cfg, err := config.Open(config.Options{
		StateDir:   filepath.Join(d.opts.RootDir, "config"),
		SourceDir:  d.opts.ConfigSource,
		Defaults:   &def,
		SoakPeriod: d.opts.SoakPeriod,
		Check:      d.check,
		Logger:     d.log,
	})
	if err != nil {
		return nil, err
	}
	// Read the source once now, so that a configuration present at start
	// is the one started with; a failure here is retried by cfg.Run.
	if err := cfg.Sync(); err != nil {
		d.log.Warn("initial config sync failed; retrying in the background", "err", err)
	}
	return cfg, nil
}

// check refuses a configuration that this daemon could not put in force:
// another root dir or lock file (start-up settings: the configuration's
// own state lives in the root dir), a kubelet configuration that cannot be
// read, TLS files or a token that cannot be loaded.
func (d *daemon) check(c config.ShimConfiguration) error {
	var p []string
	if filepath.Clean(c.RootDir) != d.opts.RootDir {
		p = append(p, fmt.Sprintf("rootDir %q differs from serve's --root-dir %q: it is a start-up setting, change it by restarting serve", c.RootDir, d.opts.RootDir))
	}
	if filepath.Clean(c.LockFile) != d.opts.LockFile {
		p = append(p, fmt.Sprintf("lockFile %q differs from serve's --lock-file %q: it is a start-up setting, change it by restarting serve", c.LockFile, d.opts.LockFile))
	}
	if _, err := c.NodeSettings(d.opts.HostRoot); err != nil {
		p = append(p, err.Error())
	}
	if len(c.SeccompProfiles) > 0 {
		if err := d.profileInstaller(c).Check(c.SeccompProfiles); err != nil {
			if errors.As(err, new(*profiles.ProfileError)) && !profiles.Retryable(err) {
				p = append(p, strings.ReplaceAll(err.Error(), "\n", "; "))
			} else {
				// Not the configuration's fault (an unreadable manifest, a
				// registry that could not be reached): the profiles source
				// reports it and tries again.
				d.log.Warn("seccomp profiles could not be checked", "err", err)
			}
		}
	}
	if a := c.API; a.TCPAddress != "" {
		if _, err := api.TLSConfig(a.TLSCertFile, a.TLSKeyFile, a.ClientCAFile); err != nil {
			p = append(p, fmt.Sprintf("api: %v", err))
		}
		if a.TokenFile != "" {
			if _, err := api.ReadToken(a.TokenFile); err != nil {
				p = append(p, fmt.Sprintf("api.tokenFile: %v", err))
			}
		}
	}
	if len(p) > 0 {
		return &config.ValidationError{Problems: p}
	}
	return nil
}

// collectReport collects the capability report and prints it on Out; the
// function it returns records it in the model (KernelReportSucceeded), once
// the transitions are printed after it.
func (d *daemon) collectReport(ctx context.Context) (record func()) {
	collect := d.reportCollector()
	if collect == nil {
		return func() {
			d.model.Set(condition.Condition{Type: status.TypeKernelReport, Status: condition.Unknown, Reason: "NotConfigured",
				Message: "no report collector configured"})
		}
	}
	rep, err := collect(ctx)
	if err == nil {
		fmt.Fprintln(d.opts.Out, rep.Table())
	} else {
		d.log.Error("capability report failed", "err", err)
	}
	return func() { d.model.SetReport(rep, err) }
}

// reportCollector is how serve collects its capability report: the
// catalogue of package report with reportOptions, or nil when no report is
// configured.
func (d *daemon) reportCollector() func(context.Context) (*capability.Report, error) {
	if d.opts.collectReport != nil {
		return d.opts.collectReport
	}
	ro, ok := d.opts.reportOptions()
	if !ok {
		return nil
	}
	return ro.Collect
}

// reportOptions are Report completed from serve's own roots: the host under
// HostRoot (procfs at ProcRoot) and the per-boot caches under
// <RootDir>/report-cache; false when no report is configured.
func (o *Options) reportOptions() (report.Options, bool) {
	if o.Report == nil {
		return report.Options{}, false
	}
	ro := *o.Report
	if ro.Host.ProcRoot == "" {
		ro.Host = *kernel.HostUnder(o.HostRoot, o.ProcRoot)
	}
	if ro.CacheDir == "" {
		ro.CacheDir = filepath.Join(o.RootDir, "report-cache")
	}
	return ro, true
}

// printTransitions prints one line per condition transition (a change of
// status or reason) on out until the returned function is called.
func printTransitions(model *status.Model, out io.Writer) (stop func()) {
	trans, unsubscribe := model.Subscribe(256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for t := range trans {
			c := t.Condition
			if t.Previous == c.Status && t.PreviousReason == c.Reason {
				continue // a new message only: not a transition
			}
			fmt.Fprintf(out, "%s %s %s %s %s\n", c.LastTransitionTime.UTC().Format(time.RFC3339), c.Type, c.Status, c.Reason, c.Message)
		}
	}()
	return func() { unsubscribe(); <-done }
}

// part is a source with the settings it was built from: it is restarted
// when a new active configuration gives it other settings.
type part struct {
	src      source.Source
	settings any
}

// parts are the daemon's sources for the configuration c.
func (d *daemon) parts(c config.ShimConfiguration) []part {
	d.mu.Lock()
	ns := d.settings
	d.mu.Unlock()
	kubeletRoot := filepath.Join(d.opts.HostRoot, c.KubeletRootDir)
	plugins := plugin.New(plugin.Options{
		KubeletRootDir:   kubeletRoot,
		AcceptedVersions: c.Plugins.AcceptedVersions,
		Expected:         c.Plugins.Expected,
		Logger:           d.log,
	})
	netmon := network.New(network.Options{Root: d.opts.HostRoot, CNIConfDir: c.Network.CNIConfDir, Logger: d.log})
	type pressureSettings struct {
		KubeletRoot, Thresholds, From, RuntimeEndpoint string
	}
	ps := &pressure.Source{ProcRoot: d.opts.ProcRoot, KubeletRoot: kubeletRoot, Thresholds: ns.Thresholds,
		ThresholdsFrom: ns.ThresholdsFrom, Logger: d.log, RuntimeEndpoint: ns.ContainerRuntimeEndpoint, HostRoot: d.opts.HostRoot}
	seccompRoot := profiles.SeccompRoot(kubeletRoot)
	return []part{
		{source.Follow("plugins", plugins, func() []condition.Condition { return []condition.Condition{plugins.Condition("PluginsReady")} }),
			[]any{kubeletRoot, c.Plugins}},
		{source.Follow("network", netmon, func() []condition.Condition { return []condition.Condition{netmon.Condition()} }),
			c.Network},
		{ps, pressureSettings{kubeletRoot, thresholdString(ns), ns.ThresholdsFrom, ns.ContainerRuntimeEndpoint}},
		{&oom.Source{Hooks: d.opts.OOMHooks, Logger: d.log, ProcRoot: d.opts.ProcRoot,
			RuntimeEndpoint: ns.ContainerRuntimeEndpoint, Verdict: d.reportVerdict(oom.Requirement)}, ns.ContainerRuntimeEndpoint},
		{&profiles.Source{Installer: d.profileInstaller(c), Profiles: c.SeccompProfiles, Logger: d.log},
			[]any{seccompRoot, c.SeccompProfiles, c.SeccompComplain, c.SeccompRegistry}},
		{&complaints.Source{Profiles: c.SeccompComplain, ProcRoot: d.opts.ProcRoot, RuntimeEndpoint: ns.ContainerRuntimeEndpoint, Logger: d.log},
			[]any{c.SeccompComplain, ns.ContainerRuntimeEndpoint}},
	}
}

// reportVerdict is the start-up report's verdict on the requirement id, for
// a source that explains its own failure with it; nil without a report.
func (d *daemon) reportVerdict(id string) *capability.Result {
	rep := d.model.Report()
	if rep == nil {
		return nil
	}
	res, ok := rep.Result(id)
	if !ok {
		return nil
	}
	return &res
}

// profileInstaller installs c's seccomp profiles under the kubelet's
// seccomp root, with its manifest in the root dir, reading oci:// profiles
// with c's trusted keys (checked by Validate: a key that does not parse
// leaves oci:// profiles refused).
func (d *daemon) profileInstaller(c config.ShimConfiguration) *profiles.Installer {
	reg, err := ociprofile.New(c.SeccompRegistry.PublicKeys, c.SeccompRegistry.PlainHTTP)
	if err != nil {
		d.log.Error("seccompRegistry.publicKeys not usable; oci:// profiles are refused", "err", err)
	}
	return &profiles.Installer{
		Root:     profiles.SeccompRoot(filepath.Join(d.opts.HostRoot, c.KubeletRootDir)),
		StateDir: filepath.Join(d.opts.RootDir, "seccomp"),
		Parse:    d.node,
		Complain: c.SeccompComplain,
		Logger:   d.log,
		Registry: reg,
	}
}

func thresholdString(ns config.NodeSettings) string {
	s := make([]string, 0, len(ns.Thresholds))
	for _, t := range ns.Thresholds {
		s = append(s, t.String())
	}
	return strings.Join(s, ",")
}

// followConfig records the configuration lifecycle in the model and puts
// each newly active configuration in force: the sources and listeners
// whose settings changed are restarted with the new ones. Checkpoint
// settings are read at every request and need no restart.
func (d *daemon) followConfig(ctx context.Context, m *status.Model) error {
	for {
		ch := d.cfg.Changed() // before reading, so that no change is missed
		m.SetConfig(d.cfg.Status())
		d.apply(d.cfg.Active())
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
	}
}

// apply puts c in force. It is called only from followConfig.
func (d *daemon) apply(c config.ShimConfiguration) {
	ns, err := c.NodeSettings(d.opts.HostRoot)
	if err != nil {
		// The configuration passed this check when it loaded; the kubelet's
		// file changed since. Keep the settings in force.
		d.log.Error("node settings of the active configuration", "err", err)
	} else {
		d.mu.Lock()
		d.settings = ns
		d.mu.Unlock()
	}
	next := d.parts(c)
	for i, p := range next {
		if reflect.DeepEqual(p.settings, d.applied[i].settings) {
			continue
		}
		d.log.Info("settings changed, restarting source", "source", p.src.Name())
		d.sup.Start(p.src)
		d.applied[i] = p
	}
	d.mu.Lock()
	same := reflect.DeepEqual(c.API, d.apiConfig)
	old := d.api
	d.mu.Unlock()
	if same {
		return
	}
	d.log.Info("api settings changed, restarting the listeners")
	// A local client never finds the socket without a listener: the new
	// unix listener takes the path over (a rename) while the old one still
	// serves, and the old one stops handoffGrace after, once it has
	// accepted the connections that reached it before the rename (closing
	// a listener resets those still in its backlog). The old TCP listener
	// stops first, since the new one may bind the same address.
	if err := old.shutdownTCP(); err != nil {
		d.log.Warn("shut down the previous TCP listener", "err", err)
	}
	defer func() {
		time.Sleep(handoffGrace)
		if err := old.shutdown(); err != nil {
			d.log.Warn("shut down the previous listeners", "err", err)
		}
	}()
	g, err := d.startAPI(c.API)
	if err != nil {
		// The configuration's files were loadable when it was checked; a
		// listener that fails now (an address in use) leaves the previous
		// settings in force, and ShimHealthy says why.
		d.log.Error("start the API with the new settings; keeping the previous ones", "err", err)
		d.model.SetSource("api", status.SourceFailed, err.Error())
		d.mu.Lock()
		prev := d.apiConfig
		d.mu.Unlock()
		if g, err = d.startAPI(prev); err != nil {
			d.fatal <- fmt.Errorf("restart the API: %w", err)
			return
		}
		c.API = prev
	} else {
		d.model.SetSource("api", status.SourceRunning, "")
	}
	d.mu.Lock()
	d.api, d.apiConfig = g, c.API
	d.mu.Unlock()
}

// transferOptions are read at every pod checkpoint another node's shim
// sends (shim/transfer, docs/migration.md); a stored one is subject to
// retention at once.
func (d *daemon) transferOptions() (transfer.ReceiverOptions, error) {
	c := d.cfg.Active().Checkpoint
	if !c.Transfer.Enabled {
		return transfer.ReceiverOptions{}, transfer.ErrNotEnabled
	}
	_, open, err := c.SealConfig().Load(config.SealFieldNames)
	if err != nil {
		return transfer.ReceiverOptions{}, err
	}
	o := transfer.ReceiverOptions{Dir: c.Dir, Open: open, Logger: d.log,
		Stored: func(string) { _, _ = d.ckpts.ApplyRetention() }} // logged inside
	if q := c.Transfer.MaxBytes; q != nil {
		o.MaxBytes = q.Value()
	}
	if q := c.Transfer.MinFreeBytes; q != nil {
		o.MinFreeBytes = q.Value()
	}
	return o, nil
}

// transferInfo is what other nodes' shims need to send this node a pod
// checkpoint, read at every request: its TLS listener's port, as bound,
// and its identities' recipients.
func (d *daemon) transferInfo() (transfer.Info, error) {
	a := d.cfg.Active()
	if !a.Checkpoint.Transfer.Enabled {
		return transfer.Info{}, transfer.ErrNotEnabled
	}
	ids, err := seal.LoadIdentities(a.Checkpoint.Encryption.Identities)
	if err != nil {
		return transfer.Info{}, fmt.Errorf("checkpoint.encryption.identities: %w", err)
	}
	d.mu.Lock()
	addr := ""
	if d.api != nil {
		addr = d.api.tcpAddr()
	}
	d.mu.Unlock()
	if addr == "" {
		return transfer.Info{}, fmt.Errorf("no TLS listener (api.tcpAddress %q) serves the transfers yet", a.API.TCPAddress)
	}
	return transfer.NewInfo(addr, ids)
}

// sendOptions are read at every send of a pod checkpoint to another
// node's shim (shim/transfer, docs/migration.md).
func (d *daemon) sendOptions() (transfer.SenderOptions, error) {
	a := d.cfg.Active()
	c := a.Checkpoint
	if !c.Transfer.Send {
		return transfer.SenderOptions{}, transfer.ErrSendNotEnabled
	}
	w, _, err := c.SealConfig().Load(config.SealFieldNames)
	if err != nil {
		return transfer.SenderOptions{}, err
	}
	return transfer.SenderOptions{Dir: c.Dir, CertFile: a.API.TLSCertFile, KeyFile: a.API.TLSKeyFile, CAFile: a.API.ClientCAFile,
		Signer: w.Signer, Recipients: w.Recipients}, nil
}

// checkpointSettings are read at every checkpoint request.
func (d *daemon) checkpointSettings() checkpoint.Settings {
	a := d.cfg.Active()
	d.mu.Lock()
	endpoint := d.settings.ContainerRuntimeEndpoint
	d.mu.Unlock()
	return checkpoint.Settings{Enabled: a.Checkpoint.Enabled, Dir: a.Checkpoint.Dir,
		DefaultTimeout: a.Checkpoint.DefaultTimeout.Duration, RuntimeEndpoint: endpoint,
		Retention: checkpoint.RetentionPolicy(a.Checkpoint.Retention), Seal: a.Checkpoint.SealConfig(),
		PreDump: int(a.Checkpoint.PreDumpRounds),
		PageServer: checkpoint.PageServerSettings{TCPAddress: a.API.TCPAddress, CertFile: a.API.TLSCertFile,
			KeyFile: a.API.TLSKeyFile, CAFile: a.API.ClientCAFile}}
}
