// Package api serves nodeshim's node API: GET /status, /pods, /report,
// /healthz, /readyz and /metrics over the status model, and POST
// /checkpoint/{namespace}/{pod}/{container} with kubelet's semantics. On
// the unix socket the peer of every connection is identified with
// SO_PEERCRED: root has full access, configured reporter uids or gids may
// read the status endpoints only (403 for anything else), everyone else
// gets 401. On the optional TCP listener, TLS with a bearer token or a
// verified client certificate is required. Refusals are logged, at most
// one line per peer and interval (RefusalLog), and the connection of a
// refused request is closed. Limits bounds what one peer can hold: the
// time-outs of every listener and, on the unix socket, connections per uid
// counted at accept (LimitPeers).
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/status"
)

// SocketName is the API socket's name under nodeshim's root dir.
const SocketName = "nodeshim.sock"

// Source is what the API reads: the status model.
type Source interface {
	Snapshot() status.Document
	Report() *capability.Report
}

// PodsRefresher is a Source that reads the pods' cgroups on demand: the
// API calls RefreshPods before serving the per-pod view. status.Model is one.
type PodsRefresher interface {
	RefreshPods(ctx context.Context)
}

// Waiter is a Source whose generation can be waited on: with it, GET
// /status?after=GENERATION is a long poll. status.Model is one.
type Waiter interface {
	// Changed returns a channel closed once the generation differs from gen.
	Changed(gen int64) <-chan struct{}
}

// Long polls: GET /status?after=GENERATION answers once the generation
// differs from GENERATION, or after wait=SECONDS (DefaultStatusWait when
// absent, at most MaxStatusWait) with the unchanged document. The
// generation counts every visible change but the pressure monitor's
// values, which change at every reading.
const (
	DefaultStatusWait = 30 * time.Second
	MaxStatusWait     = 5 * time.Minute
)

// Checkpointer takes container checkpoints for POST /checkpoint.
type Checkpointer interface {
	Checkpoint(ctx context.Context, ref criu.ContainerRef, timeout time.Duration) (criu.Result, error)
}

// PodCheckpointer takes pod checkpoints for POST
// /checkpoint/{namespace}/{pod}: every container of the pod at one
// instant, into one pod checkpoint whose path it returns. imageRef, when
// set, asks for one checkpoint image per container too. A Checkpoint that
// implements it serves that path.
type PodCheckpointer interface {
	PodCheckpoint(ctx context.Context, namespace, pod string, timeout time.Duration, imageRef string) (string, error)
}

// LazyPodCheckpointer takes lazy pod checkpoints for POST
// /checkpoint/{namespace}/{pod}?lazy=true: the first half of a lazy pod
// migration, whose path it returns once the pod checkpoint is published,
// while the containers' memory is served on until a restore fetched it,
// timeout ends or DELETE /checkpoints/{name} gives the pod back. A
// Checkpoint that implements it serves ?lazy=true.
type LazyPodCheckpointer interface {
	LazyPodCheckpoint(ctx context.Context, namespace, pod string, timeout time.Duration) (string, error)
}

// Options configure a Handler.
type Options struct {
	// Auth decides what a request may do; UnixPeer(nil, nil, nil) (root
	// only, over a unix socket) when nil.
	Auth Authenticator
	// Logger receives refused requests; slog.Default() when nil.
	Logger *slog.Logger
	// Refusals rate-limits the log of refused requests; when nil, one
	// writing to Logger every DefaultRefusalLogInterval. Share it with
	// LimitPeers so that a peer's refusals make one line.
	Refusals *RefusalLog
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// Checkpoint, when set, serves POST /checkpoint/{namespace}/{pod}/{container};
	// without it that path answers 404, as kubelet's does with the
	// feature off.
	Checkpoint Checkpointer
	// RefreshReport, when set, collects a new capability report for GET
	// /report?refresh=true. It is called at most once per
	// ReportRefreshInterval; more frequent requests get the last report.
	RefreshReport func(ctx context.Context)
	// ReportRefreshInterval is the least time between two refreshes;
	// DefaultReportRefreshInterval when zero.
	ReportRefreshInterval time.Duration
	// Transfer, when set, serves PUT /transfers/{name}: pod checkpoints
	// sent by other nodes' shims (shim/transfer.Receiver, which accepts
	// only a client certificate the TLS handshake verified).
	Transfer http.Handler
	// TransferInfo, when set, serves GET /transfers to every caller: what
	// another node's shim needs to send this node a pod checkpoint
	// (shim/transfer.InfoHandler; public keys and a port only).
	TransferInfo http.Handler
	// Send, when set, serves POST /transfers/{name}/send: this node's
	// shim sends one of its pod checkpoints to another node's
	// (shim/transfer.SendHandler); root and the PodCheckpoints callers
	// (the reporter) may ask.
	Send http.Handler
	// Stop, when closed, ends every long poll at once with the current
	// document: close it when the server shuts down, so that
	// http.Server.Shutdown does not wait for them.
	Stop <-chan struct{}
}

// DefaultReportRefreshInterval bounds how often GET /report?refresh=true
// runs the probes again.
const DefaultReportRefreshInterval = 10 * time.Second

// Access is what a caller may do.
type Access int

// The access levels.
const (
	// NoAccess: the request is refused with 401.
	NoAccess Access = iota
	// ReadOnly: the status endpoints only (GET /status, /report, /healthz,
	// /readyz, /metrics); anything else is refused with 403.
	ReadOnly
	// PodCheckpoints: what ReadOnly may, and asking for pod checkpoints,
	// removing checkpoints and sending them to other nodes (POST
	// /checkpoint/{namespace}/{pod}, DELETE /checkpoints/{name}, POST
	// /transfers/{name}/send): the reporter that serves PodCheckpoint
	// objects; anything else is refused with 403.
	PodCheckpoints
	// FullAccess: every endpoint.
	FullAccess
)

// Authenticator decides the access of a request and names the caller for
// the log.
type Authenticator func(r *http.Request) (access Access, who string)

type peerKey struct{}

// peer is the credential of a connection, as SO_PEERCRED reported it.
type peer struct {
	cred *unix.Ucred
	err  error
}

// ConnContext records the peer credentials of a unix connection in its
// context; set it as http.Server.ConnContext of the unix socket's server.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		// LimitPeers read them at accept.
		return context.WithValue(ctx, peerKey{}, peer{cred: pc.cred, err: pc.credErr})
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return context.WithValue(ctx, peerKey{}, peer{err: errors.New("not a unix connection")})
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return context.WithValue(ctx, peerKey{}, peer{err: err})
	}
	var p peer
	if err := raw.Control(func(fd uintptr) {
		p.cred, p.err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		p.err = err
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// UnixPeer authenticates the peer of a unix socket connection by the
// credentials ConnContext recorded: uids in full (root when empty) have
// full access, and uids in readUIDs or gids in readGIDs read-only access.
func UnixPeer(full, readUIDs, readGIDs []uint32) Authenticator {
	if len(full) == 0 {
		full = []uint32{0}
	}
	return func(r *http.Request) (Access, string) {
		p, ok := r.Context().Value(peerKey{}).(peer)
		if !ok || p.err != nil || p.cred == nil {
			return NoAccess, fmt.Sprintf("unknown peer (%v)", p.err)
		}
		who := fmt.Sprintf("uid=%d gid=%d pid=%d", p.cred.Uid, p.cred.Gid, p.cred.Pid)
		switch {
		case slices.Contains(full, p.cred.Uid):
			return FullAccess, who
		case slices.Contains(readUIDs, p.cred.Uid), slices.Contains(readGIDs, p.cred.Gid):
			return ReadOnly, who
		}
		return NoAccess, who
	}
}

// WithPodCheckpoints returns auth where the unix peers of uids have
// PodCheckpoints access; every other request is decided by auth.
func WithPodCheckpoints(auth Authenticator, uids []uint32) Authenticator {
	if len(uids) == 0 {
		return auth
	}
	return func(r *http.Request) (Access, string) {
		access, who := auth(r)
		if p, ok := r.Context().Value(peerKey{}).(peer); ok && p.err == nil && p.cred != nil &&
			access < PodCheckpoints && slices.Contains(uids, p.cred.Uid) {
			return PodCheckpoints, who
		}
		return access, who
	}
}

// Bearer authenticates TCP requests: a request over TLS carrying
// "Authorization: Bearer <token>" equal to token, or a client certificate
// that the TLS handshake verified against the configured client CAs, has
// full access. An empty token accepts no bearer token.
func Bearer(token []byte) Authenticator {
	return func(r *http.Request) (Access, string) {
		who := "remote=" + r.RemoteAddr
		if r.TLS == nil {
			return NoAccess, who + " (not TLS)"
		}
		if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
			return FullAccess, who + " cn=" + r.TLS.PeerCertificates[0].Subject.CommonName
		}
		h := r.Header.Get("Authorization")
		got, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || len(token) == 0 {
			return NoAccess, who + " (no bearer token)"
		}
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), token) != 1 {
			return NoAccess, who + " (bad bearer token)"
		}
		return FullAccess, who + " (bearer token)"
	}
}

// NewHandler returns the API's HTTP handler.
func NewHandler(src Source, opts Options) http.Handler {
	if opts.Auth == nil {
		opts.Auth = UnixPeer(nil, nil, nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Refusals == nil {
		opts.Refusals = NewRefusalLog(opts.Logger, 0, nil)
	}
	if opts.ReportRefreshInterval <= 0 {
		opts.ReportRefreshInterval = DefaultReportRefreshInterval
	}
	read := http.NewServeMux()
	read.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		d := src.Snapshot()
		if q := r.URL.Query(); q.Has("after") {
			after, wait, err := longPoll(q)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			if wt, ok := src.(Waiter); ok && d.Generation == after {
				t := time.NewTimer(wait)
				select {
				case <-wt.Changed(after):
				case <-t.C:
				case <-r.Context().Done():
				case <-opts.Stop:
				}
				t.Stop()
				d = src.Snapshot()
			}
		}
		if v := r.URL.Query().Get("pods"); v == "true" || v == "1" {
			if pr, ok := src.(PodsRefresher); ok {
				pr.RefreshPods(r.Context())
				d = src.Snapshot()
			}
		}
		if q := r.URL.Query().Get("conditions"); q != "" {
			want := strings.Split(q, ",")
			var keep []condition.Condition
			for _, c := range d.Conditions {
				if slices.Contains(want, c.Type) {
					keep = append(keep, c)
				}
			}
			d.Conditions = keep
		}
		if v := r.URL.Query().Get("pods"); d.Pressure != nil && d.Pressure.Pods != nil && v != "true" && v != "1" {
			// The per-pod view grows with the node: only on request.
			p := *d.Pressure
			p.Pods = nil
			d.Pressure = &p
		}
		writeJSON(w, http.StatusOK, d)
	})
	read.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
		if pr, ok := src.(PodsRefresher); ok {
			pr.RefreshPods(r.Context())
		}
		d := src.Snapshot()
		if d.Pressure == nil || d.Pressure.Pods == nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the pressure monitor has not read the pods' cgroups"})
			return
		}
		writeJSON(w, http.StatusOK, d.Pressure.Pods)
	})
	var refresh refresher
	read.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("refresh"); v == "true" || v == "1" {
			if opts.RefreshReport != nil {
				refresh.run(r.Context(), opts.RefreshReport, opts.ReportRefreshInterval)
			}
		}
		rep := src.Report()
		if rep == nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the capability report has not been collected"})
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	read.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	read.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		d := src.Snapshot()
		for _, c := range d.Conditions {
			if c.Type != condition.TypeReady {
				continue
			}
			if c.Status == condition.True {
				fmt.Fprintln(w, "ok")
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "Ready is %s (%s): %s\n", c.Status, c.Reason, c.Message)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "no Ready condition")
	})
	if opts.Metrics != nil {
		read.Handle("GET /metrics", opts.Metrics)
	}
	if opts.TransferInfo != nil {
		read.Handle("GET /transfers", opts.TransferInfo)
	}
	full := http.NewServeMux()
	full.Handle("/", read)
	full.HandleFunc("POST /checkpoint/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		serveCheckpoint(w, r, opts)
	})
	full.HandleFunc(podCheckpointPattern, func(w http.ResponseWriter, r *http.Request) {
		servePodCheckpoint(w, r, opts)
	})
	full.HandleFunc(removeCheckpointPattern, func(w http.ResponseWriter, r *http.Request) {
		serveRemoveCheckpoint(w, r, opts)
	})
	if opts.Transfer != nil {
		full.Handle("PUT /transfers/{name}", opts.Transfer)
	}
	if opts.Send != nil {
		full.Handle(sendTransferPattern, opts.Send)
	}
	return authorize(read, full, opts)
}

// longPoll parses the after= and wait= parameters of GET /status.
func longPoll(q url.Values) (after int64, wait time.Duration, err error) {
	after, err = strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("after=%q: not a generation", q.Get("after"))
	}
	wait = DefaultStatusWait
	if v := q.Get("wait"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("wait=%q: not a number of seconds", v)
		}
		wait = min(time.Duration(n)*time.Second, MaxStatusWait)
	}
	return after, wait, nil
}

// The patterns a PodCheckpoints caller may reach beyond the read-only
// ones.
const (
	podCheckpointPattern    = "POST /checkpoint/{namespace}/{pod}"
	removeCheckpointPattern = "DELETE /checkpoints/{name}"
	sendTransferPattern     = "POST /transfers/{name}/send"
)

// CheckpointRemover removes checkpoints for DELETE /checkpoints/{name}: a
// container archive or a pod checkpoint of the node's checkpoint
// directory, by its base name; one already gone is no error. A Checkpoint
// that implements it serves that path.
type CheckpointRemover interface {
	RemoveCheckpoint(ctx context.Context, name string) error
}

// serveRemoveCheckpoint serves DELETE /checkpoints/{name}: 204 when the
// checkpoint is gone, 404 with the feature off, 400 for a name that is
// not a checkpoint's, 409 for one in use (a restore reading it).
func serveRemoveCheckpoint(w http.ResponseWriter, r *http.Request, opts Options) {
	name := r.PathValue("name")
	rm, ok := opts.Checkpoint.(CheckpointRemover)
	if !ok {
		err := errdefs.New(errdefs.ErrNotFound, "checkpoints are not available on this node")
		writeJSON(w, statusCode(err), map[string]string{"error": err.Error()})
		return
	}
	if err := rm.RemoveCheckpoint(r.Context(), name); err != nil {
		code := statusCode(err)
		switch {
		case errors.Is(err, errdefs.ErrInvalidArgument):
			code = http.StatusBadRequest
		case errors.Is(err, errdefs.ErrBusy):
			code = http.StatusConflict
		}
		writeJSON(w, code, map[string]string{"error": fmt.Sprintf("remove checkpoint %q: %v", name, err)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// servePodCheckpoint serves a pod checkpoint as serveCheckpoint serves a
// container's: 404 for an unknown pod or with the feature off, ?timeout=
// in seconds, ?image= the checkpoint images' name, ?lazy=true a lazy pod
// checkpoint (LazyPodCheckpointer; 400 for a value that is no boolean,
// with ?image=, or refused as invalid), and {"items":["<pod checkpoint path>"]} on success.
func servePodCheckpoint(w http.ResponseWriter, r *http.Request, opts Options) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pc, ok := opts.Checkpoint.(PodCheckpointer)
	if !ok {
		err := errdefs.New(errdefs.ErrNotFound, "pod checkpoints are not available on this node")
		writeJSON(w, statusCode(err), map[string]string{"error": err.Error()})
		return
	}
	timeout, ok := timeoutParam(w, r)
	if !ok {
		return
	}
	lazy := false
	if ls := r.URL.Query()["lazy"]; len(ls) > 0 {
		v, err := strconv.ParseBool(ls[len(ls)-1])
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("lazy parameter %q is not true or false", ls[len(ls)-1])})
			return
		}
		lazy = v
	}
	image := r.URL.Query().Get("image")
	var path string
	var err error
	switch lc, ok := opts.Checkpoint.(LazyPodCheckpointer); {
	case !lazy:
		path, err = pc.PodCheckpoint(r.Context(), ns, name, timeout, image)
	case image != "":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "parameters lazy and image exclude each other: a checkpoint image would hold no memory"})
		return
	case !ok:
		err := errdefs.New(errdefs.ErrNotFound, "lazy pod checkpoints are not available on this node")
		writeJSON(w, statusCode(err), map[string]string{"error": err.Error()})
		return
	default:
		path, err = lc.LazyPodCheckpoint(r.Context(), ns, name, timeout)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			// A node without page server settings, say: no kubelet
			// compatibility to keep here.
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("lazy checkpoint of pod %s/%s refused: %v", ns, name, err)})
			return
		}
	}
	switch code := statusCode(err); {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string][]string{"items": {path}})
	case code == http.StatusNotFound:
		writeJSON(w, code, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, code, map[string]string{"error": fmt.Sprintf("checkpointing of pod %s/%s failed (%v)", ns, name, err)})
	}
}

// timeoutParam reads the last ?timeout= value in seconds (0 or absent:
// the default); on a value that does not parse it answers 500, as
// kubelet does, and returns false.
func timeoutParam(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	ts := r.URL.Query()["timeout"]
	if len(ts) == 0 {
		return 0, true
	}
	n, err := strconv.ParseInt(ts[len(ts)-1], 10, 64)
	if err != nil || n < 0 || n > int64(math.MaxInt64/time.Second) {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "cannot parse value of timeout parameter"})
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// serveCheckpoint follows kubelet's checkpoint handler
// (pkg/kubelet/server/server.go): 404 for an unknown container or with the
// feature off, the last ?timeout= value in seconds (500 when it does not
// parse; 0 or absent for the default), 500 with the runtime's error, and
// {"items":["<archive path>"]} on success.
func serveCheckpoint(w http.ResponseWriter, r *http.Request, opts Options) {
	ref := criu.ContainerRef{Namespace: r.PathValue("namespace"), Pod: r.PathValue("pod"), Container: r.PathValue("container")}
	if opts.Checkpoint == nil {
		err := errdefs.New(errdefs.ErrNotFound, "checkpoints are not available on this node")
		writeJSON(w, statusCode(err), map[string]string{"error": err.Error()})
		return
	}
	var timeout time.Duration
	if ts := r.URL.Query()["timeout"]; len(ts) > 0 {
		n, err := strconv.ParseInt(ts[len(ts)-1], 10, 64)
		if err != nil || n < 0 || n > int64(math.MaxInt64/time.Second) {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "cannot parse value of timeout parameter"})
			return
		}
		timeout = time.Duration(n) * time.Second
	}
	res, err := opts.Checkpoint.Checkpoint(r.Context(), ref, timeout)
	switch code := statusCode(err); {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string][]string{"items": {res.Path}})
	case code == http.StatusNotFound:
		writeJSON(w, code, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, code, map[string]string{"error": fmt.Sprintf("checkpointing of %s failed (%v)", ref, err)})
	}
}

// statusCode maps the class of err (internal/errdefs) to the status code
// the API answers with. Kubelet's checkpoint endpoint answers 404 for an
// unknown container or with the feature off and 500 for every other
// failure, a busy container and an unavailable runtime included; nodeshim
// answers the same.
func statusCode(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	default:
		// errdefs.ErrBusy, ErrUnavailable, ErrNotSupported and unclassified
		// errors alike.
		return http.StatusInternalServerError
	}
}

// refresher runs the report refresh at most once per interval; concurrent
// callers wait for the one in progress.
type refresher struct {
	mu   sync.Mutex
	last time.Time
}

func (f *refresher) run(ctx context.Context, refresh func(context.Context), every time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() && time.Since(f.last) < every {
		return
	}
	refresh(ctx)
	f.last = time.Now()
}

// authorize serves read-only callers from read and full ones from full;
// refusals are logged through opts.Refusals and end the connection.
func authorize(read, full http.Handler, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		access, who := opts.Auth(r)
		switch access {
		case FullAccess:
			full.ServeHTTP(w, r)
			return
		case PodCheckpoints:
			if _, pattern := full.(*http.ServeMux).Handler(r); pattern == podCheckpointPattern || pattern == removeCheckpointPattern ||
				pattern == sendTransferPattern {
				full.ServeHTTP(w, r)
				return
			}
			fallthrough
		case ReadOnly:
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				if _, pattern := read.(*http.ServeMux).Handler(r); pattern != "" {
					read.ServeHTTP(w, r)
					return
				}
			}
			opts.Refusals.Refused(peerID(r), "API request refused: read-only caller", "method", r.Method, "path", r.URL.Path, "caller", who)
			refuse(w, http.StatusForbidden, "forbidden: read-only access")
			return
		}
		opts.Refusals.Refused(peerID(r), "API request refused", "method", r.Method, "path", r.URL.Path, "caller", who)
		w.Header().Set("WWW-Authenticate", `Bearer realm="nodeshim"`)
		refuse(w, http.StatusUnauthorized, "unauthorized")
	})
}

// refuse answers a refused request and ends its connection: the answer
// says "Connection: close", and the read deadline is moved to the past so
// that net/http, which reads what is left of a request's body before it
// closes (up to 256 KiB), gives up at once instead of waiting for a body
// that may never come.
func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Connection", "close")
	writeJSON(w, code, map[string]string{"error": msg})
	// Not every ResponseWriter has a connection (httptest's); the answer
	// stands either way.
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
}

// peerID is the key a request's refusals are counted under: the uid of a
// unix peer, the address without the port of a TCP one.
func peerID(r *http.Request) string {
	if p, ok := r.Context().Value(peerKey{}).(peer); ok {
		if p.cred != nil {
			return "uid=" + strconv.FormatUint(uint64(p.cred.Uid), 10)
		}
		return "unknown peer"
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return "remote=" + host
	}
	return "remote=" + r.RemoteAddr
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ErrNotSocket is returned, wrapped, when the socket path holds something
// other than a socket, which ListenSocket refuses to remove.
var ErrNotSocket = errors.New("path exists and is not a socket")

// Socket is a unix listener bound by ListenSocket, with the identity
// (device and inode) of the socket file it created, so that it removes
// that file and never another process's socket that has replaced it.
type Socket struct {
	*net.UnixListener
	// Path is where the socket was put.
	Path     string
	dev, ino uint64
}

// ListenSocket creates the API socket at path with mode perm from the
// start: it binds in a private (0700) directory beside path, sets the mode
// and the group gid (when not negative, so that a reporter group can connect
// through a 0660 socket), and renames the socket into place, so that it is
// never reachable with a wider mode or another group. A stale socket at path
// is replaced; anything else is an error. It records the socket file's
// identity (device and inode) for Remove.
func ListenSocket(path string, perm os.FileMode, gid int) (*Socket, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("listen on %s: %w", path, ErrNotSocket)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".nodeshim-sock-")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", tmp, err)
	}
	// The listener would unlink its bind path on Close; the path moves, so
	// the caller removes the final one.
	l.SetUnlinkOnClose(false)
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("chown %s to gid %d: %w", tmp, gid, err)
		}
	}
	if err := os.Chmod(tmp, perm); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	// The identity is read in the private directory, where nobody else
	// can have put another file; rename(2) keeps the inode.
	var st unix.Stat_t
	if err := unix.Lstat(tmp, &st); err != nil {
		l.Close()
		return nil, fmt.Errorf("stat %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return &Socket{UnixListener: l, Path: path, dev: st.Dev, ino: st.Ino}, nil
}

// ErrNotOurSocket is returned, wrapped, by Socket.Remove when the path
// holds another file than the socket the Socket created.
var ErrNotOurSocket = errors.New("path holds another socket than the one this process created")

// Remove unlinks the socket file at s.Path if it is still the one s
// created (same device and inode). A path that is gone is not an error;
// a path that holds another file is left alone and reported with
// ErrNotOurSocket: another process took the path over and serves on it.
func (s *Socket) Remove() error {
	var st unix.Stat_t
	if err := unix.Lstat(s.Path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat socket %s: %w", s.Path, err)
	}
	if st.Dev != s.dev || st.Ino != s.ino {
		return fmt.Errorf("remove %s: %w", s.Path, ErrNotOurSocket)
	}
	// Between the check and the unlink only a process that ignores the
	// root dir's lock could replace the file.
	if err := os.Remove(s.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove socket %s: %w", s.Path, err)
	}
	return nil
}
