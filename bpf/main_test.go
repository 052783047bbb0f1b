package bpf

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// workloadEnv makes the test binary act as a workload instead of running the
// tests: "sysinfo N" waits for a line on stdin, then calls sysinfo(2) N
// times; "tree N M" waits, starts a child that calls sysinfo M times, waits
// for it, then calls sysinfo N times itself; the tracefs modes are
// runTracefsChildMode's.
const workloadEnv = "NODESHIM_BPF_TEST_WORKLOAD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(workloadEnv); mode != "" {
		os.Exit(runWorkload(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func runWorkload(mode string, args []string) int {
	n := func(i int) int {
		v, err := strconv.Atoi(args[i])
		if err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(2)
		}
		return v
	}
	sysinfo := func(times int) {
		var si unix.Sysinfo_t
		for range times {
			if err := unix.Sysinfo(&si); err != nil {
				fmt.Fprintln(os.Stderr, "sysinfo:", err)
				os.Exit(1)
			}
		}
	}
	switch mode {
	case "sysinfo", "tree", "hog", "filter-exec":
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "workload: read go signal:", err)
			return 1
		}
	}
	switch mode {
	case "sysinfo", "sysinfo-now":
		sysinfo(n(0))
	case "tree":
		child := exec.Command(os.Args[0], args[1])
		child.Env = append(os.Environ(), workloadEnv+"=sysinfo-now")
		child.Stderr = os.Stderr
		if err := child.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "workload: child:", err)
			return 1
		}
		sysinfo(n(0))
	case "hog":
		hog(n(0))
	case "filter-exec":
		return filterExec(args)
	case childWatchWithoutTracefs, childReportWithoutTracefs, childMountUnprivileged:
		return runTracefsChildMode(mode)
	default:
		fmt.Fprintln(os.Stderr, "workload: unknown mode", mode)
		return 2
	}
	return 0
}

// hog maps and touches anonymous memory, 1 MiB at a time and keeping all
// of it, until the OOM killer ends it; it gives up with exit status 3 after
// limitMiB, which the caller's cgroup limit must stay well below.
func hog(limitMiB int) {
	var keep [][]byte
	for range limitMiB {
		b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hog: mmap:", err)
			os.Exit(1)
		}
		for off := 0; off < len(b); off += os.Getpagesize() {
			b[off] = 1
		}
		keep = append(keep, b)
	}
	fmt.Fprintf(os.Stderr, "hog: still alive with %d MiB\n", len(keep))
	os.Exit(3)
}

// workloadCommand returns the test binary as a workload in the given mode.
func workloadCommand(mode string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), workloadEnv+"="+mode)
	cmd.Stderr = os.Stderr
	return cmd
}
