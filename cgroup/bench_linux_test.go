package cgroup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// BenchmarkScan is one full stats pass over 1,000 pod cgroups: nodeshim's
// Reader beside containerd's cgroup2 Stat(), in the same binary.
func BenchmarkScan(b *testing.B) {
	const n = 1000
	trees := []struct {
		name  string
		build func(*testing.B, int) (string, []string)
	}{{"synthetic-tmpfs", syntheticTree}, {"real-cgroup2", realTree}}
	for _, tr := range trees {
		b.Run(tr.name, func(b *testing.B) {
			root, groups := tr.build(b, n)
			b.Run("nodeshim", func(b *testing.B) {
				r := NewReader()
				var s Stats
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					for _, g := range groups {
						if err := r.Read(root+g, StatAll, &s); err != nil {
							b.Fatal(err)
						}
					}
				}
				reportPerCgroup(b, n, cpu)
			})
			b.Run("containerd-Stat", func(b *testing.B) {
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
				reportPerCgroup(b, n, cpu)
			})
		})
	}
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
func BenchmarkDetectionLatency(b *testing.B) {
	m, err := FindMount("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var mode WatchMode
	var fromStart, fromStall []time.Duration
	for i := 0; b.Loop(); i++ {
		d, s, md := detectOnce(b, m, i)
		fromStart, fromStall = append(fromStart, d), append(fromStall, s)
		mode = md
	}
	reportLatency(b, "release", fromStart, mode)
	reportLatency(b, "stall", fromStall, mode)
}

// reportLatency reports the p50 and p99 of lat, measured from the given start.
func reportLatency(b *testing.B, from string, lat []time.Duration, mode WatchMode) {
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms-from-"+from)
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms-from-"+from)
	b.Logf("%s mode, %d runs, from %s: p50 %s p99 %s max %s", mode, len(lat), from, pct(0.50), pct(0.99), lat[len(lat)-1])
}

// detectOnce thrashes a new cgroup and times the first event from the
// thrasher's release and from the cgroup's first stall.
func detectOnce(b *testing.B, m Mount, i int) (time.Duration, time.Duration, WatchMode) {
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
	w, err := NewWatcher(filepath.Join(v2, "memory.pressure"), DefaultTrigger, WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.StopTimer()
	th := newThrasher(b, 96<<20)
	for _, d := range enter {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(fmt.Sprint(th.pid())), 0); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var first time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx, nil, func(e PressureEvent) {
			if first.IsZero() {
				first = e.Time
			}
			cancel()
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
	return first.Sub(start), first.Sub(stall), w.Mode()
}
