package deploy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/clustertest"
)

// envThrash makes the test binary BenchmarkFootprint's memory-pressure
// workload instead of running tests: see thrashMain.
const envThrash = "NODESHIM_FOOTPRINT_THRASH"

// cluster is the package's single-node cluster (kubelet on this machine),
// started by the first test that asks for it and stopped once all ran.
var cluster clustertest.Env

func TestMain(m *testing.M) {
	if p := os.Getenv(envThrash); p != "" {
		os.Exit(thrashMain(p))
	}
	code := m.Run()
	if err := cluster.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// thrashMain waits for one byte on stdin (the parent moves it into its
// memory cgroup first), then faults random pages of the file at path, a
// mapping larger than its memory limit, from several threads: each fault
// risks a refault of a page just reclaimed, a memory stall that PSI
// accounts. A sequential read would not do: its refaults are farther apart
// than the workingset, so the kernel does not count them as thrashing.
// It runs until killed.
func thrashMain(path string) int {
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		fmt.Fprintln(os.Stderr, "wait for start:", err)
		return 2
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Faults do not release their P: more Ps than faulting threads.
	const threads = 4
	runtime.GOMAXPROCS(threads + 1)
	pages := len(m) / 4096
	var sum atomic.Uint32 // keeps the loads
	for range threads - 1 {
		go func() {
			for {
				sum.Add(uint32(m[rand.IntN(pages)*4096]))
			}
		}()
	}
	for {
		sum.Add(uint32(m[rand.IntN(pages)*4096]))
	}
}
