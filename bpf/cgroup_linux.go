package bpf

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoCgroup2 is returned when no cgroup v2 hierarchy is mounted where
// nodeshim looks for one.
var ErrNoCgroup2 = errors.New("no cgroup v2 hierarchy mounted")

// FindCgroup2 returns where the cgroup v2 hierarchy is mounted under
// sysRoot: sysRoot/fs/cgroup on a pure cgroup v2 host, sysRoot/fs/cgroup/unified
// on a hybrid one (systemd's layout).
func FindCgroup2(sysRoot string) (string, error) {
	candidates := []string{
		filepath.Join(sysRoot, "fs", "cgroup"),
		filepath.Join(sysRoot, "fs", "cgroup", "unified"),
	}
	for _, p := range candidates {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			continue
		}
		if st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w at %s", ErrNoCgroup2, strings.Join(candidates, " or "))
}

// CgroupTargetFromPath returns the Target that records the cgroup v2
// subtree at path, which must lie under the hierarchy mounted at root. The
// cgroup id is the inode number of the directory (kernfs node id on 64-bit
// kernels), the level its depth below root.
func CgroupTargetFromPath(root, path string) (Target, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return Target{}, fmt.Errorf("cgroup %s is not under the cgroup v2 hierarchy at %s", path, root)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Target{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return Target{}, fmt.Errorf("%s is not on a cgroup v2 filesystem (magic %#x)", path, st.Type)
	}
	var fst unix.Stat_t
	if err := unix.Stat(path, &fst); err != nil {
		return Target{}, fmt.Errorf("stat %s: %w", path, err)
	}
	level := 0
	if rel != "." {
		level = len(strings.Split(rel, string(filepath.Separator)))
	}
	return CgroupTarget(fst.Ino, level), nil
}

// MountNSOf returns the inode number of the mount namespace of process pid,
// read from procRoot/PID/ns/mnt.
func MountNSOf(procRoot string, pid int) (uint64, error) {
	p := filepath.Join(procRoot, fmt.Sprint(pid), "ns", "mnt")
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", p, err)
	}
	return st.Ino, nil
}
