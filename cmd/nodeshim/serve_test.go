package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestServeEndToEnd runs the real binary: serve, query every endpoint over
// the socket and through `nodeshim status`, move the configuration source
// through good, bad and good again, then SIGTERM and check the cleanup.
func TestServeEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	gobin := testutil.RequireBinary(t, "go")
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodeshim")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root, lockFile, source := filepath.Join(dir, "root"), filepath.Join(dir, "nodeshim.lock"), filepath.Join(dir, "source")
	serve := exec.Command(bin, "serve", "--root-dir", root, "--lock-file", lockFile, "--config-source", source, "--host-root", filepath.Join(dir, "host"), "--proc-root", "/proc")
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var transitions strings.Builder
	copied := make(chan struct{})
	go func() { io.Copy(&transitions, stdout); close(copied) }()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()

	sock := filepath.Join(root, "nodeshim.sock")
	c := testutil.UnixHTTPClient(sock)
	// The socket's file exists from bind(2), before the API listens on
	// it: wait for an answer, not for the file.
	testutil.Eventually(t, "nodeshim serve answers on "+sock, func() error {
		resp, err := c.Get("http://nodeshim/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	get := func(path string) (int, string) {
		resp, err := c.Get("http://nodeshim" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d %s", code, body)
	}
	if code, _ := get("/readyz"); code != 200 && code != 503 {
		t.Errorf("/readyz = %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "nodeshim_condition") || !strings.Contains(body, "nodeshim_oom_watcher_attached") {
		t.Errorf("/metrics = %d", code)
	}
	if code, body := get("/report"); code != 200 || !strings.Contains(body, `"kind": "KernelReport"`) {
		t.Errorf("/report = %d %.200s", code, body)
	}
	resp, err := c.Post("http://nodeshim/checkpoint/default/web-0/app", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("POST /checkpoint with checkpoints off by default = %d, want 404", resp.StatusCode)
	}
	statusJSON := func() status.Document {
		out, err := exec.Command(bin, "status", "--root-dir", root, "-o", "json").Output()
		if err != nil {
			t.Fatalf("nodeshim status: %v", err)
		}
		var d status.Document
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatalf("decode %s: %v", out, err)
		}
		return d
	}
	wait := func(ok func(status.Document) bool) status.Document {
		for {
			if d := statusJSON(); d.Config != nil && ok(d) {
				return d
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if out, err := exec.Command(bin, "status", "--root-dir", root).Output(); err != nil || !strings.Contains(string(out), "ConfigHealthy") {
		t.Errorf("nodeshim status table: %v\n%s", err, out)
	}

	write := func(body string) {
		os.MkdirAll(source, 0o755)
		tmp := filepath.Join(source, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(source, "config.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\ncheckpoint: {defaultTimeout: 2m}\n")
	d := wait(func(d status.Document) bool { return d.Config.Active != nil && d.Config.Error == "" })
	good := d.Config.Active.UID
	write("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nnope: 1\n")
	wait(func(d status.Document) bool {
		return d.Config.Error != "" && d.Config.Assigned != nil && d.Config.Assigned.UID != good
	})
	write("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\ncheckpoint: {defaultTimeout: 2m}\n")
	wait(func(d status.Document) bool {
		return d.Config.Error == "" && d.Config.Active != nil && d.Config.Active.UID == good
	})

	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-copied
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left: %v", err)
	}
	l, err := lock.Acquire(lockFile, lock.Options{})
	if err != nil {
		t.Fatalf("lock not released: %v", err)
	}
	l.Release()
	out := transitions.String()
	if !strings.Contains(out, "ConfigHealthy False ConfigRolledBack") {
		t.Errorf("transition lines:\n%s", out)
	}
	// The capability report comes first, then one line per transition.
	if !strings.HasPrefix(out, "KERNEL ") || strings.Index(out, "KernelReportSucceeded True") < strings.Index(out, "requirements:") {
		t.Errorf("stdout does not start with the capability report:\n%.2000s", out)
	}
	for _, line := range []string{" OOMWatcherReady True Attached ", " PressureMonitorReady True Watching ", " MemoryPressure "} {
		if !strings.Contains(out, line) {
			t.Errorf("no transition line with %q", line)
		}
	}
}
