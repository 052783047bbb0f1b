package workentry

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// LockDirName is the directory, in nodeshim's root dir (the one of its API
// socket), of the target locks that the CLI and nodeshim serve share.
const LockDirName = "checkpoint-locks"

// ErrLocked says another checkpoint of the same process is in progress
// (class errdefs.ErrBusy).
var ErrLocked = errdefs.New(errdefs.ErrBusy, "another checkpoint of this process is in progress")

// TargetLock is a checkpoint's claim on its target process, held from
// before anything is frozen until the checkpoint has ended: two CRIUs
// seizing one tree fail each other and each then finds the tree traced
// by the other.
//
// It is an open file description lock (fcntl F_OFD_SETLK, Linux 3.15) on
// <dir>/pid-<PID>.lock, which holds the holder's pid. Like flock(2) it
// belongs to the open file, so that two checkpoints in one process
// exclude each other, and it goes with the holder's death; unlike flock,
// F_OFD_GETLK tells whether it is held without taking it, so that a prune
// asking (HeldLocks) never turns a checkpoint starting at that instant
// away as busy.
type TargetLock struct {
	f    *os.File
	path string
}

// wholeFile is a write lock on the whole file.
func wholeFile(typ int16) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: io.SeekStart}
}

// LockTarget takes the lock of target pid in dir (made 0700 when
// missing), failing at once with an error wrapping ErrLocked and naming
// the holder when another checkpoint holds it.
func LockTarget(dir string, pid int) (*TargetLock, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("lock checkpoint target: pid %d", pid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock checkpoint target pid %d: %w", pid, err)
	}
	path := filepath.Join(dir, "pid-"+strconv.Itoa(pid)+".lock")
	for range 100 {
		// Not O_EXCL: the file may be another holder's; O_NOFOLLOW and
		// no O_TRUNC: nothing of what is there is replaced or followed.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock checkpoint target pid %d: %w", pid, err)
		}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, wholeFile(unix.F_WRLCK)); err != nil {
			holder := readHolder(f)
			f.Close()
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				return nil, fmt.Errorf("%s holds %s: %w", holder, path, ErrLocked)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The previous holder unlinks the file before it lets go: a lock
		// won on an unlinked file is no lock; open the path again.
		var fst, pst unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
			f.Close()
			return nil, fmt.Errorf("stat %s: %w", path, err)
		}
		if err := unix.Lstat(path, &pst); err != nil || pst.Ino != fst.Ino || pst.Dev != fst.Dev {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		return &TargetLock{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced", path)
}

// readHolder names the process whose pid a lock file holds.
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "a process"
}

// Unlock removes the lock file and lets the lock go; the one who waits
// for it opens the path again (see LockTarget).
func (l *TargetLock) Unlock() error {
	err := os.Remove(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// HeldLocks returns, for each pid that holds a target lock in dir, the
// lock file's path. An empty or missing dir holds none. A lock whose
// holder has not written its pid yet is left out: its holder has made no
// work entry yet either.
func HeldLocks(dir string) (map[int]string, error) {
	held := map[int]string{}
	if dir == "" {
		return held, nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return held, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoint locks: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "pid-") || !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		lk := wholeFile(unix.F_WRLCK)
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, lk)
		var holder int
		if err == nil && lk.Type != unix.F_UNLCK {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			holder, _ = strconv.Atoi(strings.TrimSpace(string(b[:n])))
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("test the lock %s: %w", p, err)
		}
		if holder > 0 {
			held[holder] = p
		}
	}
	return held, nil
}
