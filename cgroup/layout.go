package cgroup

import (
	"slices"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// DefaultMountPoint is where the kubelet and runc expect the cgroup
// hierarchy: cgroup2 on a unified node, a tmpfs of v1 hierarchies (with
// cgroup2 at DefaultMountPoint/unified) on a hybrid one.
const DefaultMountPoint = "/sys/fs/cgroup"

// The layouts a mount table can have beyond Unified and Hybrid; Mount,
// which needs a cgroup2 hierarchy, is never in these modes.
const (
	// Legacy: v1 hierarchies only.
	Legacy Mode = "legacy"
	// NoCgroups: no cgroup or cgroup2 filesystem is mounted.
	NoCgroups Mode = "none"
)

// v1Controllers are the cgroup v1 controller names that can appear in the
// super options of a cgroup mount (the other options there are mount
// options, and name= for a hierarchy that binds no controller).
var v1Controllers = []string{
	"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
}

// Layout is where a mount table puts the cgroup hierarchies: the node's
// cgroup2 mount and the v1 hierarchy of each controller bound to one.
type Layout struct {
	// V2 is the mount point of the cgroup2 hierarchy; "" when none is
	// mounted.
	V2 string
	// V2Root is the root of the V2 mount within the hierarchy: "/" for the
	// whole hierarchy, a cgroup's path when only that sub-tree is bound
	// there (a container's own cgroup without a cgroup namespace).
	V2Root string
	// V2LocalEvents is set when cgroup2 is mounted with
	// memory_localevents: each memory.events then counts the cgroup's own
	// events, not its subtree's.
	V2LocalEvents bool
	// V1 lists the controllers bound to v1 hierarchies, each once, in the
	// order of the mount table, with the mount point of their hierarchy.
	V1 []V1Controller
}

// V1Controller is a controller bound to a cgroup v1 hierarchy.
type V1Controller struct {
	// Name is the controller, e.g. "memory".
	Name string
	// Point is where its hierarchy is mounted.
	Point string
}

// Mode says how the layout's hierarchies are used: Unified (cgroup2 and no
// controller on v1; a named v1 hierarchy such as name=systemd binds none),
// Hybrid (controllers on v1 beside a cgroup2 mount), Legacy (v1 only) or
// NoCgroups.
func (l Layout) Mode() Mode {
	switch {
	case l.V2 != "" && len(l.V1) == 0:
		return Unified
	case l.V2 != "":
		return Hybrid
	case len(l.V1) > 0:
		return Legacy
	default:
		return NoCgroups
	}
}

// V1Names returns the names of the controllers bound to v1 hierarchies, in
// the order of the mount table.
func (l Layout) V1Names() []string {
	names := make([]string, len(l.V1))
	for i, c := range l.V1 {
		names[i] = c.Name
	}
	return names
}

// LayoutOf works out the cgroup layout from the entries of a mount table.
// When several cgroup2 filesystems are mounted, the node's is, in this
// order of preference: a mount of the whole hierarchy (root "/") over a
// bind of a sub-tree, the one at DefaultMountPoint, the first in the table.
// A controller bound to a v1 hierarchy mounted twice is listed at its first
// mount.
func LayoutOf(entries []mountinfo.Entry) Layout {
	var l Layout
	best := -1
	for _, e := range entries {
		switch e.FSType {
		case "cgroup2":
			rank := 0
			if e.Root == "/" {
				rank += 2
			}
			if e.Point == DefaultMountPoint {
				rank++
			}
			if rank > best {
				l.V2, l.V2Root, best = e.Point, e.Root, rank
				l.V2LocalEvents = slices.Contains(e.SuperOptions, "memory_localevents")
			}
		case "cgroup":
			for _, o := range e.SuperOptions {
				if slices.Contains(v1Controllers, o) && !slices.ContainsFunc(l.V1, func(c V1Controller) bool { return c.Name == o }) {
					l.V1 = append(l.V1, V1Controller{Name: o, Point: e.Point})
				}
			}
		}
	}
	return l
}

// ParseLayout works out the cgroup layout from the contents of a mountinfo
// file (proc(5)); a malformed line is an error wrapping ErrMountinfoSyntax.
func ParseLayout(data []byte) (Layout, error) {
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return Layout{}, err
	}
	return LayoutOf(entries), nil
}
