// Package cgroup reads a node's cgroup v2 facts: its layout, per-cgroup
// stats and PSI, and the amounts kubelet's eviction signals are computed
// from, read again as soon as PSI says pressure happens instead of on a
// 10 s loop. What they mean for the node (thresholds, conditions) is
// package eviction's.
//
// It owns the cgroup layout of a mount table, for nodeshim and for the
// kernel report: where cgroup2 and each v1 controller are mounted and the
// mode (unified, hybrid, legacy) that follows (layout.go). It finds the
// node's cgroup2 mount in /proc/self/mountinfo under an injected proc root
// (mount.go) or by statfs under a sysfs root (sysfs_linux.go), the kubepods
// tree with cgroupfs or systemd naming (pods.go), and reads per-cgroup
// memory, memory.events, pids, cpu.stat, io.stat and PSI with a reused
// buffer (stats.go). containerd's cgroup2 reader is the reference the tests
// and benchmarks compare against; it is not used on the hot path because it
// reports a missing file as 0 (memory usage at the root, every memory value
// where the controller is not enabled) and reads more than a pass needs.
// Every value that cannot be read carries an error wrapping ErrMissing,
// ErrVanished or ErrMalformed instead of a zero.
//
// The available amounts follow kubelet's signals (available.go): memory
// from /proc/meminfo and the root memory.stat, allocatable memory from
// kubepods, nodefs/imagefs by statfs, process ids from pid_max,
// threads-max and /proc/loadavg.
//
// A Watcher arms a PSI trigger and waits for POLLPRI, or, where the kernel
// refuses triggers, polls the file's total and applies the trigger's
// window itself (watch.go, watch_linux.go). A Monitor reads the available
// amounts and the node's PSI at an interval and at every pressure event,
// and hands each snapshot to its caller (monitor_linux.go). Nothing here
// speaks HTTP, holds a Kubernetes client or builds a condition.
package cgroup
