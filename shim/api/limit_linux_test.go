package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestLimitPeersAdmit checks the counts of LimitPeers: root is never
// limited, a reader has its own reserve, the others are limited each and
// together, and a closed connection gives its place back.
func TestLimitPeersAdmit(t *testing.T) {
	const reader, readerGID = 65532, 3000
	lim := Limits{ConnsPerPeer: 2, ConnsOthers: 3, ConnsPerReader: 2}
	type step struct {
		uid, gid uint32
		noCred   bool
		close    int // close the connection opened by step close-1 instead of opening one
		want     bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"root is never limited", []step{{uid: 0, want: true}, {uid: 0, want: true}, {uid: 0, want: true}, {uid: 0, want: true}}},
		{"a peer's limit", []step{{uid: 1000, want: true}, {uid: 1000, want: true}, {uid: 1000, want: false}}},
		{"the others' limit together", []step{{uid: 1000, want: true}, {uid: 1000, want: true}, {uid: 1001, want: true}, {uid: 1002, want: false}}},
		{"a closed connection gives its place back", []step{{uid: 1000, want: true}, {uid: 1000, want: true}, {close: 1},
			{uid: 1000, want: true}, {uid: 1000, want: false}}},
		{"a reader's reserve is its own", []step{{uid: 1000, want: true}, {uid: 1000, want: true}, {uid: 1001, want: true},
			{uid: reader, want: true}, {uid: reader, want: true}, {uid: reader, want: false}, {uid: 0, want: true}}},
		{"a reader by gid", []step{{uid: 1000, gid: readerGID, want: true}, {uid: 1000, gid: readerGID, want: true}, {uid: 1000, gid: readerGID, want: false}}},
		{"an unknown peer is an other", []step{{noCred: true, want: true}, {noCred: true, want: true}, {noCred: true, want: false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := &syncbuf.Buffer{}
			l := LimitPeers(nil, lim, []uint32{reader}, []uint32{readerGID},
				NewRefusalLog(slog.New(slog.NewTextHandler(buf, nil)), time.Hour, nil)).(*limitListener)
			var conns []*peerConn
			refused := 0
			for i, s := range tt.steps {
				if s.close > 0 {
					conns[s.close-1].release()
					conns = append(conns, nil)
					continue
				}
				pc := &peerConn{}
				if s.noCred {
					pc.credErr = errors.New("no credentials")
				} else {
					pc.cred = &unix.Ucred{Uid: s.uid, Gid: s.gid, Pid: 1}
				}
				got := l.admit(pc)
				if got != s.want {
					t.Fatalf("step %d (uid %d gid %d): admitted %v, want %v", i, s.uid, s.gid, got, s.want)
				}
				if !got {
					refused++
				}
				conns = append(conns, pc)
			}
			if n := strings.Count(buf.String(), "API connection refused"); (refused > 0) != (n == 1) {
				t.Errorf("%d refusals logged as %d lines, want one line when any:\n%s", refused, n, buf.String())
			}
		})
	}
}

// serveRaw serves the handler for src with opts on a root-only socket
// through srv and returns the socket.
func serveRaw(t *testing.T, srv *http.Server, src Source, opts Options) string {
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
	srv.Handler = NewHandler(src, opts)
	srv.ConnContext = ConnContext
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

// closedBy reads c until the server closes it and returns how long that
// took; a generous deadline turns a connection held forever into an error.
func closedBy(t *testing.T, c net.Conn, r *bufio.Reader) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(60 * time.Second))
	_, err := io.Copy(io.Discard, r)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return took, errors.New("the server still holds the connection after 60 s")
	}
	return took, nil
}

// TestRefusalClosesConnection checks that a refused request ends its
// connection at once, even when it announced a body that never comes,
// on a server without any time-out: the refusal alone frees the peer's
// place.
func TestRefusalClosesConnection(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name   string
		access Access
		req    string
		want   int
	}{
		{"401 with a body that never comes", NoAccess, "POST /checkpoint/a/b/c HTTP/1.1\r\nHost: n\r\nContent-Length: 1000\r\n\r\n", 401},
		{"401 kept alive", NoAccess, "GET /status HTTP/1.1\r\nHost: n\r\n\r\n", 401},
		{"403 with a body that never comes", ReadOnly, "POST /checkpoint/a/b/c HTTP/1.1\r\nHost: n\r\nContent-Length: 1000\r\n\r\nab", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveRaw(t, &http.Server{}, status.New(nil), Options{
				Auth: func(*http.Request) (Access, string) { return tt.access, "test peer" },
			})
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A generous bound, so that an answer that never comes fails
			// the test instead of hanging it.
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.WriteString(c, tt.req); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(c)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || !resp.Close {
				t.Fatalf("answer %d close=%v, want %d with Connection: close", resp.StatusCode, resp.Close, tt.want)
			}
			took, err := closedBy(t, c, r)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("closed %v after the answer", took)
		})
	}
}

// TestServerTimeouts checks NewServer's time-outs on a peer with full
// access: an idle keep-alive connection, a body that never comes and
// headers that never end are each closed.
func TestServerTimeouts(t *testing.T) {
	testutil.RequireRoot(t)
	lim := Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	tests := []struct {
		name     string
		req      string
		wantCode int // 0: no answer expected
	}{
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: n\r\n\r\n", 200},
		{"a body that never comes", "POST /checkpoint/a/b/c HTTP/1.1\r\nHost: n\r\nContent-Length: 1000\r\n\r\nab", 404},
		{"headers that never end", "GET /status HTTP/1.1\r\nHost: n\r\n", 0},
		{"nothing sent", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveRaw(t, NewServer(nil, lim), status.New(nil), Options{})
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A generous bound, so that an answer that never comes fails
			// the test instead of hanging it.
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.WriteString(c, tt.req); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(c)
			if tt.wantCode != 0 {
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantCode {
					t.Fatalf("answer %d, want %d", resp.StatusCode, tt.wantCode)
				}
			}
			took, err := closedBy(t, c, r)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("closed after %v", took)
		})
	}
}

// TestNewServerDefaults checks that the zero Limits serve with the
// documented defaults.
func TestNewServerDefaults(t *testing.T) {
	srv := NewServer(http.NotFoundHandler(), Limits{})
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout ||
		srv.IdleTimeout != DefaultIdleTimeout || srv.MaxHeaderBytes != maxHeaderBytes {
		t.Errorf("server time-outs %v %v %v, max header %d", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if got := (Limits{ConnsPerPeer: 3}).WithDefaults(); got.ConnsPerPeer != 3 || got.ConnsOthers != DefaultConnsOthers ||
		got.ConnsPerReader != DefaultConnsPerReader || got.RefusalLogInterval != DefaultRefusalLogInterval {
		t.Errorf("WithDefaults = %+v", got)
	}
}

// TestLimitAddrs: one remote address holds at most ConnsPerAddress
// connections of the TCP listener, handshake or not; another address
// still gets in; the listener holds at most ConnsTCP; a closed
// connection gives its place back. 127.0.0.2 is a second address of the
// loopback device.
func TestLimitAddrs(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	ln := LimitAddrs(tcp, Limits{ConnsPerAddress: 2, ConnsTCP: 3}, NewRefusalLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Hour, nil))
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByServer waits until the server has closed c: a read ends.
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	var held []net.Conn
	for range 2 {
		dial("127.0.0.1")
		held = append(held, <-accepted)
	}
	if c := dial("127.0.0.1"); !closedByServer(c) {
		t.Error("a third connection from 127.0.0.1 was not closed")
	}
	dial("127.0.0.2")
	third := <-accepted
	if c := dial("127.0.0.2"); !closedByServer(c) {
		t.Error("a fourth connection of the listener was not closed")
	}
	if !strings.Contains(logs.String(), "addr=127.0.0.1") || !strings.Contains(logs.String(), "the listener's 3 connections") {
		t.Errorf("refusals not logged by address and limit: %s", logs.String())
	}
	held[0].Close()
	third.Close()
	dial("127.0.0.1")
	testutil.Eventually(t, "a connection from 127.0.0.1 accepted after one closed", func() error {
		select {
		case c := <-accepted:
			held = append(held, c)
			return nil
		default:
			return errors.New("not accepted yet")
		}
	})
	for _, c := range held {
		c.Close()
	}
}
