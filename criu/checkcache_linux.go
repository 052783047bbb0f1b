package criu

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// fillIdentity adds the inode, device and change time of fi to id.
func fillIdentity(id *binaryIdentity, fi os.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Inode = st.Ino
		id.Device = st.Dev
		id.ChTime = st.Ctim.Nano()
	}
}

// criuKeepsKerndat reports whether a criu run as root will keep what it
// learns about the kernel in dir for the runs after it (criu/kerndat.c:
// kerndat_save_cache writes dir/criu.kdat only when dir is a tmpfs, through
// dir/criu.kdat.tmp opened with O_EXCL), and has not done so yet. A stale
// criu.kdat.tmp, left by a criu killed while saving, makes every later save
// give up until the next boot.
func criuKeepsKerndat(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	for _, name := range []string{"criu.kdat", "criu.kdat.tmp"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}
