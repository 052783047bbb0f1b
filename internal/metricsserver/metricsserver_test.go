package metricsserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var notReady atomic.Pointer[error]
	e := errors.New("no status published yet")
	notReady.Store(&e)
	ready := func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") })
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, ln, metrics, ready, func(ctx context.Context) error { close(started); <-ctx.Done(); return nil })
	}()
	<-started
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/metrics", "m 1", 200},
		{"/healthz", "ok", 200},
		{"/readyz", "no status published yet", 503},
	} {
		if code, body := get(tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	notReady.Store(nil)
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("GET /readyz once ready = %d %q, want 200", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after ctx ended, want nil", err)
	}
}

func TestRunEndsWithItsWork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = Run(context.Background(), ln, http.NotFoundHandler(), nil, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Run = %v, want the work's error", err)
	}
}
