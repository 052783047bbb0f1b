package api

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestWithPodCheckpoints: the uids given get PodCheckpoints access, root
// keeps full access, everyone else what the wrapped authenticator says.
func TestWithPodCheckpoints(t *testing.T) {
	auth := WithPodCheckpoints(UnixPeer(nil, []uint32{1000}, nil), []uint32{1000})
	for _, tt := range []struct {
		name string
		cred *unix.Ucred
		want Access
	}{
		{"root", &unix.Ucred{Uid: 0}, FullAccess},
		{"the reporter", &unix.Ucred{Uid: 1000}, PodCheckpoints},
		{"a stranger", &unix.Ucred{Uid: 1001}, NoAccess},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://nodeshim/status", nil)
			r = r.WithContext(context.WithValue(r.Context(), peerKey{}, peer{cred: tt.cred}))
			if got, _ := auth(r); got != tt.want {
				t.Errorf("access %v, want %v", got, tt.want)
			}
		})
	}
}

// podService is the real checkpoint service but for the pod checkpoint
// itself, which would need a CRI runtime: it answers with a path.
type podService struct{ *checkpoint.Service }

func (podService) PodCheckpoint(_ context.Context, ns, name string, _ time.Duration, _ string) (string, error) {
	return filepath.Join("/var/lib/kubelet/checkpoints", pod.Name(ns, name, time.Unix(0, 0), 0)), nil
}

// TestPodCheckpointsAccess: a PodCheckpoints caller reads, asks for pod
// checkpoints and removes checkpoints, and is refused a container
// checkpoint; a read-only caller is refused the removal, which then
// removes nothing. The removal is the real checkpoint service's.
func TestPodCheckpointsAccess(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	name := pod.Name("team-a", "web", time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC), 0)
	if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	svc := podService{checkpoint.New(checkpoint.Options{Settings: func() checkpoint.Settings {
		return checkpoint.Settings{Enabled: true, Dir: dir}
	}})}
	serve := func(a Access) string {
		return serveWith(t, Options{Checkpoint: svc, Auth: func(*http.Request) (Access, string) { return a, "test peer" }})
	}
	reporter, reader := serve(PodCheckpoints), serve(ReadOnly)
	for _, tt := range []struct {
		name, sock, method, path string
		forbidden                bool
	}{
		{"read", reporter, "GET", "/healthz", false},
		{"pod checkpoint", reporter, "POST", "/checkpoint/team-a/web", false},
		{"pod checkpoint with a timeout", reporter, "POST", "/checkpoint/team-a/web?timeout=5", false},
		{"container checkpoint", reporter, "POST", "/checkpoint/team-a/web/app", true},
		{"remove as a reader", reader, "DELETE", "/checkpoints/" + name, true},
		{"pod checkpoint as a reader", reader, "POST", "/checkpoint/team-a/web", true},
		{"remove", reporter, "DELETE", "/checkpoints/" + name, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://nodeshim"+tt.path, nil)
			resp, err := testutil.UnixHTTPClient(tt.sock).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.StatusCode == http.StatusForbidden; got != tt.forbidden {
				t.Errorf("%s %s = %d %s, forbidden %v", tt.method, tt.path, resp.StatusCode, b, tt.forbidden)
			}
			_, err = os.Stat(filepath.Join(dir, name))
			if removed := err != nil; removed != (tt.name == "remove") {
				t.Errorf("after %s %s: the pod checkpoint removed %v", tt.method, tt.path, removed)
			}
			if tt.name == "remove" && resp.StatusCode != http.StatusNoContent {
				t.Errorf("DELETE = %d %s, want 204", resp.StatusCode, b)
			}
		})
	}
}
