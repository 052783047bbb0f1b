package cgroup_test

import (
	"fmt"
	"testing"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
)

// benchCgroupStats loads the kernel pass with the running kernel's HZ.
func benchCgroupStats(b *testing.B) *bpf.CgroupStats {
	c, err := bpf.OpenCgroupStats(bpf.CgroupStatsOptions{HZ: kernelHZ(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkScanKernelPass is one pass over n cgroups (100 to 10,000) in
// this host's cgroup2 hierarchy, for the figures the BPF cgroup iterator
// reads (the three PSI files, memory.current, memory.max and
// memory.events' oom_kill where the memory controller is on): the
// iterator ("kernel-pass"), nodeshim's Reader reading the same files kept
// open ("keep-files"), and containerd's cgroup2 Stat() on the same tree,
// the row's baseline.
func BenchmarkScanKernelPass(b *testing.B) {
	c := benchCgroupStats(b)
	for _, n := range []int{100, 1000, 3000, 10000} {
		b.Run(fmt.Sprintf("real-cgroup2/n=%d", n), func(b *testing.B) {
			root, groups := cgroup.RealTreeForTest(b, n)
			parent := root + groups[0][:len(groups[0])-len("/pod0")]
			b.Run("kernel-pass", func(b *testing.B) {
				var sum uint64
				seen := 0
				pass := func() {
					seen = 0
					if err := c.Pass(parent, 1, func(s *cgroup.PassStats) {
						seen++
						sum += s.Pressure[0].PSI.Some.Total + s.Memory.Current
					}); err != nil {
						b.Fatal(err)
					}
				}
				pass() // the map grows to the tree first, as in a long-running shim
				if seen != n+1 {
					b.Fatalf("pass saw %d cgroups, want %d", seen, n+1)
				}
				b.ReportAllocs()
				cpu := cgroup.CPUTimeForTest()
				for b.Loop() {
					pass()
				}
				cgroup.ReportForTest(b, n, cpu)
			})
			b.Run("keep-files", func(b *testing.B) {
				r := cgroup.NewKeepReader(cgroup.KeepOptions{MaxFiles: 1 << 20})
				defer r.Close()
				var st cgroup.Stats
				pass := func() {
					for _, g := range groups {
						if err := r.Read(root+g, cgroup.StatPressure|cgroup.StatMemory|cgroup.StatMemoryEvents, &st); err != nil {
							b.Fatal(err)
						}
					}
					r.EndPass()
				}
				pass()
				b.ReportAllocs()
				cpu := cgroup.CPUTimeForTest()
				for b.Loop() {
					pass()
				}
				cgroup.ReportForTest(b, n, cpu)
				b.ReportMetric(float64(r.Keeping().Groups), "kept-cgroups")
			})
			b.Run("containerd-Stat", func(b *testing.B) { cgroup.BenchContainerdStatForTest(b, root, groups) })
		})
	}
}

// BenchmarkReadPodUsageKernelPass is the pressure source's pods pass over
// 10,000 pod cgroups in this host's cgroup2 hierarchy, discovery included,
// with the kernel pass and with kept-open files alone.
func BenchmarkReadPodUsageKernelPass(b *testing.B) {
	m, err := cgroup.FindMount("/proc")
	if err != nil {
		b.Fatal(err)
	}
	c := benchCgroupStats(b)
	const n = 10000
	roots := cgroup.PodRoots{V2: m.Path, Parent: cgroup.PodTreeForTest(b, m, n, "")}
	for _, rd := range []struct {
		name string
		pass cgroup.PassSource
	}{{"keep", nil}, {"keep-pass", c}} {
		b.Run(rd.name, func(b *testing.B) {
			r := cgroup.NewKeepReader(cgroup.KeepOptions{})
			r.SetPass(rd.pass)
			defer r.Close()
			b.ReportAllocs()
			cpu := cgroup.CPUTimeForTest()
			for b.Loop() {
				tree, pods, err := cgroup.ReadPodUsage(roots, r)
				if err != nil || len(pods) != n || tree.PassErr != nil {
					b.Fatalf("%d pods, %v, pass %v", len(pods), err, tree.PassErr)
				}
			}
			cgroup.ReportForTest(b, n, cpu)
		})
	}
}
