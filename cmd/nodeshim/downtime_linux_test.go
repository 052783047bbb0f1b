package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// downtimeScript is the benchmarked container: a busybox shell that holds
// its working set (%d bytes) as a shell variable (anonymous memory, which
// CRIU dumps page by page) and then counts in /count every 20 ms. The
// working set is random bytes (the shell cannot hold NULs: tr maps them),
// so that podman's compressed archive is not smaller than the memory it
// holds just because the memory is all the same byte. The loop never
// forks: it waits with read's timeout on a pipe from a sleep that never
// writes, because a dump that catches a forked child before its exec
// dumps the working set twice.
const downtimeScript = `sleep 2147483647 | {
x=$(head -c %d /dev/urandom | tr '\000' a); i=0
while :; do i=$((i+1)); echo $i > /count; read -t 0.02 z; done; }`

// treeAnon is the anonymous memory (RssAnon) of pid and its descendants,
// in bytes.
func treeAnon(pid string) (int64, error) {
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "RssAnon:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%s/status: %q: %w", pid, l, err)
			}
			sum += kb << 10
		}
	}
	children, err := os.ReadFile(filepath.Join("/proc", pid, "task", pid, "children"))
	if err != nil {
		return 0, err
	}
	for _, c := range strings.Fields(string(children)) {
		n, err := treeAnon(c)
		if err != nil {
			continue // it exited
		}
		sum += n
	}
	return sum, nil
}

// watcher follows a container's counter from the host, every 5 ms, by the
// runtime's pidfile (which podman's restore on B rewrites at the same
// path) and /proc/PID/root/count, and notes when the counter moved under
// which pid. The host's clock, not the container's: the container's own
// /proc/uptime showed gaps across a move shorter than the restore alone.
type watcher struct {
	pidfile string
	stop    chan struct{}
	done    chan struct{}
	moves   []move
}

// move is one observed advance of the counter.
type move struct {
	at  time.Time
	pid string
	n   int
}

func watch(pidfile string) *watcher {
	w := &watcher{pidfile: pidfile, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		last := map[string]int{}
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			raw, err := os.ReadFile(w.pidfile)
			if err != nil {
				continue
			}
			pid := strings.TrimSpace(string(raw))
			tick, err := os.ReadFile(filepath.Join("/proc", pid, "root", "count"))
			if err != nil {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(string(tick)))
			if err != nil {
				continue
			}
			if prev, ok := last[pid]; !ok || n > prev {
				last[pid] = n
				w.moves = append(w.moves, move{at: time.Now(), pid: pid, n: n})
			}
		}
	}()
	return w
}

// downtime stops w and returns the time from the freeze on A (the start of
// the longest pause of A's counter between from and to, the checkpoint's
// start and end) to the first advance of the counter under B's pid, which
// is not aPid.
func (w *watcher) downtime(aPid string, from, to time.Time) (time.Duration, bool) {
	close(w.stop)
	<-w.done
	var freeze, prev time.Time
	var longest time.Duration
	for _, m := range w.moves {
		if m.pid != aPid {
			continue
		}
		if !prev.IsZero() && m.at.After(from) && prev.Before(to) && m.at.Sub(prev) > longest {
			longest, freeze = m.at.Sub(prev), prev
		}
		prev = m.at
	}
	// podman stops A's container: its counter's last pause never ends.
	if !prev.IsZero() && to.Sub(prev) > longest {
		freeze = prev
	}
	if freeze.IsZero() {
		return 0, false
	}
	seen := false
	for _, m := range w.moves {
		if m.pid == aPid {
			continue
		}
		// The first reading under B's pid is the count in the archive;
		// the next is B's own.
		if seen {
			return m.at.Sub(freeze), true
		}
		seen = true
	}
	return 0, false
}

// podmanStats is what `podman container checkpoint --print-stats` prints
// (durations in microseconds).
type podmanStats struct {
	Containers []struct {
		CRIU struct {
			FrozenTime int64 `json:"frozen_time"`
		} `json:"criu_statistics"`
	} `json:"container_statistics"`
}

// downtimeRun is one move of one container from node A to node B.
type downtimeRun struct {
	checkpoint, frozen, restore, downtime time.Duration
	archiveBytes                          int64
	anonBytes                             int64
}

// BenchmarkDowntime moves a busybox container holding a working set of
// anonymous memory from one podman storage root (node A) to another (node
// B), once checkpointed by `podman container checkpoint --export` and once
// by nodeshim, and restores each archive on B with `podman container
// restore --import`. Per move it reports the checkpoint's total and frozen
// time, the archive's size, the restore's time, and the downtime: from the
// counter's last advance before the freeze on A to its first advance on
// B, seen from the host (one 20 ms count and a 5 ms poll of resolution).
// NODESHIM_DOWNTIME_MIB lists the working sets (default "64,1024").
func BenchmarkDowntime(b *testing.B) {
	p := rt.Podman(b)
	// podman's runc finds CRIU on PATH.
	criutest.RequireOnPath(b)
	a := node{p: p}
	nodeB := secondNode(b, p)
	runc := p.RuntimePath(runtimetest.RuntimeRunc)

	sizes := []int{64, 1024}
	if s := os.Getenv("NODESHIM_DOWNTIME_MIB"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			mib, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || mib <= 0 {
				b.Fatalf("NODESHIM_DOWNTIME_MIB=%q: %q is not a size in MiB", s, f)
			}
			sizes = append(sizes, mib)
		}
	}
	seq := 0
	for _, mib := range sizes {
		for _, tool := range []string{"podman", "nodeshim"} {
			b.Run(fmt.Sprintf("%dMiB/%s", mib, tool), func(b *testing.B) {
				var sum downtimeRun
				for i := 0; i < b.N; i++ {
					seq++
					r := moveOnce(b, a, nodeB, runc, tool, fmt.Sprintf("downtime-%d", seq), mib)
					sum.checkpoint += r.checkpoint
					sum.frozen += r.frozen
					sum.restore += r.restore
					sum.downtime += r.downtime
					sum.archiveBytes += r.archiveBytes
					sum.anonBytes += r.anonBytes
				}
				n := float64(b.N)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
				mb := func(v int64) float64 { return float64(v) / (1 << 20) / n }
				b.ReportMetric(ms(sum.checkpoint), "checkpoint-ms")
				b.ReportMetric(ms(sum.frozen), "frozen-ms")
				b.ReportMetric(ms(sum.restore), "restore-ms")
				b.ReportMetric(ms(sum.downtime), "downtime-ms")
				b.ReportMetric(mb(sum.archiveBytes), "archive-MiB")
				b.ReportMetric(mb(sum.anonBytes), "anon-MiB")
			})
		}
	}
}

// moveOnce starts the container on a, checkpoints it with tool, removes it
// from a, restores the archive on nodeB and waits for it to tick there.
// Only the checkpoint and the restore are timed.
func moveOnce(b *testing.B, a, nodeB node, runc, tool, name string, mib int) downtimeRun {
	b.Helper()
	b.StopTimer()
	dir := b.TempDir()
	// conmon's and the runtime's pidfiles outside the run root: podman
	// 4.3's restore --import keeps the paths the archive names unless they
	// are under the new container's own run directory, and A's run root
	// is not on B.
	a.run(b, "--runtime", runc, "run", "--detach", "--network", "none", "--cgroup-parent", a.p.CgroupParent,
		"--conmon-pidfile", filepath.Join(dir, "conmon.pid"), "--pidfile", filepath.Join(dir, "pidfile"), "--name", name, runtimetest.BusyboxImage, "sh", "-c", fmt.Sprintf(downtimeScript, mib<<20))
	defer func() {
		_ = a.cmd("rm", "--force", "--time", "0", name).Run()
		_ = nodeB.cmd("rm", "--force", "--time", "0", name+"-b").Run()
	}()
	// Let it count a few times with its working set in place.
	before := a.waitCount(b, name, 5)
	var r downtimeRun
	pid := a.run(b, "inspect", "--format", "{{.State.Pid}}", name)
	w := watch(filepath.Join(dir, "pidfile"))
	var err error
	if r.anonBytes, err = treeAnon(pid); err != nil {
		b.Fatal(err)
	}
	if r.anonBytes < int64(mib)<<20 {
		b.Fatalf("container %s holds %d bytes of anonymous memory, below its %d MiB working set", name, r.anonBytes, mib)
	}

	archive := filepath.Join(dir, name+".tar")
	b.StartTimer()
	start := time.Now()
	start0 := start
	switch tool {
	case "podman":
		out := a.run(b, "container", "checkpoint", "--export", archive, "--print-stats", name)
		r.checkpoint = time.Since(start)
		var st podmanStats
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Containers) != 1 {
			b.Fatalf("podman checkpoint --print-stats: %v: %s", err, out)
		}
		r.frozen = time.Duration(st.Containers[0].CRIU.FrozenTime) * time.Microsecond
	case "nodeshim":
		out, errOut, err := runTB(b, "checkpoint", "--container-id", name, "--podman-root", a.p.Root, "--root-dir", dir, "-o", "json")
		r.checkpoint = time.Since(start)
		if err != nil {
			b.Fatalf("nodeshim checkpoint: %v: %s", err, errOut)
		}
		var ck checkpointOutput
		if err := json.Unmarshal([]byte(out), &ck); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		r.frozen = time.Duration(ck.FrozenSeconds * float64(time.Second))
		archive = ck.Path
	}
	b.StopTimer()
	end0 := time.Now()
	fi, err := os.Stat(archive)
	if err != nil {
		b.Fatal(err)
	}
	r.archiveBytes = fi.Size()
	// The move: A's container goes (nodeshim left it running), only the
	// archive crosses to B.
	a.run(b, "rm", "--force", "--time", "0", name)

	b.StartTimer()
	start = time.Now()
	// A new name gives the container a new ID and with it new paths on B
	// (under the old one podman reuses A's conmon pidfile path).
	nodeB.run(b, "--runtime", runc, "container", "restore", "--import", archive, "--name", name+"-b")
	r.restore = time.Since(start)
	b.StopTimer()

	after := nodeB.waitCount(b, name+"-b", before)
	nodeB.waitCount(b, name+"-b", after)
	d, ok := w.downtime(pid, start0, end0)
	if !ok {
		b.Fatalf("%s: the counter was not seen to stop on A and go on on B (%d moves seen)", name, len(w.moves))
	}
	r.downtime = d
	b.Logf("%s %s: %d MiB anonymous; count %d on A, %d on B; checkpoint %s (frozen %s), archive %d bytes, restore %s, downtime %s",
		tool, name, r.anonBytes>>20, before, after, r.checkpoint.Round(time.Millisecond), r.frozen.Round(time.Millisecond),
		r.archiveBytes, r.restore.Round(time.Millisecond), r.downtime)
	return r
}

// runTB runs nodeshim's root command in this process, like runSplit.
func runTB(tb testing.TB, args ...string) (string, string, error) {
	tb.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}
