package api

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/shim/checkpoint/checkpointtest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func serveWith(t *testing.T, opts Options) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), SocketName)
	lSock, err := ListenSocket(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := &http.Server{Handler: NewHandler(status.New(nil), opts), ConnContext: ConnContext}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		wg.Wait()
		os.Remove(sock)
	})
	return sock
}

// TestCheckpointHandler holds POST /checkpoint to kubelet's status codes
// and response body.
func TestCheckpointHandler(t *testing.T) {
	testutil.RequireRoot(t)
	f := &checkpointtest.Fake{}
	sock := serveWith(t, Options{Checkpoint: f})
	none := serveWith(t, Options{})
	tests := []struct {
		name        string
		sock        string
		method      string
		path        string
		wantCode    int
		wantBody    string
		wantTimeout time.Duration // -1: not called
	}{
		{"success", sock, "POST", "/checkpoint/default/web-0/app", 200,
			`"items": [` + "\n" + `    "` + checkpointtest.ArchivePath("default", "web-0") + `"`, 0},
		{"timeout in seconds", sock, "POST", "/checkpoint/default/web-0/app?timeout=30", 200, "items", 30 * time.Second},
		{"the last timeout wins", sock, "POST", "/checkpoint/default/web-0/app?timeout=5&timeout=7", 200, "items", 7 * time.Second},
		{"timeout that does not parse", sock, "POST", "/checkpoint/default/web-0/app?timeout=1.5", 500, "cannot parse value of timeout parameter", -1},
		{"unknown container", sock, "POST", "/checkpoint/default/web-0/missing", 404, "container not found", 0},
		{"disabled in config", sock, "POST", "/checkpoint/default/web-0/disabled", 404, "disabled", 0},
		{"CRIU's error", sock, "POST", "/checkpoint/default/web-0/broken", 500, "checkpointing of default/web-0/broken failed (criu failed: Dumping FAILED)", 0},
		{"missing part", sock, "POST", "/checkpoint/default", 404, "", -1},
		{"no checkpointer", none, "POST", "/checkpoint/default/web-0/app", 404, "not available", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.Reset()
			req, _ := http.NewRequest(tt.method, "http://nodeshim"+tt.path, nil)
			resp, err := testutil.UnixHTTPClient(tt.sock).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantBody) {
				t.Errorf("%s %s = %d %s, want %d with %q", tt.method, tt.path, resp.StatusCode, b, tt.wantCode, tt.wantBody)
			}
			switch timeouts := f.Timeouts(); {
			case tt.wantTimeout < 0 && len(timeouts) != 0:
				t.Errorf("checkpointer called with %v", timeouts)
			case tt.wantTimeout >= 0 && tt.sock == sock && (len(timeouts) != 1 || timeouts[0] != tt.wantTimeout):
				t.Errorf("timeouts %v, want [%v]", timeouts, tt.wantTimeout)
			}
		})
	}
}

func TestListenSocketGroup(t *testing.T) {
	testutil.RequireRoot(t)
	p := filepath.Join(t.TempDir(), SocketName)
	lSock, err := ListenSocket(p, 0o660, 65534)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	defer os.Remove(p)
	defer l.Close()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Gid != 65534 || st.Uid != 0 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket %v uid %d gid %d, want a 0660 socket root:65534", fi.Mode(), st.Uid, st.Gid)
	}
}

func TestBearer(t *testing.T) {
	tests := []struct {
		name   string
		token  string
		header string
		tls    bool
		want   Access
	}{
		{"right token", "s3cret", "Bearer s3cret", true, FullAccess},
		{"wrong token", "s3cret", "Bearer s3cre", true, NoAccess},
		{"no header", "s3cret", "", true, NoAccess},
		{"not bearer", "s3cret", "Basic s3cret", true, NoAccess},
		{"no token configured", "", "Bearer ", true, NoAccess},
		{"right token without TLS", "s3cret", "Bearer s3cret", false, NoAccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "https://node/status", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{HandshakeComplete: true}
			}
			got, who := Bearer([]byte(tt.token))(r)
			if got != tt.want || who == "" {
				t.Errorf("access %v (%s), want %v", got, who, tt.want)
			}
		})
	}
}

func TestUnixPeer(t *testing.T) {
	auth := UnixPeer(nil, []uint32{1000}, []uint32{2000})
	tests := []struct {
		name string
		p    *peer
		want Access
	}{
		{"root", &peer{cred: &unix.Ucred{Uid: 0, Gid: 0}}, FullAccess},
		{"reader uid", &peer{cred: &unix.Ucred{Uid: 1000, Gid: 100}}, ReadOnly},
		{"reader gid", &peer{cred: &unix.Ucred{Uid: 1001, Gid: 2000}}, ReadOnly},
		{"stranger", &peer{cred: &unix.Ucred{Uid: 1001, Gid: 100}}, NoAccess},
		{"credentials unreadable", &peer{err: errors.New("not a unix connection")}, NoAccess},
		{"no credentials recorded", nil, NoAccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://nodeshim/status", nil)
			if tt.p != nil {
				r = r.WithContext(context.WithValue(r.Context(), peerKey{}, *tt.p))
			}
			if got, who := auth(r); got != tt.want || who == "" {
				t.Errorf("access %v (%s), want %v", got, who, tt.want)
			}
		})
	}
}
