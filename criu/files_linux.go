package criu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// ensurePrivateDir makes dir (and its parents) with mode 0700 and checks
// that it is a directory owned by us that no one else can enter.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by uid %d", dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		// An existing directory that others can read: tighten it, since
		// archives hold every byte of a workload's memory.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("chmod 0700 %s: %w", dir, err)
		}
	}
	return nil
}

// createExclusive creates a new file in dir with a private name, mode 0600
// from the first byte, failing rather than opening anything that exists.
func createExclusive(dir string) (*os.File, error) {
	for range 8 {
		name, err := workentry.NewName(workentry.TempPrefix, workentry.TempSuffix)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("create a temp archive in %s: names keep colliding", dir)
}

// publish renames tmp into dir under the first name(attempt) that does not
// exist yet, never replacing a file (renameat2 RENAME_NOREPLACE, Linux
// 3.15), then fsyncs dir so that the name survives a crash.
func publish(dir, tmp string, name func(attempt int) string) (string, error) {
	for attempt := 0; attempt < 1000; attempt++ {
		final := filepath.Join(dir, name(attempt))
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("rename %s to %s: %w", tmp, final, err)
		}
		if err := atomicfile.SyncDir(dir); err != nil {
			return final, err
		}
		return final, nil
	}
	return "", fmt.Errorf("rename %s: 1000 names in %s are taken", tmp, dir)
}
