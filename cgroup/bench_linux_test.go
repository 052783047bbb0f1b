package cgroup

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// syntheticTree copies the recorded burstable pod's container cgroup into n
// pod cgroups under a tmpfs root (/dev/shm when present), the shape of a
// node with n single-container pods.
func syntheticTree(b *testing.B, n int) (root string, groups []string) {
	b.Helper()
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	root, err := os.MkdirTemp(base, "nodeshim-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	src := filepath.Join("testdata", "unified", "kubepods", "burstable", "pod5f0e8b7c-3a1d-4f2e-9c61-2b8d7e4a1f09")
	entries, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.Type().IsRegular() {
			files[e.Name()], _ = os.ReadFile(filepath.Join(src, e.Name()))
		}
	}
	for i := range n {
		g := fmt.Sprintf("/kubepods/burstable/pod%08d-0000-4000-8000-000000000000", i)
		dir := root + g
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		groups = append(groups, g)
	}
	return root, groups
}

// realTree creates n empty cgroups in this host's cgroup2 hierarchy.
func realTree(b *testing.B, n int) (root string, groups []string) {
	b.Helper()
	m, err := FindMount("/proc")
	if err != nil {
		b.Fatal(err)
	}
	parent := fmt.Sprintf("/nodeshim-bench-%d", os.Getpid())
	if err := os.Mkdir(m.Path+parent, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		g := fmt.Sprintf("%s/pod%d", parent, i)
		if err := os.Mkdir(m.Path+g, 0o755); err != nil {
			b.Fatal(err)
		}
		groups = append(groups, g)
	}
	b.Cleanup(func() {
		for _, g := range groups {
			_ = os.Remove(m.Path + g)
		}
		_ = os.Remove(m.Path + parent)
	})
	return m.Path, groups
}

// BenchmarkScan is one full stats pass over n pod cgroups (100, 1,000 and
// 10,000): nodeshim's Reader keeping files open ("keep"), the Reader that
// opens every file ("open"), containerd's cgroup2 Stat(), and the floor of
// one pread(2) of one small kept-open file (cgroup.controllers) per cgroup,
// in the same binary on the same tree.
func BenchmarkScan(b *testing.B) {
	trees := []struct {
		name  string
		build func(*testing.B, int) (string, []string)
	}{{"synthetic-tmpfs", syntheticTree}, {"real-cgroup2", realTree}}
	for _, tr := range trees {
		for _, n := range []int{100, 1000, 3000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", tr.name, n), func(b *testing.B) {
				root, groups := tr.build(b, n)
				dirs := make([]string, len(groups))
				for i, g := range groups {
					dirs[i] = root + g
				}
				b.Run("keep", func(b *testing.B) {
					r := NewKeepReader(KeepOptions{MaxFiles: fdBound()})
					defer r.Close()
					slab := unreclaimableSlab(b)
					benchReader(b, r, dirs, StatAll)
					k := r.Keeping()
					b.ReportMetric(float64(k.Groups), "kept-cgroups")
					b.ReportMetric(float64(k.Files), "kept-files")
					// The kernel memory the kept files hold (seq_file
					// buffers, open-file structures); other work on the
					// machine moves this figure too.
					b.ReportMetric(float64(unreclaimableSlab(b)-slab)/float64(max(k.Files, 1)), "slab-B/kept-file")
				})
				// The groups ReadPodUsage reads on a cgroup v2 node:
				// what the status model shows of a pod.
				b.Run("keep-pod-stats", func(b *testing.B) {
					r := NewKeepReader(KeepOptions{MaxFiles: fdBound()})
					defer r.Close()
					benchReader(b, r, dirs, podStats)
				})
				b.Run("open", func(b *testing.B) { benchReader(b, NewReader(), dirs, StatAll) })
				b.Run("containerd-Stat", func(b *testing.B) { benchContainerdStat(b, root, groups) })
				if fds := openStatFiles(b, dirs); fds != nil {
					// The kernel's floor for the pass: a bare pread of every
					// file Read reads, kept open, without parsing.
					b.Run("pread-files", func(b *testing.B) { benchPreads(b, fds, 8192, n) })
				}
				b.Run("pread-floor", func(b *testing.B) {
					fds := make([]int, 0, len(dirs))
					for _, d := range dirs {
						fd, err := unix.Open(filepath.Join(d, "cgroup.controllers"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
						if err != nil {
							for _, fd := range fds {
								_ = unix.Close(fd)
							}
							b.Fatal(err)
						}
						fds = append(fds, fd)
					}
					benchPreads(b, fds, 4096, n)
				})
			})
		}
	}
}

// benchContainerdStat times containerd's cgroup2 Load and Stat of each
// of groups (paths below the cgroup2 mount root), per cgroup.
func benchContainerdStat(b *testing.B, root string, groups []string) {
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		for _, g := range groups {
			cg, err := cgroup2.Load(g, cgroup2.WithMountpoint(root))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cg.Stat(); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPerCgroup(b, len(groups), cpu)
}

// benchPreads times a bare pread(2) at offset 0 of every file in fds, with
// a buffer of bufSize bytes, per cgroup of n; it closes fds.
func benchPreads(b *testing.B, fds []int, bufSize, n int) {
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	buf := make([]byte, bufSize)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		for _, fd := range fds {
			if _, err := unix.Pread(fd, buf, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPerCgroup(b, n, cpu)
}

// fdBound is the bound on kept files that only the open-files limit sets
// (three quarters of its soft limit), so that the scan benchmarks measure
// the kept-open path as far as the process may take it rather than at
// DefaultMaxKeptFiles.
func fdBound() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur >= 1<<30 {
		return 1 << 20
	}
	return int(rl.Cur / 4 * 3)
}

// openStatFiles opens each of the files Read reads that exists in dirs, or
// returns nil when they are more than a Reader would keep open.
func openStatFiles(b *testing.B, dirs []string) []int {
	limit := fdBound()
	var fds []int
	for _, d := range dirs {
		for _, name := range []cname{fMemoryCurrent, fMemoryMax, fMemoryStat, fMemoryEvents, fPidsCurrent, fPidsMax,
			fCPUStat, fIOStat, fPressure[0], fPressure[1], fPressure[2]} {
			fd, err := unix.Open(filepath.Join(d, name.s), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			fds = append(fds, fd)
			if len(fds) > limit {
				for _, fd := range fds {
					_ = unix.Close(fd)
				}
				return nil
			}
		}
	}
	return fds
}

// unreclaimableSlab is SUnreclaim of /proc/meminfo in bytes.
func unreclaimableSlab(b *testing.B) int64 { return meminfo(b, "SUnreclaim") }

// meminfo is the field of /proc/meminfo in bytes.
func meminfo(b *testing.B, field string) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/meminfo", field)
	return 0
}

// benchReader times passes of r over dirs; a Reader that keeps files open
// has them open from a first pass before the timing starts, as it has in
// a long-running shim.
func benchReader(b *testing.B, r *Reader, dirs []string, mask Mask) {
	var s Stats
	pass := func() {
		for _, d := range dirs {
			if err := r.Read(d, mask, &s); err != nil {
				b.Fatal(err)
			}
		}
		r.EndPass()
	}
	pass()
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		pass()
	}
	reportPerCgroup(b, len(dirs), cpu)
}

// cpuTime is the process's user+system CPU time so far. On a shared
// machine the CPU time per cgroup is steadier than the wall time, which
// includes waiting for a core.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportPerCgroup(b *testing.B, n int, cpuStart time.Duration) {
	per := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per/1000, "us/cgroup")
	b.ReportMetric(float64((cpuTime()-cpuStart).Nanoseconds())/per/1000, "cpu-us/cgroup")
}

// BenchmarkDetectionLatency measures, per iteration, the time from the
// start of thrashing in a fresh cgroup to the first pressure event, and
// reports the p50 and p99 over the iterations (run with -benchtime=Nx).
//
// "watcher" times the Watcher's own event. The "monitor" cases time the
// event where a Monitor's consumer receives it, with pod cgroups present
// and read (ReadPodUsage) as the pressure source reads them:
//   - "inline": from the Monitor's evaluation, at most every 10 s, each
//     file opened per read (the source before it read pods in the
//     background); an event that arrives during the read waits for it;
//   - "background": in a goroutine of their own, pass after pass (the
//     worst case of the source's reads every PodInterval), with kept-open
//     files.
func BenchmarkDetectionLatency(b *testing.B) {
	m, err := FindMount("/proc")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("watcher", func(b *testing.B) { benchDetection(b, m, watching{}, nil) })
	b.Run("monitor/pods=0", func(b *testing.B) { benchDetection(b, m, watching{}, &podLoad{}) })
	const pods = 10000
	roots := PodRoots{V2: m.Path, Parent: podTree(b, m, pods, "")}
	b.Run(fmt.Sprintf("monitor/pods=%d/inline", pods), func(b *testing.B) {
		benchDetection(b, m, watching{}, &podLoad{roots: roots, reader: NewReader(), want: pods, every: 10 * time.Second})
	})
	b.Run(fmt.Sprintf("monitor/pods=%d/background", pods), func(b *testing.B) {
		benchDetectionBesidePods(b, m, watching{}, roots, pods)
	})
}

// benchDetectionBesidePods times a Monitor's detection (benchDetection)
// while the want pods under roots are read in a goroutine of
// their own, pass after pass, with kept-open files: the pressure source's
// reads of the pods at their worst.
func benchDetectionBesidePods(b *testing.B, m Mount, how watching, roots PodRoots, want int) WatchMode {
	l := &podLoad{roots: roots, reader: NewKeepReader(KeepOptions{}), want: want}
	defer l.reader.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l.read(b)
		}
	}()
	defer func() { cancel(); <-done }()
	return benchDetection(b, m, how, nil, l)
}

// podLoad is the read of the pods' cgroups beside a Monitor.
type podLoad struct {
	roots  PodRoots
	reader *Reader
	want   int
	// every, when set, makes the Monitor's evaluation read the pods at
	// most this often.
	every time.Duration
	last  time.Time
	// passes and took sum the reads' count and duration.
	passes atomic.Int64
	took   atomic.Int64
}

func (l *podLoad) evaluate(b *testing.B) {
	if l.every > 0 && time.Since(l.last) >= l.every {
		l.last = time.Now()
		l.read(b)
	}
}

func (l *podLoad) read(b *testing.B) {
	start := time.Now()
	_, pods, err := ReadPodUsage(l.roots, l.reader)
	l.took.Add(int64(time.Since(start)))
	l.passes.Add(1)
	if err != nil || len(pods) != l.want {
		b.Errorf("read pods: %d pods, %v", len(pods), err)
	}
}

// benchDetection times detectOnce through a Watcher (load nil) or a
// Monitor, watching as how says, and returns the mode the watching took;
// loads that run beside it are only reported on.
func benchDetection(b *testing.B, m Mount, how watching, load *podLoad, beside ...*podLoad) WatchMode {
	var mode WatchMode
	var fromStart, fromStall, stalled []time.Duration
	for i := 0; b.Loop(); i++ {
		monitored := load
		if monitored == nil && len(beside) > 0 {
			monitored = &podLoad{}
		}
		d := detectOnce(b, m, i, how, monitored)
		fromStart, fromStall, stalled = append(fromStart, d.fromRelease), append(fromStall, d.fromStall), append(stalled, d.stalled)
		mode = d.mode
	}
	var runs strings.Builder
	for i := range fromStall {
		fmt.Fprintf(&runs, " %d/%d", fromStall[i].Milliseconds(), stalled[i].Milliseconds())
	}
	b.Logf("each run, ms from the first stall / ms of stall at the event:%s", runs.String())
	reportLatency(b, "release", fromStart, mode)
	reportLatency(b, "stall", fromStall, mode)
	// The stall the cgroup had accumulated when the event came: the
	// trigger's 150 ms at least; what the latency from the first stall
	// adds to it is the time the cgroup ran instead of stalling.
	slices.Sort(stalled)
	b.ReportMetric(float64(stalled[len(stalled)/2].Milliseconds()), "p50-ms-stalled-at-event")
	for _, l := range append(beside, load) {
		if l != nil && l.passes.Load() > 0 {
			b.ReportMetric(float64(time.Duration(l.took.Load()).Milliseconds())/float64(l.passes.Load()), "ms/pod-pass")
			b.ReportMetric(float64(l.passes.Load()), "pod-passes")
		}
	}
	return mode
}

// podTree creates n pod cgroups (cgroupfs naming, burstable) in the
// cgroup2 hierarchy and returns the cgroup under which their kubepods is.
// With controllers (e.g. "+cpu +io +memory +pids") it enables them for
// the pods as kubelet does on a cgroup v2 node: each pod then has its
// memory.*, cpu.*, io.* and pids.* files, and is a memory cgroup of its own.
func podTree(b *testing.B, m Mount, n int, controllers string) string {
	parent := fmt.Sprintf("/nodeshim-lat-pods-%d", os.Getpid())
	qos := filepath.Join(m.Path, parent, "kubepods", "burstable")
	if err := os.MkdirAll(qos, 0o755); err != nil {
		b.Fatal(err)
	}
	if controllers != "" {
		for _, d := range []string{filepath.Join(m.Path, parent), filepath.Dir(qos), qos} {
			if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(controllers), 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	var dirs []string
	b.Cleanup(func() {
		for _, d := range dirs {
			_ = os.Remove(d)
		}
		_ = os.Remove(qos)
		_ = os.Remove(filepath.Dir(qos))
		_ = os.Remove(filepath.Join(m.Path, parent))
	})
	for i := range n {
		d := filepath.Join(qos, fmt.Sprintf("pod%08d-0000-4000-8000-000000000000", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return parent
}

// reportLatency reports the p50, p90, p99 and max of lat, measured from
// the given start.
func reportLatency(b *testing.B, from string, lat []time.Duration, mode WatchMode) {
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms-from-"+from)
	b.ReportMetric(float64(pct(0.90).Milliseconds()), "p90-ms-from-"+from)
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms-from-"+from)
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms-from-"+from)
	b.Logf("%s mode, %d runs, from %s: p50 %s p90 %s p99 %s max %s", mode, len(lat), from, pct(0.50), pct(0.90), pct(0.99), lat[len(lat)-1])
}

// watching is how a detection benchmark watches the thrashing cgroup.
type watching struct {
	// trig is the trigger; DefaultTrigger when zero.
	trig Trigger
	opts WatchOptions
}

// detection is one timed detection.
type detection struct {
	// fromRelease and fromStall are the time to the first event from the
	// thrasher's release and from the cgroup's first stall.
	fromRelease, fromStall time.Duration
	// stalled is the cgroup's some stall from the release to the event.
	stalled time.Duration
	mode    WatchMode
}

// detectOnce thrashes a new cgroup and times the first event: the
// Watcher's event when load is nil, else the event as a Monitor's
// consumer receives it, with load read at every evaluation; either
// watches as how says.
func detectOnce(b *testing.B, m Mount, i int, how watching, load *podLoad) detection {
	name := fmt.Sprintf("nodeshim-lat-%d-%d", os.Getpid(), i)
	var dirs []string
	defer func() {
		for j := len(dirs) - 1; j >= 0; j-- {
			_ = os.Remove(dirs[j])
		}
	}()
	mk := func(d string) {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	v2 := filepath.Join(m.Path, name)
	var enter []string
	if m.Mode == Hybrid {
		v1 := filepath.Join(v1Memory, name)
		mk(v1)
		if err := os.WriteFile(filepath.Join(v1, "memory.limit_in_bytes"), []byte("32M"), 0); err != nil {
			b.Fatal(err)
		}
		enter = append(enter, v1)
	}
	if m.Mode == Unified {
		// memory.max exists in a child only with the controller delegated.
		if err := os.WriteFile(filepath.Join(m.Path, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			b.Fatal(err)
		}
	}
	mk(v2)
	if m.Mode == Unified {
		if err := os.WriteFile(filepath.Join(v2, "memory.max"), []byte("32M"), 0); err != nil {
			b.Fatal(err)
		}
	}
	enter = append(enter, v2)
	pressure := filepath.Join(v2, "memory.pressure")
	var w *Watcher
	var mon *Monitor
	var err error
	if load == nil {
		w, err = NewWatcher(pressure, cmp.Or(how.trig, DefaultTrigger), how.opts)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
	} else {
		mon, err = NewMonitor(MonitorConfig{
			Sources:    NodeSources{ProcRoot: "/proc", CgroupRoot: m.Path, KubeletRoot: b.TempDir()},
			Trigger:    how.trig,
			Watch:      how.opts,
			WatchPaths: []string{pressure},
			OnEvaluate: func(Snapshot) { load.evaluate(b) },
		})
		if err != nil {
			b.Fatal(err)
		}
		defer mon.Close()
	}
	b.StopTimer()
	th := newMemoryStaller(b, v2, 96<<20)
	for _, d := range enter {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(fmt.Sprint(th.pid())), 0); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 256)
	base, err := readTotal(pressure, false, buf)
	if err != nil {
		b.Fatal(err)
	}
	var atEvent uint64
	ctx, cancel := context.WithCancel(context.Background())
	var first time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		if w != nil {
			_ = w.Run(ctx, nil, func(e PressureEvent) {
				if first.IsZero() {
					first = e.Time
					atEvent, _ = readTotal(pressure, false, buf)
				}
				cancel()
			})
			return
		}
		_ = mon.Run(ctx, func(PressureEvent) {
			if first.IsZero() {
				first = time.Now()
				atEvent, _ = readTotal(pressure, false, buf)
				cancel()
			}
		})
	}()
	onsetCtx, stopOnset := context.WithCancel(context.Background())
	defer stopOnset()
	onset := stallOnset(onsetCtx, filepath.Join(v2, "memory.pressure"))
	b.StartTimer()
	start := time.Now()
	th.begin(b)
	<-done
	stall, ok := <-onset
	th.stop(b)
	if first.IsZero() || !ok {
		b.Fatal("no event or no stall seen")
	}
	d := detection{fromRelease: first.Sub(start), fromStall: first.Sub(stall), stalled: time.Duration(atEvent-base) * time.Microsecond}
	if w != nil {
		d.mode = w.Mode()
	} else {
		d.mode = mon.Watchers()[0].Mode
	}
	return d
}

// BenchmarkReadPodUsage is the pressure source's pods pass, discovery
// included, over 10,000 pod cgroups in this host's cgroup2 hierarchy.
func BenchmarkReadPodUsage(b *testing.B) {
	m, err := FindMount("/proc")
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	roots := PodRoots{V2: m.Path, Parent: podTree(b, m, n, "")}
	for _, rd := range []struct {
		name string
		new  func() *Reader
	}{{"open", NewReader}, {"keep", func() *Reader { return NewKeepReader(KeepOptions{}) }}} {
		b.Run(rd.name, func(b *testing.B) {
			r := rd.new()
			defer r.Close()
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if _, pods, err := ReadPodUsage(roots, r); err != nil || len(pods) != n {
					b.Fatalf("%d pods, %v", len(pods), err)
				}
			}
			reportPerCgroup(b, n, cpu)
		})
	}
}
