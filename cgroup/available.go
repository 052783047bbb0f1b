package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Observation is an amount the node has available out of a capacity
// (bytes, inodes or process ids), or why it is unknown. Each of kubelet's
// eviction signals is one (package eviction names them).
type Observation struct {
	Available uint64
	Capacity  uint64
	// Err is non-nil when the amount is unknown; Available and Capacity are
	// then zero and mean nothing.
	Err error
	// Source names the files the value was computed from.
	Source string
}

// Known reports whether the observation has a value.
func (o Observation) Known() bool { return o.Err == nil }

// NodeSources names the inputs of the node's available amounts. Every path is injected
// so that the same code reads a host mounted under /host or a test tree.
type NodeSources struct {
	// ProcRoot is where procfs is mounted ("/proc").
	ProcRoot string
	// CgroupRoot is the cgroup2 mount (Mount.Path).
	CgroupRoot string
	// Kubepods is the kubepods cgroup directory; empty when the node has none
	// (allocatableMemory.available is then unknown).
	Kubepods string
	// KubeletRoot is kubelet's root dir ("/var/lib/kubelet"), whose
	// filesystem is nodefs.
	KubeletRoot string
	// ImageFsRoot is the container runtime's image store when it is on a
	// filesystem of its own; empty means imagefs is nodefs, as kubelet
	// treats a node without a dedicated image filesystem.
	ImageFsRoot string
}

// Meminfo holds the /proc/meminfo fields kubelet's memory signal needs, in bytes.
type Meminfo struct {
	MemTotal, MemFree, InactiveFile uint64
}

// ReadMeminfo reads procRoot/meminfo.
func ReadMeminfo(procRoot string) (Meminfo, error) {
	path := filepath.Join(procRoot, "meminfo")
	data, err := os.ReadFile(path)
	if err != nil {
		return Meminfo{}, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := ParseMeminfo(data)
	if err != nil {
		return Meminfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseMeminfo parses the fields of /proc/meminfo that Meminfo holds
// ("Key:   N kB" lines). MemTotal and MemFree are required.
func ParseMeminfo(data []byte) (Meminfo, error) {
	var m Meminfo
	var have int
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		k, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		var dst *uint64
		var bit int
		switch string(k) {
		case "MemTotal":
			dst, bit = &m.MemTotal, 1
		case "MemFree":
			dst, bit = &m.MemFree, 2
		case "Inactive(file)":
			dst, bit = &m.InactiveFile, 4
		default:
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return Meminfo{}, fmt.Errorf("line %q: %w", clip(line), ErrMalformed)
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 54)
		if err != nil {
			return Meminfo{}, fmt.Errorf("line %q: %w (%w)", clip(line), ErrMalformed, err)
		}
		*dst = v * 1024
		have |= bit
	}
	if have&3 != 3 {
		return Meminfo{}, fmt.Errorf("MemTotal or MemFree missing: %w", ErrMalformed)
	}
	return m, nil
}

// NodeMemory computes the node's memory.available as kubelet does on cgroup
// v2. The root cgroup has no memory.current, so (like runc's fs2 stats for
// the root, which cAdvisor hands to kubelet) usage is MemTotal - MemFree from
// /proc/meminfo; inactive_file comes from the root memory.stat, or from
// /proc/meminfo's Inactive(file) when the memory controller is not on cgroup2
// (a hybrid node). The working set is usage - inactive_file floored at 0, and
// memory.available = MemTotal - working set.
func NodeMemory(procRoot, cgroupRoot string, r *Reader) Observation {
	mi, err := ReadMeminfo(procRoot)
	if err != nil {
		return Observation{Err: err}
	}
	usage := mi.MemTotal - min(mi.MemFree, mi.MemTotal)
	inactive, source := mi.InactiveFile, "meminfo"
	fd, err := openDir(cgroupRoot)
	if err != nil {
		return Observation{Err: err}
	}
	defer closeFd(fd)
	seen := false
	err = r.readKV(fd, cgroupRoot, fMemoryStat, func(k []byte, v uint64) {
		if string(k) == "inactive_file" {
			inactive, seen = v, true
		}
	})
	switch {
	case err == nil && seen:
		source = "meminfo+memory.stat"
	case err != nil && !errors.Is(err, ErrMissing):
		return Observation{Err: err}
	}
	ws := uint64(0)
	if usage > inactive {
		ws = usage - inactive
	}
	return Observation{Available: mi.MemTotal - min(ws, mi.MemTotal), Capacity: mi.MemTotal, Source: source}
}

// AllocatableMemory computes allocatableMemory.available from the kubepods
// cgroup: its memory.max (kubelet sets it to the node's allocatable memory
// when it enforces node allocatable) minus its working set. When memory.max
// is "max", the capacity is MemTotal.
func AllocatableMemory(procRoot, kubepods string, r *Reader) Observation {
	if kubepods == "" {
		return Observation{Err: fmt.Errorf("no kubepods cgroup: %w", ErrMissing)}
	}
	var s Stats
	if err := r.Read(kubepods, StatMemory, &s); err != nil {
		return Observation{Err: err}
	}
	if s.Memory.Err != nil {
		return Observation{Err: s.Memory.Err}
	}
	capacity, source := s.Memory.Max.Value, "kubepods memory.max"
	if s.Memory.Max.Unlimited {
		mi, err := ReadMeminfo(procRoot)
		if err != nil {
			return Observation{Err: err}
		}
		capacity, source = mi.MemTotal, "meminfo MemTotal (kubepods memory.max is max)"
	}
	ws := s.Memory.WorkingSet()
	return Observation{Available: capacity - min(ws, capacity), Capacity: capacity, Source: source + ", kubepods working set"}
}

// PIDs computes pid.available as kubelet does (pkg/kubelet/stats/pidlimit):
// the task limit is min(kernel.pid_max, kernel.threads-max), lowered to the
// node cgroup's pids.max when nodeCgroup is given and limited; the tasks in
// use are the fourth field of /proc/loadavg ("running/total").
func PIDs(procRoot, nodeCgroup string, r *Reader) Observation {
	var limit uint64
	for _, name := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		path := filepath.Join(procRoot, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return Observation{Err: fmt.Errorf("read %s: %w", path, err)}
		}
		v, ok := parseUintLine(data)
		if !ok {
			return Observation{Err: fmt.Errorf("%s: %q: %w", path, clip(data), ErrMalformed)}
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	source := "pid_max, threads-max, loadavg"
	if nodeCgroup != "" {
		var s Stats
		if err := r.Read(nodeCgroup, StatPids, &s); err == nil && s.Pids.Err == nil && !s.Pids.Max.Unlimited && s.Pids.Max.Value < limit {
			limit, source = s.Pids.Max.Value, "pids.max of "+nodeCgroup+", loadavg"
		}
	}
	path := filepath.Join(procRoot, "loadavg")
	data, err := os.ReadFile(path)
	if err != nil {
		return Observation{Err: fmt.Errorf("read %s: %w", path, err)}
	}
	f := bytes.Fields(data)
	var total uint64
	ok := false
	if len(f) == 5 {
		if _, t, cut := bytes.Cut(f[3], []byte{'/'}); cut && len(t) > 0 && digits(t) == len(t) {
			total, ok = atou(t)
		}
	}
	if !ok {
		return Observation{Err: fmt.Errorf("%s: %q: %w", path, clip(data), ErrMalformed)}
	}
	return Observation{Available: limit - min(total, limit), Capacity: limit, Source: source}
}

// Available is what the node has available, each amount computed as
// kubelet computes the eviction signal of the same name
// (pkg/kubelet/eviction/helpers.go, makeSignalObservations).
type Available struct {
	// Memory is memory.available (NodeMemory).
	Memory Observation
	// AllocatableMemory is allocatableMemory.available (AllocatableMemory).
	AllocatableMemory Observation
	// NodeFs and NodeFsInodes are nodefs.available and nodefs.inodesFree:
	// the filesystem of kubelet's root dir.
	NodeFs, NodeFsInodes Observation
	// ImageFs and ImageFsInodes are imagefs.available and
	// imagefs.inodesFree: nodefs's when the image store has no filesystem
	// of its own.
	ImageFs, ImageFsInodes Observation
	// PIDs is pid.available (PIDs).
	PIDs Observation
}

// ReadAvailable computes every available amount of the node.
func ReadAvailable(src NodeSources, r *Reader) Available {
	a := Available{
		Memory:            NodeMemory(src.ProcRoot, src.CgroupRoot, r),
		AllocatableMemory: AllocatableMemory(src.ProcRoot, src.Kubepods, r),
		PIDs:              PIDs(src.ProcRoot, src.Kubepods, r),
	}
	a.NodeFs, a.NodeFsInodes = Filesystem(src.KubeletRoot)
	if src.ImageFsRoot == "" {
		a.ImageFs, a.ImageFsInodes = a.NodeFs, a.NodeFsInodes
	} else {
		a.ImageFs, a.ImageFsInodes = Filesystem(src.ImageFsRoot)
	}
	return a
}
