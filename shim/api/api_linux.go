// Package api serves nodeshim's node API on a unix socket: GET /status,
// /healthz and /readyz over the status model. The peer of every connection
// is identified with SO_PEERCRED and only allowed uids (root by default)
// are served; others get 401 and are logged.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// SocketName is the API socket's name under nodeshim's root dir.
const SocketName = "nodeshim.sock"

// Source is what the API reads: the status model.
type Source interface {
	Snapshot() status.Document
}

// Options configure a Handler.
type Options struct {
	// AllowedUIDs may use the API; root only when empty.
	AllowedUIDs []uint32
	// Logger receives refused requests; slog.Default() when nil.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
}

type peerKey struct{}

// peer is the credential of a connection, as SO_PEERCRED reported it.
type peer struct {
	cred *unix.Ucred
	err  error
}

// ConnContext records the peer credentials of a unix connection in its
// context; set it as http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
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

// NewHandler returns the API's HTTP handler.
func NewHandler(src Source, opts Options) http.Handler {
	if len(opts.AllowedUIDs) == 0 {
		opts.AllowedUIDs = []uint32{0}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		d := src.Snapshot()
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
		writeJSON(w, http.StatusOK, d)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
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
		mux.Handle("GET /metrics", opts.Metrics)
	}
	return authorize(mux, opts)
}

func authorize(next http.Handler, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := r.Context().Value(peerKey{}).(peer)
		switch {
		case !ok || p.err != nil || p.cred == nil:
			opts.Logger.Warn("API request refused: peer credentials unknown", "method", r.Method, "path", r.URL.Path, "err", p.err)
		case !slices.Contains(opts.AllowedUIDs, p.cred.Uid):
			opts.Logger.Warn("API request refused", "method", r.Method, "path", r.URL.Path, "uid", p.cred.Uid, "pid", p.cred.Pid)
		default:
			next.ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ErrNotSocket is returned, wrapped, when the socket path holds something
// other than a socket, which Listen refuses to remove.
var ErrNotSocket = errors.New("path exists and is not a socket")

// Listen creates the API socket at path with mode perm from the start: it
// binds in a private (0700) directory beside path, sets the mode, and
// renames the socket into place, so that it is never reachable with a
// wider mode. A stale socket at path is replaced; anything else is an error.
func Listen(path string, perm os.FileMode) (*net.UnixListener, error) {
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
	if err := os.Chmod(tmp, perm); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return l, nil
}
