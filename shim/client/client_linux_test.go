package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint/checkpointtest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// serve runs the real node API handler over a unix socket.
func serve(t *testing.T, model *status.Model, opts api.Options) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), api.SocketName)
	lSock, err := api.ListenSocket(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := &http.Server{Handler: api.NewHandler(model, opts), ConnContext: api.ConnContext}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-done
		os.Remove(sock)
	})
	return sock
}

func TestStatus(t *testing.T) {
	testutil.RequireRoot(t)
	model := status.New(nil)
	model.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "LinksUp", Message: "eth0 up"})
	c := New(serve(t, model, api.Options{}))
	d, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got *condition.Condition
	for i := range d.Conditions {
		if d.Conditions[i].Type == "NetworkReady" {
			got = &d.Conditions[i]
		}
	}
	if got == nil || got.Status != condition.True || got.Reason != "LinksUp" {
		t.Fatalf("conditions %+v, want NetworkReady True/LinksUp", d.Conditions)
	}
}

func TestCheckpoint(t *testing.T) {
	testutil.RequireRoot(t)
	cp := &checkpointtest.Fake{}
	c := New(serve(t, status.New(nil), api.Options{Checkpoint: cp}))
	off := New(serve(t, status.New(nil), api.Options{}))
	tests := []struct {
		name               string
		client             *Client
		ns, pod, container string
		timeout            time.Duration
		wantPath, wantErr  string
		wantNotFound       bool
		wantSentTimeout    time.Duration
	}{
		{name: "archive path", client: c, ns: "default", pod: "web", container: "app", timeout: 90 * time.Second,
			wantPath: checkpointtest.ArchivePath("default", "web"), wantSentTimeout: 90 * time.Second},
		{name: "sub-second timeout rounds up, never to the default", client: c, ns: "default", pod: "web", container: "app", timeout: 300 * time.Millisecond,
			wantPath: checkpointtest.ArchivePath("default", "web"), wantSentTimeout: time.Second},
		{name: "unknown container is NotFound", client: c, ns: "default", pod: "web", container: "missing",
			wantErr: "404", wantNotFound: true},
		{name: "CRIU's error comes back", client: c, ns: "default", pod: "web", container: "broken",
			wantErr: "Dumping FAILED"},
		{name: "checkpoints off on the node", client: off, ns: "default", pod: "web", container: "app",
			wantErr: "not available", wantNotFound: true},
		{name: "empty pod", client: c, ns: "default", container: "app", wantErr: "empty pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp.Reset()
			path, err := tc.client.Checkpoint(t.Context(), tc.ns, tc.pod, tc.container, tc.timeout)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if isNotFound(err) != tc.wantNotFound {
					t.Fatalf("IsNotFound(%v) = %v, want %v", err, !tc.wantNotFound, tc.wantNotFound)
				}
				return
			}
			if err != nil || path != tc.wantPath {
				t.Fatalf("Checkpoint = %q, %v; want %q", path, err, tc.wantPath)
			}
			if timeouts := cp.Timeouts(); len(timeouts) != 1 || timeouts[0] != tc.wantSentTimeout {
				t.Fatalf("the API got timeouts %v, want [%v]", timeouts, tc.wantSentTimeout)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), api.SocketName)
	_, err := New(sock).Status(t.Context())
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("err = %v, want an error naming %s", err, sock)
	}
	if isNotFound(err) {
		t.Fatalf("a missing socket is not a 404: %v", err)
	}
}

// isNotFound reports whether err is a 404 from the API.
func isNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

func TestStatusAfter(t *testing.T) {
	testutil.RequireRoot(t)
	model := status.New(nil)
	c := New(serve(t, model, api.Options{}))
	defer c.Close()
	gen := model.Snapshot().Generation
	// Unchanged: the shim answers when the wait ends.
	d, err := c.StatusAfter(t.Context(), gen, 0)
	if err != nil || d.Generation != gen {
		t.Fatalf("StatusAfter(%d, 0) = generation %d, %v; want %d", gen, d.Generation, err, gen)
	}
	// A change ends the wait.
	go model.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "LinksUp"})
	d, err = c.StatusAfter(t.Context(), gen, time.Hour)
	if err != nil || d.Generation <= gen {
		t.Fatalf("StatusAfter(%d) = generation %d, %v; want a later one", gen, d.Generation, err)
	}
}

func TestStatusAfterPath(t *testing.T) {
	for _, tc := range []struct {
		gen  int64
		wait time.Duration
		want string
	}{
		{0, 0, "/status?after=0&wait=0"},
		{7, 30 * time.Second, "/status?after=7&wait=30"},
		{7, 1500 * time.Millisecond, "/status?after=7&wait=2"},
	} {
		if got := StatusAfterPath(tc.gen, tc.wait); got != tc.want {
			t.Errorf("StatusAfterPath(%d, %v) = %s, want %s", tc.gen, tc.wait, got, tc.want)
		}
	}
}
