package testworkload

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The environment that makes a re-executed test binary a workload: its
// TestMain runs the workload named by EnvKind instead of the tests.
const (
	// EnvKind names the workload ("count", "count-tcp", or one of the
	// package's own).
	EnvKind = "NODESHIM_TEST_WORKLOAD"
	// EnvDir is the directory the workload writes its pid and log to.
	EnvDir = "NODESHIM_TEST_WORKLOAD_DIR"
	// EnvMiB is the memory, in MiB, a counter touches.
	EnvMiB = "NODESHIM_TEST_WORKLOAD_MIB"
)

// Start starts the test binary again as workload kind with mib MiB, through
// `setsid -f`: in a session of its own (CRIU dumps a tree only with its
// session leader) and not as the test's child, so that once killed it is
// reaped by init and its pid is free again, as CRIU's restore needs. It
// waits until the workload has written its pid (go test's -timeout bounds
// the wait), kills it when the test ends, and returns its pid and directory.
func Start(t testing.TB, kind string, mib int) (int, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("setsid", "-f", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvKind+"="+kind, EnvDir+"="+dir, EnvMiB+"="+strconv.Itoa(mib))
	// No pipes: the workload would hold them open and Run would wait.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := cmd.Run(); err != nil {
		t.Fatalf("start workload %s: %v", kind, err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatalf("workload %s pid file: %v", kind, err)
			}
			t.Cleanup(func() { Kill(t, pid) })
			return pid, dir
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procState is the state letter of pid (proc(5): R, S, T, Z, ...) and its
// tracer's pid; ok is false when there is no such process.
func procState(t testing.TB, pid int) (state byte, tracer int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if v != "" {
				state = v[0]
			}
		case "TracerPid":
			tracer, _ = strconv.Atoi(v)
		}
	}
	return state, tracer, true
}

// Kill kills pid and waits until it is gone, reaping it if it is the
// test's child (a restored tree is). go test's -timeout bounds the wait.
func Kill(t testing.TB, pid int) {
	t.Helper()
	_ = unix.Kill(pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if st, _, ok := procState(t, pid); !ok || st == 'X' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Counts returns the counts the counter in dir has logged.
func Counts(t testing.TB, dir string) []int {
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

// WaitCount waits until the counter in dir has logged more than n counts
// and returns them. go test's -timeout bounds the wait: a frozen or dead
// counter fails there.
func WaitCount(t testing.TB, dir string, n int) []int {
	t.Helper()
	for {
		if c := Counts(t, dir); len(c) > n {
			return c
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AssertRunning checks that pid runs on, neither stopped nor traced, and
// that the counter in dir, unless dir is "", still counts.
func AssertRunning(t testing.TB, pid int, dir string) {
	t.Helper()
	check := func() {
		st, tracer, ok := procState(t, pid)
		if !ok || st == 'Z' || st == 'X' || st == 'T' || st == 't' || tracer != 0 {
			t.Fatalf("workload %d: state %q (exists %v), tracer pid %d; want it running untraced", pid, st, ok, tracer)
		}
	}
	check()
	if dir != "" {
		WaitCount(t, dir, len(Counts(t, dir))+3)
		check()
	}
}
