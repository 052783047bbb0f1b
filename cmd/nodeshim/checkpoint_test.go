package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// runSplit runs nodeshim with args and returns stdout and stderr apart.
func runSplit(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestCheckpointUsage(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{"no target", []string{"checkpoint"}, exitUsage, "give --pid"},
		{"both targets", []string{"checkpoint", "--pid", "1", "--container-id", "c"}, exitUsage, "exclude each other"},
		{"a pid and a pod", []string{"checkpoint", "--pid", "1", "--pod", "p"}, exitUsage, "--pid does not apply to a pod checkpoint"},
		{"a pod needs its namespace", []string{"checkpoint", "--pod", "p"}, exitUsage, "a pod needs --namespace and --pod"},
		{"a container needs its pod", []string{"checkpoint", "--namespace", "ns", "--container", "c"}, exitUsage, "all of --namespace, --pod and --container"},
		{"a pod without a daemon names the socket", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--socket", "/nonexistent/nodeshim.sock"}, exitFailure, "/nonexistent/nodeshim.sock"},
		{"container flags exclude pid-only flags", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--container", "c", "--root-dir", "/srv"}, exitUsage, "--root-dir applies to --pid only"},
		{"container without a daemon names the socket", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--container", "c", "--socket", "/nonexistent/nodeshim.sock"}, exitFailure, "/nonexistent/nodeshim.sock"},
		{"image needs its file", []string{"checkpoint", "--pid", "1", "--image", "localhost/x:1"}, exitUsage, "--image REF and --image-file FILE go together"},
		{"image file needs a name", []string{"checkpoint", "--pid", "1", "--image-file", "/tmp/x.tar"}, exitUsage, "go together"},
		{"image file must not exist", []string{"checkpoint", "--pid", "1", "--image", "localhost/x:1", "--image-file", "/"}, exitUsage, "--image-file / exists"},
		{"image file must not exist, by its older flag", []string{"checkpoint", "--pid", "1", "--image", "localhost/x:1", "--image-output", "/"}, exitUsage, "--image-file / exists"},
		{"lazy needs a pid", []string{"checkpoint", "--container-id", "x", "--lazy", "127.0.0.1:27000"}, exitUsage, "--lazy applies to --pid"},
		{"lazy needs HOST:PORT", []string{"checkpoint", "--pid", "1", "--lazy", "27000"}, exitUsage, "page server"},
		{"pre-dump rounds are not negative", []string{"checkpoint", "--pid", "1", "--pre-dump", "-1"}, exitUsage, "--pre-dump -1: want 0 to 8 rounds"},
		{"pre-dump rounds are bounded", []string{"checkpoint", "--pid", "1", "--pre-dump", "9"}, exitUsage, "--pre-dump 9: want 0 to 8 rounds"},
		{"pre-dump excludes lazy", []string{"checkpoint", "--pid", "1", "--pre-dump", "2", "--lazy", "127.0.0.1:27000"}, exitUsage, "--pre-dump and --lazy exclude each other"},
		{"pre-dump needs a pid or podman container", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--container", "c", "--pre-dump", "1"}, exitUsage, "--pre-dump applies to --pid and --container-id"},
		{"pre-dump does not apply to a pod", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--pre-dump", "1"}, exitUsage, "--pre-dump does not apply to a pod checkpoint"},
		{"restore needs an archive", []string{"restore"}, exitFailure, "accepts 1 arg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSplit(t, tc.args...)
			if err == nil {
				t.Fatal("succeeded")
			}
			code := exitFailure
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
			}
			if code != tc.wantCode || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %v (exit %d), want exit %d with %q", err, code, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestCheckpointRestoreCLI checkpoints a detached sleep through the CLI,
// stops it, restores it from the printed archive and finds it under its
// original pid.
func TestCheckpointRestoreCLI(t *testing.T) {
	testutil.RequireRoot(t)
	criutest.Require(t)
	dir := t.TempDir()
	pid := startSleep(t)

	out, _, err := runSplit(t, "checkpoint", "--pid", strconv.Itoa(pid), "--root-dir", dir, "--timeout", "1m", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res checkpointOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	fi, err := os.Stat(res.Path)
	if err != nil || fi.Size() != res.SizeBytes || res.Pid != pid || res.TotalSeconds <= 0 || res.FrozenSeconds <= 0 {
		t.Fatalf("checkpoint output %+v; archive: %v", res, err)
	}
	if filepath.Dir(res.Path) != filepath.Join(dir, "checkpoints") {
		t.Errorf("archive %s not under --root-dir", res.Path)
	}
	// checkpoint prune looks where checkpoint wrote, with the same
	// --root-dir, and keeps a lone archive.
	out, _, err = runSplit(t, "checkpoint", "prune", "--root-dir", dir, "--dry-run", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var pruned retention.Result
	if err := json.Unmarshal([]byte(out), &pruned); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(pruned.Kept) != 1 || pruned.Kept[0].Name != filepath.Base(res.Path) || len(pruned.Removed) != 0 {
		t.Errorf("checkpoint prune --root-dir %s --dry-run: %s, want %s kept", dir, out, filepath.Base(res.Path))
	}
	stop(t, pid)

	out, _, err = runSplit(t, "restore", "--root-dir", dir, res.Path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || got != pid {
		t.Fatalf("restore printed %q, want the original pid %d", out, pid)
	}
	if b, err := os.ReadFile(filepath.Join("/proc", out[:len(out)-1], "comm")); err != nil || strings.TrimSpace(string(b)) != "sleep" {
		t.Errorf("restored pid %d is %q, %v", pid, b, err)
	}
}

// stop kills pid and waits until it is gone, reaping it if it is our child.
func stop(t testing.TB, pid int) {
	t.Helper()
	_ = unix.Kill(pid, unix.SIGKILL)
	waitGone(t, pid)
}

// waitGone waits until pid is gone, reaping it if it is our child: a
// killed process stays as a zombie until its parent reaps it, and its pid
// is not free before.
func waitGone(t testing.TB, pid int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("pid %d is gone", pid), func() error {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill(%d, 0): %v", pid, err)
		}
		return nil
	})
}

// TestRestoreByEngine: an archive of a CRI container is refused before any
// CRIU or runtime runs, naming its engine; an invalid one too.
func TestRestoreByEngine(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, files map[string]string) string {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: "checkpoint/", Typeflag: tar.TypeDir, Mode: 0o700}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"checkpoint/inventory.img", "config.dump", "spec.dump"} {
			body := files[n]
			if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{"containerd-without-image", map[string]string{"config.dump": `{"name":"counter","runtime":"cri"}`,
			"spec.dump": `{"annotations":{"io.kubernetes.cri.container-type":"container"}}`}, "config.dump names no image"},
		{"cri-o", map[string]string{"config.dump": `{"name":"app"}`,
			"spec.dump": `{"annotations":{"io.container.manager":"cri-o"}}`}, "archive of engine cri-o"},
		{"unknown", map[string]string{"config.dump": `{}`, "spec.dump": `{}`}, "archive of engine unknown"},
		{"bad-spec", map[string]string{"config.dump": `{}`, "spec.dump": `[`}, "invalid checkpoint archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSplit(t, "restore", "--criu-path", "/bin/true", write(tc.name+".tar", tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// TestLazyMigrationCLI moves a counting shell, the init of its own PID
// namespace (so that the restore on this host gets a new one while the
// original waits, frozen, for its memory to be fetched), with `checkpoint
// --lazy` and `restore --lazy-from`: the original goes, the restored one
// counts on.
func TestLazyMigrationCLI(t *testing.T) {
	testutil.RequireRoot(t)
	criutest.Require(t)
	testutil.RequireFile(t, "/proc/sys/vm/unprivileged_userfaultfd") // CONFIG_USERFAULTFD
	unshare := testutil.RequireBinary(t, "unshare")
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	sh := exec.Command(unshare, "--pid", "--fork", "setsid", "sh", "-c",
		`x=$(head -c 8388608 /dev/zero | tr '\000' a); i=0; while :; do i=$((i+1)); echo $i > "$0"; sleep 0.02; done`, count)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	readCount := func() int {
		b, _ := os.ReadFile(count)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	var pid int
	testutil.Eventually(t, "the counting shell runs and has counted to 3", func() error {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sh.Process.Pid, sh.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, _ = strconv.Atoi(f[0])
		}
		if n := readCount(); pid == 0 || n < 3 {
			return fmt.Errorf("pid %d, count %d", pid, n)
		}
		return nil
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	type result struct {
		out string
		err error
	}
	ck := make(chan result, 1)
	go func() {
		out, _, err := runSplit(t, "checkpoint", "--pid", strconv.Itoa(pid), "--root-dir", dir, "--lazy", addr, "--timeout", "2m", "-o", "json")
		ck <- result{out, err}
	}()
	// The archive is published while the page server waits.
	var archive string
	for archive == "" {
		select {
		case r := <-ck:
			t.Fatalf("checkpoint --lazy returned before a restore fetched the memory: %v: %s", r.err, r.out)
		case <-time.After(20 * time.Millisecond):
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "checkpoint-*.tar")); len(m) == 1 {
			archive = m[0]
		}
	}
	out, _, err := runSplit(t, "restore", "--root-dir", dir, "--lazy-from", addr, "-o", "json", archive)
	if err != nil {
		t.Fatal(err)
	}
	var rst restoreOutput
	if err := json.Unmarshal([]byte(out), &rst); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	t.Cleanup(func() { stop(t, rst.Pid) })
	r := <-ck
	if r.err != nil {
		t.Fatal(r.err)
	}
	var res checkpointOutput
	if err := json.Unmarshal([]byte(r.out), &res); err != nil {
		t.Fatalf("decode %q: %v", r.out, err)
	}
	if res.Path != archive || res.ServeSeconds <= 0 || res.FrozenSeconds <= 0 {
		t.Errorf("checkpoint --lazy output %+v, want archive %s and serve and frozen times", res, archive)
	}
	// The original is killed when its memory is fetched; it is gone once
	// unshare, its parent, has reaped it.
	waitGone(t, pid)
	before := readCount()
	testutil.Eventually(t, fmt.Sprintf("the restored tree (pid %d) counts past %d", rst.Pid, before), func() error {
		if n := readCount(); n <= before {
			return fmt.Errorf("it counts %d", n)
		}
		return nil
	})
	t.Logf("frozen %.3fs, archive %d bytes, served %.3fs; restore running after %.3fs, memory fetched %.3fs later",
		res.FrozenSeconds, res.SizeBytes, res.ServeSeconds, rst.UnpackSeconds+rst.RestoreSeconds, rst.FetchSeconds)
}
