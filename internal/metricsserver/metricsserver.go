// Package metricsserver serves a long-running nodeshim process's metrics
// and health endpoints beside the work the process does: the reporter's
// and the controller's.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// Run runs run until it returns or ctx ends, serving from ln meanwhile:
// metrics on GET /metrics, "ok" on GET /healthz, and, when ready is not
// nil, GET /readyz: 200 when ready returns nil, else 503 with its error.
// The server shuts down (5 s for requests in flight) when either ends.
func Run(ctx context.Context, ln net.Listener, metrics http.Handler, ready func() error, run func(context.Context) error) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	if ready != nil {
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}
