// Package downtime measures, from the host, how long a moved workload
// stopped: the benchmarks that move a container or a pod from one node to
// another (cmd/nodeshim's BenchmarkDowntime, e2e/migration's
// BenchmarkPodMigrationDowntime) run the same workload and watch it the
// same way.
//
// The workload (Script) is a busybox shell that holds a working set of
// anonymous memory and counts in /count every 20 ms. A Watcher reads that
// counter through /proc/PID/root/count every 5 ms, for each node's
// process (a Source: a runtime's pidfile, or the counting process found in
// a node's cgroup tree), with the host's clock: a container's own clock
// (its /proc/uptime) showed gaps across a move shorter than the restore
// alone. Freeze and Resumed read the readings afterwards: the freeze is
// the start of the counter's longest pause on the first node, the end of
// the downtime its first advance on the second.
//
// Root and MoveContainer move a container between two podman storage
// roots on this machine (podman's own container migration: checkpoint
// --export, restore --import), the baseline both benchmarks compare with.
package downtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// script is the workload: a busybox shell that holds its working set (%d
// bytes) as a shell variable (anonymous memory, which CRIU dumps page by
// page) and then counts in /count every 20 ms. The working set is random
// bytes (the shell cannot hold NULs: tr maps them), so that a compressed
// archive (podman's zstd) is not smaller than the memory it holds just
// because the memory is all the same byte. The loop never forks: it waits
// with read's timeout on a pipe from a sleep that never writes, because a
// dump that catches a forked child before its exec dumps the working set
// twice.
const script = `sleep 2147483647 | {
x=$(head -c %d /dev/urandom | tr '\000' a); i=0
while :; do i=$((i+1)); echo $i > /count; read -t 0.02 z; done; }`

// Script is the workload's `sh -c` script for a working set of mib MiB.
func Script(mib int) string { return fmt.Sprintf(script, int64(mib)<<20) }

// CountFile is where the workload counts, in its root.
const CountFile = "count"

// Interval is how often a Watcher reads the counters.
const Interval = 5 * time.Millisecond

// Anon is the anonymous memory (RssAnon) of the processes pids, in bytes,
// read from proc (the host's /proc). A process gone meanwhile counts 0.
func Anon(proc string, pids ...int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		path := filepath.Join(proc, strconv.Itoa(pid), "status")
		status, err := os.ReadFile(path)
		if err != nil {
			continue // it exited
		}
		for l := range strings.SplitSeq(string(status), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "RssAnon:" {
				kb, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: %q: %w", path, l, err)
				}
				sum += kb << 10
			}
		}
	}
	return sum, nil
}

// TreeAnon is the anonymous memory of pid and its descendants, in bytes.
func TreeAnon(proc string, pid int) (int64, error) {
	if _, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid))); err != nil {
		return 0, err
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		// /proc/PID/task/TID/children lists the children of that thread;
		// the workload's processes are single-threaded.
		p := strconv.Itoa(tree[i])
		children, err := os.ReadFile(filepath.Join(proc, p, "task", p, "children"))
		if err != nil {
			continue // it exited
		}
		for _, c := range strings.Fields(string(children)) {
			if n, err := strconv.Atoi(c); err == nil {
				tree = append(tree, n)
			}
		}
	}
	return Anon(proc, tree...)
}

// Counting returns the processes of the cgroup tree at dir (a cgroup
// directory and everything below it) whose root holds the workload's
// counter, lowest pid first: the workload's processes, and not, say, a
// pod's pause process. A tree that does not exist holds none.
func Counting(proc, dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			// A cgroup removed while walked.
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if d.Name() != "cgroup.procs" {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(raw)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%s: %q is not a pid", path, f)
			}
			if _, err := os.Stat(filepath.Join(proc, f, "root", CountFile)); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	slices.Sort(pids)
	return slices.Compact(pids), err
}

// CgroupDir is the directory of the cgroup root (a path such as kubelet's
// cgroupRoot, "/nsrt-1/kubelet") under the cgroup mount at sys
// (/sys/fs/cgroup): in the v1 pids hierarchy when the host has one (a
// hybrid or v1 layout), else in the unified one.
func CgroupDir(sys, root string) string {
	if fi, err := os.Stat(filepath.Join(sys, "pids")); err == nil && fi.IsDir() {
		return filepath.Join(sys, "pids", root)
	}
	return filepath.Join(sys, root)
}

// Source names the process whose counter a Watcher reads: its pid now,
// or 0 while there is none.
type Source func() int

// PIDFile is the process whose pid the file at path holds: a runtime's
// pidfile, which a restore elsewhere may rewrite at the same path.
func PIDFile(path string) Source {
	return func() int {
		raw, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			return 0
		}
		return pid
	}
}

// InCgroup is a counting process of the cgroup tree at dir (Counting):
// the first one found, kept while its root holds the counter. Only the
// Watcher's goroutine calls it.
func InCgroup(proc, dir string) Source {
	var pid int
	return func() int {
		if pid != 0 {
			if _, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid), "root", CountFile)); err == nil {
				return pid
			}
			pid = 0
		}
		if pids, err := Counting(proc, dir); err == nil && len(pids) > 0 {
			pid = pids[0]
		}
		return pid
	}
}

// Reading is one advance of a counter a Watcher saw: the first reading
// of a process, or a count above its last.
type Reading struct {
	// At is when it was read, by the host's clock.
	At time.Time
	// Source is the index of the Source that named the process, PID
	// the process.
	Source, PID int
	// N is the count.
	N int
}

// Watcher reads the workload's counter of each of its sources every
// Interval, and notes each advance.
type Watcher struct {
	proc    string
	sources []Source
	stop    chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	readings []Reading
}

// Watch starts a Watcher of sources, reading through proc (the host's
// /proc); Stop ends it.
func Watch(proc string, sources ...Source) *Watcher {
	w := &Watcher{proc: proc, sources: sources, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Watcher) run() {
	defer close(w.done)
	last := map[int]int{}
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		for i, src := range w.sources {
			pid := src()
			if pid == 0 {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(w.proc, strconv.Itoa(pid), "root", CountFile))
			if err != nil {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if err != nil {
				continue // read while the shell rewrote it
			}
			if prev, ok := last[pid]; !ok || n > prev {
				last[pid] = n
				w.mu.Lock()
				w.readings = append(w.readings, Reading{At: time.Now(), Source: i, PID: pid, N: n})
				w.mu.Unlock()
			}
		}
	}
}

// Readings returns what w has seen so far.
func (w *Watcher) Readings() []Reading {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.readings)
}

// Stop ends w and returns every reading; it may be called again.
func (w *Watcher) Stop() []Reading {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.Readings()
}

// Freeze returns the reading before the counter's longest pause on the
// first node (the readings on says are its) between from and to: the
// last count before the freeze, within one count and one poll. A counter
// stopped for good (podman stops a container it checkpoints) froze at its
// last reading when its silence from there until to is longer than any
// pause.
func Freeze(rs []Reading, on func(Reading) bool, from, to time.Time) (Reading, bool) {
	var freeze, prev Reading
	var longest time.Duration
	for _, r := range rs {
		if !on(r) {
			continue
		}
		if !prev.At.IsZero() && r.At.After(from) && prev.At.Before(to) && r.At.Sub(prev.At) > longest {
			longest, freeze = r.At.Sub(prev.At), prev
		}
		prev = r
	}
	if !prev.At.IsZero() && to.Sub(prev.At) > longest {
		freeze = prev
	}
	return freeze, !freeze.At.IsZero()
}

// Resumed returns the first reading off the first node (the readings on
// does not claim) and the first there whose count is above n: for a
// restored counter, the count in the checkpoint and its first advance
// after the restore.
func Resumed(rs []Reading, on func(Reading) bool, n int) (first, resumed Reading, ok bool) {
	for _, r := range rs {
		if on(r) {
			continue
		}
		if first.At.IsZero() {
			first = r
		}
		if r.N > n {
			return first, r, true
		}
	}
	return first, Reading{}, false
}

// OnSource says whether a reading is of the source with index i.
func OnSource(i int) func(Reading) bool { return func(r Reading) bool { return r.Source == i } }

// OnPID says whether a reading is of the process pid.
func OnPID(pid int) func(Reading) bool { return func(r Reading) bool { return r.PID == pid } }

// Sizes returns the working sets, in MiB, that the environment variable
// env lists ("64,1024"), or def when it is unset or empty.
func Sizes(env string, def ...int) ([]int, error) {
	s := os.Getenv(env)
	if s == "" {
		return def, nil
	}
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || mib <= 0 {
			return nil, fmt.Errorf("%s=%q: %q is not a size in MiB", env, s, f)
		}
		sizes = append(sizes, mib)
	}
	return sizes, nil
}
