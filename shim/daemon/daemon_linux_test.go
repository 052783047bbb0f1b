package daemon

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
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the workloads and clients the tests start.
	switch os.Getenv(envWorkload) {
	case "":
	case "count", "count-tcp":
		testworkload.RunCounter(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB), os.Getenv(envWorkload) == "count-tcp")
		return
	case "client":
		runClient()
		return
	case "flood":
		runFlood()
		return
	case "probe":
		runProbe()
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown workload %q\n", os.Getenv(envWorkload))
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

func getStatus(t *testing.T, c *http.Client) status.Document {
	t.Helper()
	resp, err := c.Get("http://nodeshim/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d status.Document
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitStatus polls GET /status until ok holds; go test's -timeout bounds it.
func waitStatus(t *testing.T, c *http.Client, ok func(status.Document) bool) status.Document {
	t.Helper()
	for {
		if d := getStatus(t, c); ok(d) {
			return d
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeSource(t testing.TB, dir, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, config.BaseFile)); err != nil {
		t.Fatal(err)
	}
}

func TestServe(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	opts := Options{
		RootDir:      filepath.Join(dir, "root"),
		LockFile:     filepath.Join(dir, "run", "nodeshim.lock"),
		ConfigSource: filepath.Join(dir, "source"),
		HostRoot:     host,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	out := &syncbuf.Buffer{}
	opts.Out = out
	listening := make(chan string, 1)
	opts.Listening = func(s string) { listening <- s }
	settled := make(chan struct{})
	opts.Settled = func() { close(settled) }
	// A report that succeeds, so that KernelReportSucceeded is True before
	// the sources start.
	opts.collectReport = func(context.Context) (*capability.Report, error) { return &capability.Report{}, nil }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	sock := <-listening
	c := testutil.UnixHTTPClient(sock)

	// Settled comes once every source has spoken.
	<-settled
	// Ready is never True before the sources have spoken: its first
	// transition on Out is not True.
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "Ready" {
			if f[2] == "True" {
				t.Errorf("first Ready transition on Out is True, before the sources spoke: %q", l)
			}
			break
		}
	}
	for _, cond := range getStatus(t, c).Conditions {
		if cond.Reason == condition.ReasonNotStarted {
			t.Errorf("settled while %s is %s", cond.Type, cond.Reason)
		}
	}

	// A second shim on the node is refused and told who holds the lock.
	err := Run(context.Background(), opts)
	var held *lock.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Fatalf("second Run = %v, want HeldError naming pid %d", err, os.Getpid())
	}

	// The sources start on their own goroutines: wait until each has
	// reported (a source that never does shows as the test's timeout).
	wantTypes := []string{"ConfigHealthy", "PluginsReady", "NetworkReady", "Ready"}
	hasAll := func(d status.Document) bool {
		for _, want := range wantTypes {
			if !slices.ContainsFunc(d.Conditions, func(c condition.Condition) bool { return c.Type == want }) {
				return false
			}
		}
		return true
	}
	d := waitStatus(t, c, func(d status.Document) bool { return d.Config != nil && hasAll(d) })

	resp, err := c.Get("http://nodeshim/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `nodeshim_condition{status="True",type="ConfigHealthy"} 1`) {
		t.Errorf("/metrics = %d:\n%s", resp.StatusCode, body)
	}

	// Good, bad, good again: NodeConfigStatus follows.
	writeSource(t, opts.ConfigSource, "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\ncheckpoint: {defaultTimeout: 2m}\n")
	d = waitStatus(t, c, func(d status.Document) bool { return d.Config.Active != nil && d.Config.Error == "" })
	good := d.Config.Active.UID
	writeSource(t, opts.ConfigSource, "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nfeatureGatez: {A: true}\n")
	d = waitStatus(t, c, func(d status.Document) bool { return d.Config.Error != "" })
	if d.Config.Active != nil || d.Config.Assigned == nil || d.Config.Assigned.UID == good {
		// Not soaked yet: the rollback goes to the local defaults.
		t.Errorf("bad config: %+v", d.Config)
	}
	writeSource(t, opts.ConfigSource, "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\ncheckpoint: {defaultTimeout: 2m}\n")
	d = waitStatus(t, c, func(d status.Document) bool { return d.Config.Error == "" && d.Config.Active != nil })
	if d.Config.Active.UID != good {
		t.Errorf("good again: active %s, want %s", d.Config.Active.UID, good)
	}
	if !strings.Contains(out.String(), "ConfigHealthy False ConfigRolledBack") {
		t.Errorf("transition lines lack the rollback:\n%s", out.String())
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after shutdown: %v", err)
	}
	l, err := lock.Acquire(opts.LockFile, lock.Options{})
	if err != nil {
		t.Fatalf("lock not released: %v", err)
	}
	l.Release()
}
