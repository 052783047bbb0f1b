// Package atomicfile writes files on the host so that a reader sees either
// the old content or the new, never a torn or truncated file, and so that a
// file is never created with a wider mode than it ends up with.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically: it creates a hidden temporary
// file beside path with O_EXCL and the final mode perm, writes and fsyncs
// it, renames it over path and fsyncs the directory. The temporary name
// starts with a dot, which readers of drop-in directories (NFD's
// features.d among them) skip. On failure the temporary file is removed
// and path is left as it was.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, false)
}

// WriteNew writes data to path, which must not exist, with the same
// guarantees as WriteFile; the temporary file is linked to path rather
// than renamed over it, so that a file created at path in the meantime is
// never replaced: the error then wraps fs.ErrExist.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, true)
}

func write(path string, data []byte, perm fs.FileMode, exclusive bool) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("write %s: no file name", path)
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(suffix[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// The umask may have narrowed perm; it never widens it, so setting the
	// exact mode now exposes nothing.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if exclusive {
		// link(2) fails with EEXIST instead of replacing a file created since.
		if err := os.Link(tmp, path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("remove %s: %w", tmp, err)
		}
	} else if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs the directory dir, so that an entry just created, renamed
// or removed in it survives a crash. Filesystems that cannot sync a
// directory (EINVAL) are accepted.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
