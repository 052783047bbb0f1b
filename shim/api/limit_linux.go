package api

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what the peers of the API can hold of the server: time-outs
// for every listener, and connection limits for the unix socket, which
// every local user may reach when reporter uids are configured (0666).
// A zero field takes its default (DefaultLimits).
type Limits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers, from
	// the connection's first byte or the previous request's end.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, headers and body.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request.
	IdleTimeout time.Duration
	// ConnsPerPeer bounds the connections that one uid holds open at once
	// on the unix socket, for peers that are neither root nor readers
	// (they are refused with 401 anyway).
	ConnsPerPeer int
	// ConnsOthers bounds the connections of all those peers together.
	ConnsOthers int
	// ConnsPerReader bounds the connections of one reader uid (a uid of
	// api.readOnlyUIDs, or a peer whose gid is in api.readOnlyGIDs): its
	// own reserve, which the others' connections do not take from. Root
	// is never limited.
	ConnsPerReader int
	// ConnsPerAddress bounds the connections that one remote IP address
	// holds open at once on the TLS listener, handshakes included;
	// ConnsTCP bounds those of all addresses together.
	ConnsPerAddress int
	ConnsTCP        int
	// RefusalLogInterval is the least time between two log lines about
	// one peer's refusals.
	RefusalLogInterval time.Duration
}

// The defaults of Limits.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	// DefaultIdleTimeout outlasts shim/client's idle connections (30 s),
	// so that the client, not the server, closes an idle connection.
	DefaultIdleTimeout    = 60 * time.Second
	DefaultConnsPerPeer   = 8
	DefaultConnsOthers    = 64
	DefaultConnsPerReader = 32
	// DefaultConnsPerAddress leaves a reporter, a controller and an
	// operator's tools room behind one NAT address.
	DefaultConnsPerAddress = 16
	DefaultConnsTCP        = 256
)

// maxHeaderBytes bounds a request's headers; the API's requests carry a
// path and a handful of headers.
const maxHeaderBytes = 64 << 10

// DefaultLimits returns the limits the API is served with.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout:  DefaultReadHeaderTimeout,
		ReadTimeout:        DefaultReadTimeout,
		IdleTimeout:        DefaultIdleTimeout,
		ConnsPerPeer:       DefaultConnsPerPeer,
		ConnsOthers:        DefaultConnsOthers,
		ConnsPerReader:     DefaultConnsPerReader,
		ConnsPerAddress:    DefaultConnsPerAddress,
		ConnsTCP:           DefaultConnsTCP,
		RefusalLogInterval: DefaultRefusalLogInterval,
	}
}

// WithDefaults returns l with its zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	def := DefaultLimits()
	for _, f := range []struct{ v, d *time.Duration }{
		{&l.ReadHeaderTimeout, &def.ReadHeaderTimeout}, {&l.ReadTimeout, &def.ReadTimeout},
		{&l.IdleTimeout, &def.IdleTimeout}, {&l.RefusalLogInterval, &def.RefusalLogInterval},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *int }{
		{&l.ConnsPerPeer, &def.ConnsPerPeer}, {&l.ConnsOthers, &def.ConnsOthers}, {&l.ConnsPerReader, &def.ConnsPerReader},
		{&l.ConnsPerAddress, &def.ConnsPerAddress}, {&l.ConnsTCP, &def.ConnsTCP},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return l
}

// NewServer returns the HTTP server of one API listener with l's
// time-outs. There is no write time-out: a long poll of GET /status and a
// checkpoint answer after minutes; a peer that does not read its answers
// holds at most its connection limit.
func NewServer(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		// net/http clears the read deadline once a request's body is read
		// (or when it has none), so a long poll is not cut by it.
		ReadTimeout:    l.ReadTimeout,
		IdleTimeout:    l.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
	}
}

// peerConn is a unix connection with its peer's credentials, read once at
// accept, and its place in the listener's counts.
type peerConn struct {
	*net.UnixConn
	cred    *unix.Ucred
	credErr error
	release func()
	once    sync.Once
}

// Close closes the connection and gives its place back.
func (c *peerConn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(c.release)
	return err
}

// peerClass is how a peer is counted.
type peerClass int

const (
	classRoot   peerClass = iota // never limited
	classReader                  // ConnsPerReader, its own reserve
	classOther                   // ConnsPerPeer and ConnsOthers
)

// limitListener is a unix listener that counts its open connections by
// peer uid and closes, at accept, a connection over its peer's limit.
type limitListener struct {
	*net.UnixListener
	lim                Limits
	readUIDs, readGIDs []uint32
	refusals           *RefusalLog

	mu     sync.Mutex
	open   map[uint32]int // by uid, readers and others
	others int            // all others together
}

// LimitPeers wraps the unix socket's listener ln so that, at accept, each
// connection's peer is read with SO_PEERCRED and the connection is closed
// at once when its peer already holds its limit of l (root: none; readers,
// the uids readUIDs and the gids readGIDs: ConnsPerReader each; everyone
// else: ConnsPerPeer each and ConnsOthers together). Each such refusal goes
// to refusals. ConnContext reads the credentials recorded at accept, so
// the peer that is counted is the peer that is authenticated.
func LimitPeers(ln *net.UnixListener, l Limits, readUIDs, readGIDs []uint32, refusals *RefusalLog) net.Listener {
	return &limitListener{UnixListener: ln, lim: l.WithDefaults(), readUIDs: readUIDs, readGIDs: readGIDs,
		refusals: refusals, open: make(map[uint32]int)}
}

// Accept returns the next connection whose peer is within its limit;
// the others are closed as they come.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		pc := &peerConn{UnixConn: c}
		pc.cred, pc.credErr = peerCred(c)
		if l.admit(pc) {
			return pc, nil
		}
		c.Close()
	}
}

// admit counts pc and sets its release, or refuses it.
func (l *limitListener) admit(pc *peerConn) bool {
	// A peer whose credentials cannot be read is counted as an other
	// under the overflow uid (the kernel's own "unknown", 65534).
	uid, class := uint32(65534), classOther
	if pc.cred != nil {
		uid = pc.cred.Uid
		switch {
		case uid == 0:
			class = classRoot
		case slices.Contains(l.readUIDs, uid), slices.Contains(l.readGIDs, pc.cred.Gid):
			class = classReader
		}
	}
	if class == classRoot {
		pc.release = func() {}
		return true
	}
	l.mu.Lock()
	var limit string
	switch {
	case class == classReader && l.open[uid] >= l.lim.ConnsPerReader:
		limit = fmt.Sprintf("a reader's %d connections", l.lim.ConnsPerReader)
	case class == classOther && l.open[uid] >= l.lim.ConnsPerPeer:
		limit = fmt.Sprintf("a peer's %d connections", l.lim.ConnsPerPeer)
	case class == classOther && l.others >= l.lim.ConnsOthers:
		limit = fmt.Sprintf("%d connections of peers other than root and readers", l.lim.ConnsOthers)
	}
	if limit != "" {
		l.mu.Unlock()
		l.refusals.Refused(fmt.Sprintf("uid=%d", uid), "API connection refused: over its limit", "limit", limit, "caller", describeCred(pc.cred, pc.credErr))
		return false
	}
	l.open[uid]++
	if class == classOther {
		l.others++
	}
	l.mu.Unlock()
	pc.release = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[uid]--; l.open[uid] <= 0 {
			delete(l.open, uid)
		}
		if class == classOther {
			l.others--
		}
	}
	return true
}

// peerCred reads the SO_PEERCRED credentials of a unix connection: the
// peer's pid, uid and gid when it called connect(2) (net/unix/af_unix.c).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}

// describeCred names a peer for the log.
func describeCred(cred *unix.Ucred, err error) string {
	if cred == nil {
		if err == nil {
			err = errors.New("no credentials")
		}
		return fmt.Sprintf("unknown peer (%v)", err)
	}
	return fmt.Sprintf("uid=%d gid=%d pid=%d", cred.Uid, cred.Gid, cred.Pid)
}

// addrConn is a TCP connection with its place in the listener's counts.
type addrConn struct {
	net.Conn
	release func()
	once    sync.Once
}

// Close closes the connection and gives its place back.
func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// addrListener counts a TCP listener's open connections by remote IP
// address and closes, at accept, a connection over its address's limit.
type addrListener struct {
	net.Listener
	lim      Limits
	refusals *RefusalLog

	mu    sync.Mutex
	open  map[string]int // by remote IP
	total int
}

// LimitAddrs wraps the TLS listener's TCP listener ln so that, at accept,
// a connection is closed at once when its remote IP address already holds
// l.ConnsPerAddress connections or the listener l.ConnsTCP, before any TLS
// handshake: an address that opens connections and never completes them
// cannot take the descriptors of nodeshim serve nor the places of the
// reporter and the controller. Each refusal goes to refusals.
func LimitAddrs(ln net.Listener, l Limits, refusals *RefusalLog) net.Listener {
	return &addrListener{Listener: ln, lim: l.WithDefaults(), refusals: refusals, open: make(map[string]int)}
}

// Accept returns the next connection whose address is within its limit;
// the others are closed as they come.
func (l *addrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
		l.mu.Lock()
		var limit string
		switch {
		case l.open[ip] >= l.lim.ConnsPerAddress:
			limit = fmt.Sprintf("an address's %d connections", l.lim.ConnsPerAddress)
		case l.total >= l.lim.ConnsTCP:
			limit = fmt.Sprintf("the listener's %d connections", l.lim.ConnsTCP)
		}
		if limit != "" {
			l.mu.Unlock()
			l.refusals.Refused("addr="+ip, "API connection refused: over its limit", "limit", limit, "caller", ip)
			c.Close()
			continue
		}
		l.open[ip]++
		l.total++
		l.mu.Unlock()
		return &addrConn{Conn: c, release: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[ip]--; l.open[ip] <= 0 {
				delete(l.open, ip)
			}
			l.total--
		}}, nil
	}
}
