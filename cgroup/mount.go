package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// ErrNoCgroup2 is returned when no cgroup2 filesystem is mounted.
var ErrNoCgroup2 = errors.New("no cgroup2 mount")

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
var ErrMountinfoSyntax = errors.New("malformed mountinfo")

// ParseMountinfo finds the cgroup2 mount in the contents of a mountinfo file
// (proc(5)). When several cgroup2 filesystems are mounted, the first one
// whose root is the hierarchy's root ("/") wins, which is the node's own
// mount rather than a bind of a sub-tree.
func ParseMountinfo(data []byte) (Mount, error) {
	var (
		m       Mount
		found   bool
		v1      []string
		lineNum int
	)
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		lineNum++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		fields := strings.Fields(string(line))
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 6 || sep < 0 || len(fields) < sep+4 {
			return Mount{}, fmt.Errorf("%w: line %d: %q", ErrMountinfoSyntax, lineNum, clip(line))
		}
		root, mountPoint, fsType, superOpts := fields[3], fields[4], fields[sep+1], fields[sep+3]
		switch fsType {
		case "cgroup2":
			if !found && root == "/" {
				m.Path = unescapeMountinfo(mountPoint)
				found = true
			}
		case "cgroup":
			for _, o := range strings.Split(superOpts, ",") {
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

// unescapeMountinfo undoes the kernel's octal escaping of space, tab,
// newline and backslash in mountinfo paths (fs/proc_namespace.c, mangle()).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Controllers returns the controllers available in the cgroup at dir (its
// cgroup.controllers). On a hybrid node the cgroup2 root lists only those not
// bound to v1 hierarchies.
func Controllers(dir string) ([]string, error) {
	path := filepath.Join(dir, "cgroup.controllers")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return strings.Fields(string(data)), nil
}
