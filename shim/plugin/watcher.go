package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// RegistryDir is the plugin registry below kubelet's root dir.
const RegistryDir = "plugins_registry"

// Options configure a Watcher.
type Options struct {
	// KubeletRootDir is kubelet's --root-dir; the watcher watches its
	// plugins_registry.
	KubeletRootDir string
	// AcceptedVersions lists per plugin type the versions the node's
	// kubelet accepts; DefaultAcceptedVersions() when nil.
	AcceptedVersions map[string][]string
	// Expected names drivers that should register.
	Expected []string
	// GetInfoTimeout bounds one GetInfo call; 5 s when zero.
	GetInfoTimeout time.Duration
	// RetryInterval is how long to wait before calling GetInfo again on a
	// socket where it failed; 5 s when zero.
	RetryInterval time.Duration
	// Clock stamps transitions and drives retries; the real clock when nil.
	Clock clock.Clock
	// Logger receives registration events; slog.Default() when nil.
	Logger *slog.Logger
}

// Watcher watches the plugin registry. Create it with New and start it with Run.
type Watcher struct {
	opts Options
	dir  string
	reg  *registry
	log  *slog.Logger
}

// New returns a Watcher for opts.KubeletRootDir/plugins_registry.
func New(opts Options) *Watcher {
	if opts.AcceptedVersions == nil {
		opts.AcceptedVersions = DefaultAcceptedVersions()
	}
	if opts.GetInfoTimeout == 0 {
		opts.GetInfoTimeout = 5 * time.Second
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 5 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Watcher{
		opts: opts,
		dir:  filepath.Join(opts.KubeletRootDir, RegistryDir),
		reg:  newRegistry(opts.Expected),
		log:  opts.Logger,
	}
}

// Run watches the registry directory and its subdirectories until ctx is
// done. The directory is created (mode 0750) if missing, as kubelet does.
// Sockets present at start are registered first.
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, 0o750); err != nil {
		return fmt.Errorf("create plugin registry %s: %w", w.dir, err)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch plugin registry %s: %w", w.dir, err)
	}
	defer fw.Close()
	if err := w.walk(ctx, fw, w.dir); err != nil {
		return err
	}
	var retry clock.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		var retryC <-chan time.Time
		if w.hasPending() {
			if retry == nil {
				retry = w.opts.Clock.NewTimer(w.opts.RetryInterval)
			}
			retryC = retry.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retryC:
			retry = nil
			w.retryPending(ctx)
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			w.handle(ctx, fw, ev)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// Events may be lost: rescan to catch up.
			w.log.Warn("plugin registry watch", "err", err)
			if err := w.walk(ctx, fw, w.dir); err != nil {
				w.log.Warn("plugin registry rescan", "err", err)
			}
		}
	}
}

// ignored reports whether path has a component starting with a dot below
// the registry dir; kubelet ignores those too.
func (w *Watcher) ignored(path string) bool {
	rel, err := filepath.Rel(w.dir, path)
	if err != nil {
		return true
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") && part != "." {
			return true
		}
	}
	return false
}

// walk watches dir and its subdirectories and registers the sockets in them.
func (w *Watcher) walk(ctx context.Context, fw *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != w.dir {
				return nil // went away during the walk
			}
			return fmt.Errorf("walk plugin registry %s: %w", path, err)
		}
		if w.ignored(path) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if err := fw.Add(path); err != nil {
				return fmt.Errorf("watch %s: %w", path, err)
			}
		case d.Type()&fs.ModeSocket != 0:
			w.register(ctx, path)
		}
		return nil
	})
}

func (w *Watcher) handle(ctx context.Context, fw *fsnotify.Watcher, ev fsnotify.Event) {
	if w.ignored(ev.Name) {
		return
	}
	switch {
	case ev.Has(fsnotify.Create):
		fi, err := os.Lstat(ev.Name)
		if err != nil {
			return // gone already; its Remove event follows
		}
		if fi.IsDir() {
			if err := w.walk(ctx, fw, ev.Name); err != nil {
				w.log.Warn("plugin registry", "err", err)
			}
		} else if fi.Mode()&fs.ModeSocket != 0 {
			w.register(ctx, ev.Name)
		}
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		w.gone(ev.Name)
	}
}

// register calls GetInfo on the socket and records the driver.
func (w *Watcher) register(ctx context.Context, socket string) {
	info, err := w.getInfo(ctx, socket)
	r := w.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.changed()
	if err != nil {
		r.pending[socket] = err.Error()
		w.log.Warn("plugin GetInfo failed, will retry", "socket", socket, "err", err)
		return
	}
	delete(r.pending, socket)
	spec := Spec{Name: info.Name, Type: info.Type, Endpoint: info.Endpoint, SupportedVersions: info.SupportedVersions, Socket: socket}
	if spec.Endpoint == "" {
		spec.Endpoint = socket
	}
	accepted, why := acceptVersion(w.opts.AcceptedVersions, spec.Type, spec.SupportedVersions)
	now := w.opts.Clock.Now()
	e, ok := r.entries[spec.Name]
	if !ok {
		e = &Entry{}
		r.entries[spec.Name] = e
	}
	if !ok || !e.Status.Available {
		e.Status.LastTransitionTime = now
	}
	if ok && e.Spec.Socket != socket {
		delete(r.sockets, e.Spec.Socket)
	}
	e.Spec = spec
	e.Status.Available = true
	e.Status.VersionAccepted, e.Status.Message = accepted, why
	r.sockets[socket] = spec.Name
	w.log.Info("plugin registered", "name", spec.Name, "type", spec.Type, "versions", spec.SupportedVersions, "accepted", accepted)
}

// gone marks the driver of a removed socket (or of every socket below a
// removed directory) unavailable.
func (w *Watcher) gone(path string) {
	r := w.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	now := w.opts.Clock.Now()
	changed := false
	for sock, name := range r.sockets {
		if sock != path && !strings.HasPrefix(sock, path+string(filepath.Separator)) {
			continue
		}
		delete(r.sockets, sock)
		if e, ok := r.entries[name]; ok && e.Status.Available {
			e.Status.Available = false
			e.Status.LastTransitionTime = now
			w.log.Info("plugin socket removed", "name", name, "socket", sock)
		}
		changed = true
	}
	for sock := range r.pending {
		if sock == path || strings.HasPrefix(sock, path+string(filepath.Separator)) {
			delete(r.pending, sock)
			changed = true
		}
	}
	if changed {
		r.changed()
	}
}

func (w *Watcher) hasPending() bool {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return len(w.reg.pending) > 0
}

func (w *Watcher) retryPending(ctx context.Context) {
	w.reg.mu.Lock()
	var socks []string
	for s := range w.reg.pending {
		socks = append(socks, s)
	}
	w.reg.mu.Unlock()
	for _, s := range socks {
		if fi, err := os.Lstat(s); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			w.gone(s)
			continue
		}
		w.register(ctx, s)
	}
}

// getInfo asks the registration server on socket for its PluginInfo.
func (w *Watcher) getInfo(ctx context.Context, socket string) (*registerapi.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, w.opts.GetInfoTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	defer conn.Close()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo on %s: %w", socket, err)
	}
	if info.Name == "" {
		return nil, fmt.Errorf("GetInfo on %s: empty plugin name", socket)
	}
	return info, nil
}
