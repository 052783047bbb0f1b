package criu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/testutil"
	"github.com/nodeshim/nodeshim/internal/testworkload"
)

// The test binary doubles as the workloads it checkpoints: started with
// envWorkload set, TestMain runs the workload instead of the tests.
const (
	envWorkload    = "NODESHIM_CRIU_TEST_WORKLOAD"
	envWorkloadDir = "NODESHIM_CRIU_TEST_DIR"
	envWorkloadMiB = "NODESHIM_CRIU_TEST_MIB"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envWorkload) {
	case "":
	case "count":
		testworkload.RunCounter(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB), false)
		return
	case "count-tcp":
		testworkload.RunCounter(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB), true)
		return
	case "checkpoint":
		runCheckpointer(os.Getenv(envWorkloadDir))
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown workload %q\n", os.Getenv(envWorkload))
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// startWorkload starts the test binary as workload kind, detached (setsid
// -f forks, so the workload's parent exits and init reaps it: its pid is
// free again once it is killed, as CRIU's restore needs), and returns its
// pid and directory. The workload is killed when the test ends.
func startWorkload(t testing.TB, kind string, mib int) (int, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("setsid", "-f", os.Args[0])
	cmd.Env = append(os.Environ(), envWorkload+"="+kind, envWorkloadDir+"="+dir, envWorkloadMiB+"="+strconv.Itoa(mib))
	// No pipes: the workload would hold them open and Run would wait.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := cmd.Run(); err != nil {
		t.Fatalf("start workload %s: %v", kind, err)
	}
	var pid int
	deadline := time.Now().Add(180 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil && len(b) > 0 {
			pid, err = strconv.Atoi(string(b))
			if err != nil {
				t.Fatalf("workload pid file: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload %s did not start", kind)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { killAndWait(t, pid) })
	return pid, dir
}

// killAndWait kills pid and waits until it is gone (reaping it if it is
// our child, as a restored tree is).
func killAndWait(t testing.TB, pid int) {
	t.Helper()
	_ = unix.Kill(pid, unix.SIGKILL)
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	for i := 0; i < 500; i++ {
		st, err := ReadProcState("/proc", pid)
		if errors.Is(err, ErrNoProcess) {
			return
		}
		if err == nil && st.Gone() {
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("pid %d did not go away after SIGKILL", pid)
}

// counts returns the counts the counter workload in dir has logged.
func counts(t testing.TB, dir string) []int {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			continue // a line being written
		}
		out = append(out, n)
	}
	return out
}

// waitCount waits until the counter in dir has logged more than n lines.
func waitCount(t testing.TB, dir string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := counts(t, dir)
		if len(c) > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter in %s stuck at %d lines, want more than %d", dir, len(c), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireCriu gates a test on root and a criu that passes `criu check`.
func requireCriu(t testing.TB) Binary {
	t.Helper()
	testutil.RequireRoot(t)
	b, err := Find("", nil)
	if err != nil {
		testutil.Skip(t, "no criu (run `make criu-tools`): %v", err)
	}
	if _, err := b.Check(t.Context()); err != nil {
		testutil.Skip(t, "%v", err)
	}
	return b
}

// assertRunning checks that pid runs on, unfrozen and untraced, and that
// the counter in dir still counts.
func assertRunning(t *testing.T, pid int, dir string) {
	t.Helper()
	st, err := ReadProcState("/proc", pid)
	if err != nil {
		t.Fatalf("target after checkpoint: %v", err)
	}
	if st.Gone() || st.Stopped() || st.TracerPid != 0 {
		t.Fatalf("target pid %d after checkpoint: %s", pid, st)
	}
	if dir != "" {
		n := len(counts(t, dir))
		waitCount(t, dir, n+3)
	}
}

// runCheckpointer checkpoints the pid in dir/target into the root dir in
// dir/root, writing dir/dumping once CRIU has written its first bytes; the
// test SIGKILLs it then.
func runCheckpointer(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "target"))
	if err != nil {
		os.Exit(6)
	}
	pid, _ := strconv.Atoi(string(b))
	bin, err := Find("", nil)
	if err != nil {
		os.Exit(6)
	}
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		os.Exit(6)
	}
	var once bool
	_, err = Checkpoint(context.Background(), tg, Options{
		Binary: bin, RootDir: filepath.Join(dir, "root"), ProgressInterval: 5 * time.Millisecond,
		Progress: func(p Progress) {
			if !once && p.Phase == "dumping" && p.Bytes > 0 {
				once = true
				_ = os.WriteFile(filepath.Join(dir, "dumping"), nil, 0o600)
			}
		},
	})
	if err != nil {
		os.Exit(7)
	}
	os.Exit(0)
}
