package cgroup

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MountUnder returns where the cgroup2 hierarchy is mounted under sysRoot
// (where sysfs is mounted, "/sys"), by the filesystem type of the two places
// it can be: sysRoot/fs/cgroup on a unified host, sysRoot/fs/cgroup/unified
// on a hybrid one (systemd's layout). Unlike FindMount it needs no mount
// table, so it also finds a host's hierarchy through a bind mount of its
// sysfs.
func MountUnder(sysRoot string) (string, error) {
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
