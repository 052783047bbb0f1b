package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

// handoffGrace is how long the previous unix listener goes on accepting
// after a new one has taken its path over.
const handoffGrace = time.Second

// apiGroup is the API's listeners for one config.API: the unix socket
// first, then TLS on TCP when configured.
type apiGroup struct {
	servers []server
	// sock is the unix socket's file, removed only if it is still the one
	// this group created.
	sock *api.Socket
}

// server is one API listener and its HTTP server; done closes when Serve
// has returned.
type server struct {
	addr string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// startAPI opens the listeners of c and serves on them. A listener that
// fails while serving sends its error to d.fatal.
func (d *daemon) startAPI(c config.API) (*apiGroup, error) {
	sock, servers, err := listen(d.opts, c, d.model, d.apiOpts)
	if err != nil {
		return nil, err
	}
	g := &apiGroup{servers: servers, sock: sock}
	for i := range g.servers {
		s := &g.servers[i]
		s.done = make(chan struct{})
		go func() {
			defer close(s.done)
			if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				select {
				case d.fatal <- fmt.Errorf("serve %s: %w", s.addr, err):
				default:
				}
			}
		}()
	}
	if len(servers) > 1 && d.opts.TCPListening != nil {
		d.opts.TCPListening(servers[1].ln.Addr())
	}
	return g, nil
}

// socket is the unix socket's path.
func (g *apiGroup) socket() string { return g.servers[0].addr }

// tcpAddr is the TLS listener's bound address (its port chosen by the
// kernel when api.tcpAddress asks for 0), "" when g has none.
func (g *apiGroup) tcpAddr() string {
	if len(g.servers) < 2 {
		return ""
	}
	return g.servers[1].ln.Addr().String()
}

// removeSocket removes the unix socket's file if it is still the one g
// created: a socket that another process put at the path is its own.
func (g *apiGroup) removeSocket() error { return g.sock.Remove() }

// removeSocket removes the socket of the API group serving last, if it
// is still the one that group created; Run calls it at exit.
func (d *daemon) removeSocket() {
	d.mu.Lock()
	g := d.api
	d.mu.Unlock()
	if g == nil {
		return
	}
	if err := g.removeSocket(); err != nil {
		d.log.Warn("API socket left in place", "err", err)
	}
}

// shutdown stops accepting on every listener, waits for the requests in
// flight (up to shutdownTimeout) and for the servers to return.
func (g *apiGroup) shutdown() error { return g.shutdownServers(g.servers) }

// shutdownTCP does the same for the TCP listeners only: the unix socket
// goes on serving.
func (g *apiGroup) shutdownTCP() error {
	if len(g.servers) < 2 {
		return nil
	}
	return g.shutdownServers(g.servers[1:])
}

func (g *apiGroup) shutdownServers(servers []server) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shut down API on %s: %w", s.addr, err))
		}
	}
	for _, s := range servers {
		<-s.done
	}
	return errors.Join(errs...)
}

// Limits returns the API limits in force: those of the configuration c
// where set, else those of the daemon's options, else the defaults.
func Limits(def api.Limits, c config.APILimits) api.Limits {
	l := def
	for _, f := range []struct {
		v *time.Duration
		c time.Duration
	}{
		{&l.ReadHeaderTimeout, c.ReadHeaderTimeout.Duration}, {&l.ReadTimeout, c.ReadTimeout.Duration}, {&l.IdleTimeout, c.IdleTimeout.Duration},
	} {
		if f.c > 0 {
			*f.v = f.c
		}
	}
	for _, f := range []struct {
		v *int
		c int32
	}{
		{&l.ConnsPerPeer, c.ConnsPerPeer}, {&l.ConnsOthers, c.ConnsOthers}, {&l.ConnsPerReader, c.ConnsPerReader},
		{&l.ConnsPerAddress, c.ConnsPerAddress}, {&l.ConnsTCP, c.ConnsTCP},
	} {
		if f.c > 0 {
			*f.v = int(f.c)
		}
	}
	return l.WithDefaults()
}

// listen opens the unix socket (first) and, when configured, the TLS
// listener. The socket is 0600 root; with reporter gids it is 0660 with
// the first gid as group; with reporter uids only it is 0666, and
// SO_PEERCRED is what keeps everyone else out (401). With reporters the
// root dir becomes 0711 so that they can reach the socket by its name.
// Every local user may then connect: the API limits (Limits) bound what
// each can hold (api.LimitPeers at accept, the servers' time-outs), the
// TLS listener's remote addresses likewise (api.LimitAddrs), and refusals
// are logged once per peer and interval.
func listen(opts Options, c config.API, model *status.Model, apiOpts api.Options) (sock *api.Socket, out []server, err error) {
	defer func() {
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			if sock != nil {
				sock.Remove()
			}
		}
	}()
	limits := Limits(opts.APILimits, c.Limits)
	socket := filepath.Join(opts.RootDir, api.SocketName)
	// The root dir is 0700; a reporter needs to search it (not list it) to
	// reach the socket. Everything else in it is 0600 root.
	dirPerm := os.FileMode(0o700)
	if len(c.ReadOnlyUIDs) > 0 || len(c.ReadOnlyGIDs) > 0 {
		dirPerm = 0o711
	}
	if err := os.Chmod(opts.RootDir, dirPerm); err != nil {
		return nil, nil, fmt.Errorf("set the mode of root dir %s: %w", opts.RootDir, err)
	}
	perm, gid := os.FileMode(0o600), -1
	switch {
	case len(c.ReadOnlyGIDs) > 0:
		perm, gid = 0o660, int(c.ReadOnlyGIDs[0])
	case len(c.ReadOnlyUIDs) > 0:
		perm = 0o666
	}
	sock, err = api.ListenSocket(socket, perm, gid)
	if err != nil {
		return nil, nil, err
	}
	unixOpts := apiOpts
	unixOpts.Auth = api.WithPodCheckpoints(api.UnixPeer(nil, c.ReadOnlyUIDs, c.ReadOnlyGIDs), c.PodCheckpointUIDs)
	unixOpts.Refusals = api.NewRefusalLog(opts.Logger, limits.RefusalLogInterval, nil)
	unixStop := make(chan struct{})
	unixOpts.Stop = unixStop
	usrv := api.NewServer(api.NewHandler(model, unixOpts), limits)
	usrv.ConnContext = api.ConnContext
	usrv.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	out = append(out, server{addr: socket, srv: usrv,
		ln: api.LimitPeers(sock.UnixListener, limits, c.ReadOnlyUIDs, c.ReadOnlyGIDs, unixOpts.Refusals)})
	// Long polls of GET /status end at shutdown instead of holding it.
	// Shutdown may run more than once (shutdownTCP, then shutdown).
	out[0].srv.RegisterOnShutdown(sync.OnceFunc(func() { close(unixStop) }))
	if c.TCPAddress == "" {
		return sock, out, nil
	}
	tlsCfg, err := api.TLSConfig(c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile)
	if err != nil {
		return sock, out, err
	}
	var token []byte
	if c.TokenFile != "" {
		if token, err = api.ReadToken(c.TokenFile); err != nil {
			return sock, out, err
		}
	}
	tln, err := net.Listen("tcp", c.TCPAddress)
	if err != nil {
		return sock, out, fmt.Errorf("listen on %s: %w", c.TCPAddress, err)
	}
	tcpOpts := apiOpts
	tcpOpts.Auth = api.Bearer(token)
	tcpOpts.Refusals = api.NewRefusalLog(opts.Logger, limits.RefusalLogInterval, nil)
	tcpStop := make(chan struct{})
	tcpOpts.Stop = tcpStop
	tsrv := api.NewServer(api.NewHandler(model, tcpOpts), limits)
	tsrv.TLSConfig = tlsCfg
	tsrv.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	out = append(out, server{addr: tln.Addr().String(), ln: tls.NewListener(api.LimitAddrs(tln, limits, tcpOpts.Refusals), tlsCfg), srv: tsrv})
	out[1].srv.RegisterOnShutdown(sync.OnceFunc(func() { close(tcpStop) }))
	return sock, out, nil
}
