package seal

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrNotMemory: a directory that must hold plain checkpoint data only in
// memory is on a persistent filesystem and no tmpfs could be mounted on it.
var ErrNotMemory = errdefs.New(errdefs.ErrNotSupported, "directory is not memory-backed")

// InMemory reports whether dir's filesystem keeps its files in memory:
// tmpfs or ramfs (statfs(2) f_type TMPFS_MAGIC, RAMFS_MAGIC).
// TmpfsSource is the source of the tmpfs EnsureInMemory mounts, by which
// criu/workentry's sweep knows it from any other mount (its TmpfsSource,
// held equal by its tests).
const TmpfsSource = "nodeshim-seal"

func InMemory(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC, nil
}

// EnsureInMemory makes the empty directory dir memory-backed, so that the
// plain CRIU images and unpacked archives written in it never reach a
// persistent disk: if it is not on a tmpfs already, it mounts a private
// tmpfs on it (mode 0700, nosuid, nodev, noexec; its size limit is the
// kernel's default, half of RAM). release unmounts what was mounted; call
// it after the directory's content is no longer needed, before removing
// it. When dir is on disk and no tmpfs can be mounted (no CAP_SYS_ADMIN),
// it fails with ErrNotMemory naming dir.
func EnsureInMemory(dir string) (release func() error, err error) {
	nop := func() error { return nil }
	mem, err := InMemory(dir)
	if err != nil {
		return nil, err
	}
	if mem {
		return nop, nil
	}
	if err := unix.Mount(TmpfsSource, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		return nil, fmt.Errorf("%s is on a persistent filesystem and mounting a tmpfs on it failed (%v): put the checkpoint work directory on a tmpfs: %w", dir, err, ErrNotMemory)
	}
	release = func() error {
		if err := unix.Unmount(dir, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(dir, unix.MNT_DETACH)
			}
			if err != nil {
				return fmt.Errorf("unmount the tmpfs on %s: %w", dir, err)
			}
		}
		return nil
	}
	// Keep the mount out of other mount namespaces that share the parent.
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return nil, errors.Join(fmt.Errorf("make the tmpfs on %s private: %w", dir, err), release())
	}
	if mem, err := InMemory(dir); err != nil || !mem {
		return nil, errors.Join(fmt.Errorf("%s: the tmpfs mounted on it is not seen: %w", dir, ErrNotMemory), err, release())
	}
	return release, nil
}
