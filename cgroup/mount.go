package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
// (proc(5)). When several cgroup2 filesystems are mounted, the first one
// whose root is the hierarchy's root ("/") wins, which is the node's own
// mount rather than a bind of a sub-tree.
func ParseMountinfo(data []byte) (Mount, error) {
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return Mount{}, err
	}
	var (
		m     Mount
		found bool
		v1    []string
	)
	for _, e := range entries {
		switch e.FSType {
		case "cgroup2":
			if !found && e.Root == "/" {
				m.Path = e.Point
				found = true
			}
		case "cgroup":
			for _, o := range e.SuperOptions {
				switch {
				case o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent=") || o == "clone_children" ||
					o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods" || o == "nofavordynmods" ||
					o == "none" || strings.HasPrefix(o, "name="):
					// Mount options and named hierarchies (name=systemd), which
					// bind no controller.
				default:
					v1 = append(v1, o)
				}
			}
		}
	}
	if !found {
		return Mount{}, ErrNoCgroup2
	}
	m.Mode = Unified
	if len(v1) > 0 {
		m.Mode = Hybrid
		m.V1Controllers = v1
	}
	return m, nil
}
