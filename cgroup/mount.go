package cgroup

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// Mode says how cgroups are mounted on the node.
type Mode string

// The cgroup layouts a node can have.
const (
	// Unified: cgroup2 alone (normally at /sys/fs/cgroup) and no v1 hierarchy.
	Unified Mode = "unified"
	// Hybrid: v1 hierarchies holding controllers, with a cgroup2 mount
	// beside them (systemd's /sys/fs/cgroup/unified). Controllers bound to
	// v1 are absent from cgroup2. A v1 named hierarchy without controllers
	// (name=systemd) beside a full cgroup2 still counts as Unified.
	Hybrid Mode = "hybrid"
)

// Mount is the node's cgroup2 mount.
type Mount struct {
	// Path is where cgroup2 is mounted, as seen by this process.
	Path string
	// Mode is Unified or Hybrid.
	Mode Mode
	// V1Controllers lists the controllers bound to v1 hierarchies (Hybrid only).
	V1Controllers []string
	// LocalEvents is set when cgroup2 is mounted with memory_localevents
	// (memory.events counts each cgroup's own events).
	LocalEvents bool
}

// ErrNoCgroup2 is returned when no cgroup2 filesystem is mounted (class
// errdefs.ErrNotSupported).
var ErrNoCgroup2 = errdefs.New(errdefs.ErrNotSupported, "no cgroup2 mount")

// FindMount finds the cgroup2 mount in procRoot/self/mountinfo.
func FindMount(procRoot string) (Mount, error) {
	path := filepath.Join(procRoot, "self", "mountinfo")
	data, err := os.ReadFile(path)
	if err != nil {
		return Mount{}, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := ParseMountinfo(data)
	if err != nil {
		return Mount{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ErrMountinfoSyntax is wrapped by the errors ParseMountinfo returns for
// malformed lines.
var ErrMountinfoSyntax = mountinfo.ErrSyntax

// ParseMountinfo finds the cgroup2 mount in the contents of a mountinfo file
// (proc(5)), as LayoutOf chooses it, and fails with ErrNoCgroup2 when no
// cgroup2 filesystem is mounted or only a sub-tree of one is (a container's
// own cgroup, not the node's hierarchy).
func ParseMountinfo(data []byte) (Mount, error) {
	l, err := ParseLayout(data)
	if err != nil {
		return Mount{}, err
	}
	if l.V2 == "" || l.V2Root != "/" {
		return Mount{}, ErrNoCgroup2
	}
	m := Mount{Path: l.V2, Mode: l.Mode(), LocalEvents: l.V2LocalEvents}
	if m.Mode == Hybrid {
		m.V1Controllers = l.V1Names()
	}
	return m, nil
}
