package client

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint/checkpointtest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// containerOnly checkpoints containers but not pods.
type containerOnly struct{ f checkpointtest.Fake }

func (c *containerOnly) Checkpoint(ctx context.Context, ref criu.ContainerRef, timeout time.Duration) (criu.Result, error) {
	return c.f.Checkpoint(ctx, ref, timeout)
}

// TestCheckpointPod: POST /checkpoint/{namespace}/{pod} through the client
// and the API, against the fake: the pod checkpoint's path, the timeout
// in whole seconds rounded up, the image passed on, NotFound as a 404,
// Busy and failures as the checkpointer's message, a 404 where the
// node's checkpointer takes no pod checkpoints, and a lazy pod
// checkpoint asked as such (CheckpointPodWith).
func TestCheckpointPod(t *testing.T) {
	testutil.RequireRoot(t)
	cp := &checkpointtest.Fake{}
	c := New(serve(t, status.New(nil), api.Options{Checkpoint: cp}))
	noPods := New(serve(t, status.New(nil), api.Options{Checkpoint: &containerOnly{}}))
	tests := []struct {
		name            string
		client          *Client
		pod, image      string
		timeout         time.Duration
		lazy            bool
		wantErr         string
		wantNotFound    bool
		wantSentTimeout time.Duration
	}{
		{name: "pod checkpoint path", client: c, pod: "web", timeout: 90 * time.Second, wantSentTimeout: 90 * time.Second},
		{name: "image and a sub-second timeout", client: c, pod: "web", image: "localhost/web:1", timeout: 10 * time.Millisecond, wantSentTimeout: time.Second},
		{name: "lazy", client: c, pod: "web", timeout: 30 * time.Second, lazy: true, wantSentTimeout: 30 * time.Second},
		{name: "lazy on a node without pod checkpoints", client: noPods, pod: "web", lazy: true, wantErr: "not available", wantNotFound: true},
		{name: "unknown pod is NotFound", client: c, pod: "missing", wantErr: "404", wantNotFound: true},
		{name: "a container not running", client: c, pod: "starting", wantErr: "not running"},
		{name: "CRIU's error comes back", client: c, pod: "broken", wantErr: "Dumping FAILED"},
		{name: "no pod checkpoints on the node", client: noPods, pod: "web", wantErr: "not available", wantNotFound: true},
		{name: "empty pod", client: c, wantErr: "empty pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp.Reset()
			path, err := tc.client.CheckpointPodWith(t.Context(), "default", tc.pod, PodCheckpointOptions{Timeout: tc.timeout, ImageRef: tc.image, Lazy: tc.lazy})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if isNotFound(err) != tc.wantNotFound {
					t.Fatalf("IsNotFound(%v) = %v, want %v", err, !tc.wantNotFound, tc.wantNotFound)
				}
				return
			}
			if err != nil || path != checkpointtest.PodCheckpointPath("default", tc.pod) {
				t.Fatalf("CheckpointPod = %q, %v", path, err)
			}
			if got := cp.Timeouts(); !slices.Equal(got, []time.Duration{tc.wantSentTimeout}) {
				t.Errorf("the API got timeouts %v, want [%v]", got, tc.wantSentTimeout)
			}
			if got := cp.Images(); !slices.Equal(got, []string{tc.image}) {
				t.Errorf("the API got images %q, want [%q]", got, tc.image)
			}
			if got := cp.Lazy(); !slices.Equal(got, []bool{tc.lazy}) {
				t.Errorf("the API got lazy %v, want [%v]", got, tc.lazy)
			}
		})
	}
}
