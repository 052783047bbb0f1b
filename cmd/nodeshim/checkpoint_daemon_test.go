package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// namedCheckpointer stands in for the daemon's CRI and CRIU service (tested
// end to end in shim/daemon): it writes a file for container "app" and
// refuses any other name, as a runtime that does not know it would.
type namedCheckpointer struct{ dir string }

func (n namedCheckpointer) Checkpoint(_ context.Context, ref criu.ContainerRef, timeout time.Duration) (criu.Result, error) {
	if ref.Container != "app" {
		return criu.Result{}, fmt.Errorf("%s: %w", ref, checkpoint.ErrNotFound)
	}
	if timeout != 42*time.Second {
		return criu.Result{}, fmt.Errorf("timeout %v, want 42s", timeout)
	}
	p := filepath.Join(n.dir, "checkpoint-"+ref.Pod+"_"+ref.Namespace+"-app.tar")
	return criu.Result{Path: p}, os.WriteFile(p, make([]byte, 4096), 0o600)
}

// TestCheckpointContainerThroughDaemon runs `nodeshim checkpoint
// --namespace --pod --container` against the real node API handler.
func TestCheckpointContainerThroughDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, api.SocketName)
	lSock, err := api.ListenSocket(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	srv := &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{
		Checkpoint: namedCheckpointer{dir: dir},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}), ConnContext: api.ConnContext}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	defer func() { srv.Shutdown(context.Background()); <-done }()

	out, _, err := runSplit(t, "checkpoint", "--namespace", "default", "--pod", "web-0", "--container", "app",
		"--socket", sock, "--timeout", "42s", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got checkpointOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	want := filepath.Join(dir, "checkpoint-web-0_default-app.tar")
	if got.Path != want || got.SizeBytes != 4096 || got.Container != "default/web-0/app" {
		t.Fatalf("output %+v, want archive %s of 4096 bytes for default/web-0/app", got, want)
	}

	_, _, err = runSplit(t, "checkpoint", "--namespace", "default", "--pod", "web-0", "--container", "sidecar", "--socket", sock)
	var ee *exitError
	if err == nil || !strings.Contains(err.Error(), "404") || errors.As(err, &ee) && ee.code != exitFailure {
		t.Fatalf("unknown container: %v, want a 404 failure", err)
	}
}
