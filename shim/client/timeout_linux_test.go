package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// stuckSocket is a socket whose server never accepts: a connect lands in
// its backlog and no answer ever comes, as with a serve whose API is
// saturated.
func stuckSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), api.SocketName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return sock
}

// within runs f and fails the test when it has not returned after a
// generous bound, far beyond the time-outs under test.
func within(t *testing.T, f func() error) (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(time.Minute):
		t.Fatal("the request still waits after a minute")
		return 0, nil
	}
}

// TestTimeout checks that a request to a shim that never answers ends:
// with the client's time-out when its context has no deadline, with the
// context's deadline otherwise, and that a long poll's wait is added to
// the time-out rather than cut by it.
func TestTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name    string
		call    func(c *Client) error
		atLeast time.Duration // the request may not end before
	}{
		{"status without a deadline", func(c *Client) error { _, err := c.Status(context.Background()); return err }, timeout},
		{"a long poll gets its wait on top", func(c *Client) error {
			_, err := c.StatusAfter(context.Background(), 1, 300*time.Millisecond)
			return err
		}, timeout + 300*time.Millisecond},
		{"Do without a deadline", func(c *Client) error { _, err := c.Do(context.Background(), "GET", "/metrics"); return err }, timeout},
		{"a checkpoint gets its timeout on top", func(c *Client) error {
			_, err := c.Checkpoint(context.Background(), "ns", "pod", "ctr", time.Second)
			return err
		}, timeout + time.Second},
		{"the context's deadline rules", func(c *Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
			defer cancel()
			_, err := c.Status(ctx)
			return err
		}, 2 * timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(stuckSocket(t), WithTimeout(timeout))
			defer c.Close()
			took, err := within(t, func() error { return tt.call(c) })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the deadline exceeded", err)
			}
			if took < tt.atLeast {
				t.Errorf("ended after %v, before %v", took, tt.atLeast)
			}
			t.Logf("ended after %v", took)
		})
	}
}

// TestTimeoutLeavesLongPolls checks on a real API that a long poll longer
// than the client's time-out is answered, not cut.
func TestTimeoutLeavesLongPolls(t *testing.T) {
	testutil.RequireRoot(t)
	model := status.New(nil)
	c := New(serve(t, model, api.Options{}), WithTimeout(100*time.Millisecond))
	defer c.Close()
	gen := model.Snapshot().Generation
	d, err := c.StatusAfter(context.Background(), gen, time.Second)
	if err != nil || d.Generation != gen {
		t.Fatalf("StatusAfter(%d, 1s) with a 100ms time-out = generation %d, %v; want %d", gen, d.Generation, err, gen)
	}
}

func TestWithTimeoutDefault(t *testing.T) {
	if got := New("x").Timeout(); got != DefaultTimeout {
		t.Errorf("default time-out %v, want %v", got, DefaultTimeout)
	}
	if got := New("x", WithTimeout(0)).Timeout(); got != DefaultTimeout {
		t.Errorf("WithTimeout(0) gives %v, want the default %v", got, DefaultTimeout)
	}
	if got := New("x", WithTimeout(time.Second)).Timeout(); got != time.Second {
		t.Errorf("WithTimeout(1s) gives %v", got)
	}
}
