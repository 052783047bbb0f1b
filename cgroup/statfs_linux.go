package cgroup

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Filesystem returns the available bytes and free inodes of the filesystem
// holding dir, by statfs(2) as kubelet does for nodefs and imagefs
// (available = f_bavail * f_bsize out of f_blocks * f_bsize; inodesFree =
// f_ffree out of f_files).
func Filesystem(dir string) (bytes, inodes Observation) {
	if dir == "" {
		err := fmt.Errorf("no directory configured: %w", ErrMissing)
		return Observation{Err: err}, Observation{Err: err}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		err = fmt.Errorf("statfs %s: %w", dir, err)
		return Observation{Err: err}, Observation{Err: err}
	}
	bs := uint64(st.Bsize)
	bytes = Observation{Available: st.Bavail * bs, Capacity: st.Blocks * bs, Source: "statfs " + dir}
	if st.Files == 0 {
		// Filesystems without inode accounting (btrfs reports 0) make the
		// inode signal meaningless rather than exhausted.
		inodes = Observation{Err: fmt.Errorf("statfs %s: filesystem reports no inodes: %w", dir, ErrMissing)}
	} else {
		inodes = Observation{Available: st.Ffree, Capacity: st.Files, Source: "statfs " + dir}
	}
	return bytes, inodes
}
