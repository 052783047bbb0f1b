// Package cgroup reads a node's cgroup v2 facts and turns them into the
// pressure conditions kubelet reports, detected through PSI as pressure
// happens instead of on a 10 s loop.
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
// Signals follow kubelet (signals.go): memory.available from /proc/meminfo
// and the root memory.stat, allocatableMemory.available from kubepods,
// nodefs/imagefs by statfs, pid.available from pid_max, threads-max and
// /proc/loadavg. Thresholds use kubelet's --eviction-hard syntax with its
// defaults (threshold.go); the Evaluator sets MemoryPressure, DiskPressure
// and PIDPressure at once and clears them after a transition period on an
// injected clock (conditions.go). PSI views give MemoryContentionFree and
// IOContentionFree with a severity (psiview.go).
//
// A Watcher arms a PSI trigger and waits for POLLPRI, or, where the kernel
// refuses triggers, polls the file's total and applies the trigger's
// window itself (watch.go, watch_linux.go). A Monitor combines all of it
// and emits an event stream of transitions (monitor_linux.go). Nothing here
// speaks HTTP or holds a Kubernetes client.
package cgroup
