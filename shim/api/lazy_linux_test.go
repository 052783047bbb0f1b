package api

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// plainPods takes only ordinary pod checkpoints, and records that it was
// asked.
type plainPods struct{ asked chan string }

func (plainPods) Checkpoint(context.Context, criu.ContainerRef, time.Duration) (criu.Result, error) {
	return criu.Result{}, errdefs.New(errdefs.ErrNotFound, "no containers here")
}

func (l plainPods) PodCheckpoint(_ context.Context, ns, name string, _ time.Duration, _ string) (string, error) {
	l.asked <- "plain"
	return "/ck/plain", nil
}

// lazyPods takes lazy pod checkpoints too.
type lazyPods struct{ plainPods }

func (l lazyPods) LazyPodCheckpoint(_ context.Context, ns, name string, _ time.Duration) (string, error) {
	l.asked <- "lazy"
	if name == "no-tls" {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "api.clientCAFile not configured")
	}
	return "/ck/lazy", nil
}

// TestPodCheckpointLazyParameter: ?lazy= picks the lazy pod checkpoint
// (its last value, as strconv.ParseBool reads it); a value that is no
// boolean, lazy with image, and a lazy checkpoint refused as invalid are
// answered 400 naming the cause; a node that takes no lazy pod
// checkpoints answers 404.
func TestPodCheckpointLazyParameter(t *testing.T) {
	testutil.RequireRoot(t)
	l := lazyPods{plainPods{asked: make(chan string, 1)}}
	sock := serveWith(t, Options{Checkpoint: l})
	plain := serveWith(t, Options{Checkpoint: l.plainPods})
	for _, tt := range []struct {
		name, sock, path string
		code             int
		asked, says      string
	}{
		{"lazy", sock, "/checkpoint/default/web?lazy=true", 200, "lazy", "/ck/lazy"},
		{"lazy 1", sock, "/checkpoint/default/web?lazy=1", 200, "lazy", "/ck/lazy"},
		{"lazy false", sock, "/checkpoint/default/web?lazy=false", 200, "plain", "/ck/plain"},
		{"last value", sock, "/checkpoint/default/web?lazy=true&lazy=false", 200, "plain", "/ck/plain"},
		{"no lazy", sock, "/checkpoint/default/web", 200, "plain", "/ck/plain"},
		{"bad value", sock, "/checkpoint/default/web?lazy=yes", 400, "", "lazy parameter"},
		{"with image", sock, "/checkpoint/default/web?lazy=true&image=r.example/x", 400, "", "lazy and image"},
		{"refused", sock, "/checkpoint/default/no-tls?lazy=true", 400, "lazy", "api.clientCAFile"},
		{"not on this node", plain, "/checkpoint/default/web?lazy=true", 404, "", "lazy pod checkpoints are not available"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := testutil.UnixHTTPClient(tt.sock).Post("http://nodeshim"+tt.path, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var asked string
			select {
			case asked = <-l.asked:
			default:
			}
			if resp.StatusCode != tt.code || asked != tt.asked || !strings.Contains(string(b), tt.says) {
				t.Errorf("POST %s = %d %s, asked %q; want %d saying %q, asked %q", tt.path, resp.StatusCode, b, asked, tt.code, tt.says, tt.asked)
			}
			if tt.code == 200 {
				var out struct{ Items []string }
				if err := json.Unmarshal(b, &out); err != nil || len(out.Items) != 1 {
					t.Errorf("answer %s: %v", b, err)
				}
			}
		})
	}
}
