// Package lock is the single-instance lock of nodeshim serve: an flock(2) on
// a lock file (/var/run/nodeshim.lock by default) that holds the owner's
// pid, so that a second shim on the node refuses to start and says which
// process holds the lock. AcquireDir takes the same kind of lock inside a
// directory, so that the state kept there is guarded whatever lock file
// each process was told to use.
package lock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// DefaultPath is where nodeshim serve takes its lock unless configured otherwise.
const DefaultPath = "/var/run/nodeshim.lock"

// DirLockName is the lock file AcquireDir takes inside a directory.
const DirLockName = "serve.lock"

// HeldError is returned by Acquire when another process holds the lock.
type HeldError struct {
	// Path is the lock file.
	Path string
	// PID is the holder's pid, 0 when it could not be determined.
	PID int
}

// Error names the lock file and the holder.
func (e *HeldError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("lock %s is held by another process (pid unknown): is another nodeshim running?", e.Path)
	}
	return fmt.Sprintf("lock %s is held by pid %d: another nodeshim is running", e.Path, e.PID)
}

// Unwrap classes the error: the lock is busy (errdefs.ErrBusy).
func (e *HeldError) Unwrap() error { return errdefs.ErrBusy }

// Lock is a held lock file. Release it with Release; the kernel releases it
// too when the process exits, however it exits.
type Lock struct {
	f *os.File
}

// Options tune Acquire. The zero value is ready to use.
type Options struct {
	// ProcRoot is where /proc is mounted, used to find the holder in
	// /proc/locks when the lock file does not name it yet. Default "/proc".
	ProcRoot string
}

// Acquire takes the exclusive lock on path without blocking, creating the
// file (mode 0644, never truncating an existing one before the lock is
// held) and writing the caller's pid into it. When another process holds
// the lock it returns a *HeldError naming that process.
func Acquire(path string, opts Options) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory of lock %s: %w", path, err)
	}
	return acquire(path, 0o644, opts)
}

// AcquireDir takes the exclusive lock of the directory dir, which must
// exist: the lock file DirLockName inside it (created 0600, the mode of the
// private state beside it), as Acquire does. Since the lock file is found
// through dir itself, two processes that name one directory by different
// paths (a symlink, a bind mount) contend for the same lock.
func AcquireDir(dir string, opts Options) (*Lock, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("lock directory %s: not a directory", dir))
	}
	return acquire(filepath.Join(dir, DirLockName), 0o600, opts)
}

func acquire(path string, perm os.FileMode, opts Options) (*Lock, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, perm)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Path: path, PID: holder(f, opts.ProcRoot)}
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	// Only the holder writes, so truncating now cannot hide another's pid.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("truncate lock %s: %w", path, err)
	}
	if _, err := f.WriteAt(pid, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pid to lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock and closes the file. The file stays, so that a
// process waiting on the same inode is never split from a new one.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	name := l.f.Name()
	err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	cerr := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("unlock %s: %w", name, err)
	}
	if cerr != nil {
		return fmt.Errorf("close lock %s: %w", name, cerr)
	}
	return nil
}

// holder names the pid holding f's lock: the pid written in the file, or,
// when the holder has not written it yet, the FLOCK entry of /proc/locks
// on the same inode.
func holder(f *os.File, procRoot string) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && pid > 0 {
		return pid
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	pl, err := os.Open(filepath.Join(procRoot, "locks"))
	if err != nil {
		return 0
	}
	defer pl.Close()
	return parseProcLocks(bufio.NewScanner(pl), unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
}

// parseProcLocks finds the FLOCK holder of dev:ino in /proc/locks lines
// such as "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"
// (fs/locks.c lock_get_status; the device is major:minor in hex).
func parseProcLocks(sc *bufio.Scanner, major, minor uint32, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Blocked waiters are shown as "1: -> FLOCK ..."; skip them.
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		if fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil {
			return pid
		}
	}
	return 0
}
