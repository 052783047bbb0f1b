package cgroup

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// ErrNoV1Hierarchy is returned when no cgroup v1 hierarchy binds a
// controller (a pure v2 node; class errdefs.ErrNotFound).
var ErrNoV1Hierarchy = errdefs.New(errdefs.ErrNotFound, "no cgroup v1 hierarchy for the controller")

// FindV1Mount returns where the cgroup v1 hierarchy that binds controller
// (e.g. "memory") is mounted, from procRoot/self/mountinfo. On a hybrid
// node the pods' memory cgroups live there, not in the cgroup2 mount.
func FindV1Mount(procRoot, controller string) (string, error) {
	path := filepath.Join(procRoot, "self", "mountinfo")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	p, err := ParseV1Mount(data, controller)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParseV1Mount finds in a mountinfo file's contents the mount point of the
// v1 hierarchy whose super options name controller; the first mount of the
// hierarchy's root ("/") wins, as in ParseMountinfo.
func ParseV1Mount(data []byte, controller string) (string, error) {
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.FSType != "cgroup" || e.Root != "/" {
			continue
		}
		for _, o := range e.SuperOptions {
			if o == controller {
				return e.Point, nil
			}
		}
	}
	return "", fmt.Errorf("%s: %w", controller, ErrNoV1Hierarchy)
}

// MemoryV1 is a cgroup v1 memory cgroup's use (memory.usage_in_bytes,
// memory.limit_in_bytes, memory.stat's hierarchical total_* counters,
// memory.failcnt and memory.oom_control). Err is non-nil, wrapping
// ErrMissing, ErrVanished or ErrMalformed, when the values are unknown.
type MemoryV1 struct {
	Err   error
	Usage uint64
	// Limit is memory.limit_in_bytes; Unlimited when the kernel's
	// "no limit" value (PAGE_COUNTER_MAX pages, rounded) is set.
	Limit                        Limit
	RSS, Cache, InactiveFile     uint64
	FailCount, OOMKill, UnderOOM uint64
}

// WorkingSet is kubelet's working set from v1 figures: usage minus
// total_inactive_file, floored at zero (cAdvisor's v1 computation).
func (m MemoryV1) WorkingSet() uint64 {
	if m.InactiveFile > m.Usage {
		return 0
	}
	return m.Usage - m.InactiveFile
}

// v1Unlimited is the smallest memory.limit_in_bytes value that means no
// limit: the kernel prints PAGE_COUNTER_MAX * PAGE_SIZE, which is
// LONG_MAX rounded down to a page (9223372036854771712 with 4 KiB pages).
const v1Unlimited = 1 << 62

var (
	fMemV1Usage = newCname("memory.usage_in_bytes")
	fMemV1Limit = newCname("memory.limit_in_bytes")
	fMemV1Stat  = newCname("memory.stat")
	fMemV1Fail  = newCname("memory.failcnt")
	fMemV1OOM   = newCname("memory.oom_control")
)

// ReadMemoryV1 reads the v1 memory cgroup directory dir. It returns an
// error (wrapping ErrVanished when the cgroup is gone) only when the
// directory cannot be opened; a file that cannot be read sets out.Err.
func (r *Reader) ReadMemoryV1(dir string) (MemoryV1, error) {
	fd, err := openDir(dir)
	if err != nil {
		return MemoryV1{}, err
	}
	defer closeFd(fd)
	var m MemoryV1
	if m.Usage, err = r.readUint(fd, dir, fMemV1Usage); err != nil {
		return MemoryV1{Err: err}, nil
	}
	lim, err := r.readUint(fd, dir, fMemV1Limit)
	if err != nil {
		return MemoryV1{Err: err}, nil
	}
	m.Limit = Limit{Value: lim, Unlimited: lim >= v1Unlimited}
	if m.Limit.Unlimited {
		m.Limit.Value = 0
	}
	if m.FailCount, err = r.readUint(fd, dir, fMemV1Fail); err != nil {
		return MemoryV1{Err: err}, nil
	}
	err = r.readKV(fd, dir, fMemV1Stat, func(k []byte, v uint64) {
		switch string(k) {
		case "total_rss":
			m.RSS = v
		case "total_cache":
			m.Cache = v
		case "total_inactive_file":
			m.InactiveFile = v
		}
	})
	if err != nil {
		return MemoryV1{Err: err}, nil
	}
	err = r.readKV(fd, dir, fMemV1OOM, func(k []byte, v uint64) {
		switch string(k) {
		case "oom_kill":
			m.OOMKill = v
		case "under_oom":
			m.UnderOOM = v
		}
	})
	if err != nil {
		return MemoryV1{Err: err}, nil
	}
	return m, nil
}
