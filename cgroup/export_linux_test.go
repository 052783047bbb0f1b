package cgroup

// Test helpers for the external test package (cgroup_test), whose tests
// and benchmarks use the BPF cgroup iterator: package bpf imports cgroup,
// so only an external test package can import both.
var (
	RealTreeForTest            = realTree
	PodTreeForTest             = podTree
	CPUTimeForTest             = cpuTime
	ReportForTest              = reportPerCgroup
	BenchContainerdStatForTest = benchContainerdStat
)
