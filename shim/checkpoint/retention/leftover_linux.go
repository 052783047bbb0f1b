package retention

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/procfs"
)

// The names of the work entries a checkpoint or a restore makes in the
// checkpoint directory (criu's work directory with CRIU's images, and the
// temp archive before it is published): a dot, a prefix, the pid of the
// process that made it, "-" and random hex. TestLeftoverNames pins
// them to what criu.Checkpoint writes.
const (
	// WorkPrefix starts a work directory: CRIU's images, as large as the
	// dumped memory.
	WorkPrefix = ".nodeshim-work-"
	// TempPrefix and TempSuffix frame a temp archive being written.
	TempPrefix = ".nodeshim-tmp-"
	TempSuffix = ".tar"
)

// Leftover is a work entry of the checkpoint directory: a live
// checkpoint's or restore's, or one left behind by a process that was
// killed in the middle (SIGKILL, OOM, a node crash).
type Leftover struct {
	// Name is the entry's name in the checkpoint directory.
	Name string `json:"name"`
	// PID is the pid its name gives, in the pid namespace of its maker.
	PID int `json:"pid"`
	// Size is the bytes of its regular files.
	Size int64 `json:"sizeBytes"`
	// InUse says its maker may still be writing it; Why says why, or
	// why it is not.
	InUse bool   `json:"inUse"`
	Why   string `json:"why"`
}

// ParseLeftover returns the pid in a work entry's name, and false for a
// name that is not one.
func ParseLeftover(name string) (pid int, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(name, WorkPrefix):
		rest = name[len(WorkPrefix):]
	case strings.HasPrefix(name, TempPrefix) && strings.HasSuffix(name, TempSuffix) && len(name) > len(TempPrefix)+len(TempSuffix):
		rest = name[len(TempPrefix) : len(name)-len(TempSuffix)]
	default:
		return 0, false
	}
	pidStr, random, ok := strings.Cut(rest, "-")
	if !ok || random == "" || len(pidStr) > 10 || strings.Trim(random, "0123456789abcdef") != "" {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidStr {
		return 0, false
	}
	return pid, true
}

// Owners decides whether the maker of a work entry may still be using it.
// A pid alone cannot say: the nodeshim that made the entry may have been
// killed and its pid given to another process, or to the nodeshim that
// replaced it (pid 1 of a restarted container, every time). So an entry
// is in use when a target lock (LockTarget) in LockDir is held by a
// process of its pid, or when a process of its pid exists in ProcRoot and
// started before the entry was made; else it is left over.
type Owners struct {
	// ProcRoot is the procfs of the pid namespace the names' pids are in:
	// this process's own ("/proc" when empty), not a host's mounted
	// elsewhere.
	ProcRoot string
	// LockDir holds the target locks; none are consulted when empty.
	LockDir string
	// Now is the clock the entries' times are compared with; time.Now
	// when nil.
	Now func() time.Time
}

// startSlack covers the rounding of a process's start time (clock ticks)
// and of the uptime against which an entry's time is placed.
const startSlack = 2 * time.Second

// userHZ is the unit of /proc/PID/stat's starttime: USER_HZ, 100 on every
// Linux architecture (proc(5), sysconf(_SC_CLK_TCK)).
const userHZ = 100

// judge returns whether the entry of pid made at born may still be in
// use, and why.
func (o Owners) judge(pid int, born time.Time, held map[int]string) (bool, string) {
	if lock, ok := held[pid]; ok {
		return true, "pid " + strconv.Itoa(pid) + " holds " + lock
	}
	procRoot := o.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	st, err := procfs.ReadStat(procRoot, pid)
	if errors.Is(err, procfs.ErrNoProcess) {
		return false, "pid " + strconv.Itoa(pid) + " is gone"
	}
	if err != nil {
		return true, "pid " + strconv.Itoa(pid) + ": " + err.Error()
	}
	if st.State == 'Z' || st.State == 'X' {
		return false, "pid " + strconv.Itoa(pid) + " is gone"
	}
	up, err := procfs.Uptime(procRoot)
	if err != nil || st.StartTime == 0 {
		return true, fmt.Sprintf("pid %d runs (start time unknown)", pid)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	// Both on the boot clock: the entry was made this long after boot.
	bornAfterBoot := up - now().Sub(born)
	started := time.Duration(st.StartTime) * time.Second / userHZ
	if started > bornAfterBoot+startSlack {
		return false, fmt.Sprintf("pid %d is a process started %s after the entry was made", pid, (started - bornAfterBoot).Round(time.Second))
	}
	return true, fmt.Sprintf("pid %d runs", pid)
}

// birth is when the entry was made: its birth time (statx STATX_BTIME)
// where the filesystem keeps one, else the earlier of its modification
// and change times, which are no earlier than its birth, so an entry
// whose maker lives is never taken for a leftover.
func birth(path string) (time.Time, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_MTIME|unix.STATX_CTIME, &stx); err != nil {
		return time.Time{}, fmt.Errorf("statx %s: %w", path, err)
	}
	ts := func(t unix.StatxTimestamp) time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }
	if stx.Mask&unix.STATX_BTIME != 0 {
		return ts(stx.Btime), nil
	}
	m, c := ts(stx.Mtime), ts(stx.Ctime)
	if c.Before(m) {
		return c, nil
	}
	return m, nil
}

// treeBytes sums the sizes of the regular files under path (path itself
// when it is one). Entries removed meanwhile are skipped.
func treeBytes(path string) (int64, error) {
	var n int64
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("size of %s: %w", path, err)
	}
	return n, nil
}

// listLeftovers returns the work entries of dir with their sizes, judged
// by o. The locks are read after the entries are listed: an entry listed
// was made after its maker took its lock (Run takes it before criu makes
// anything), so a maker still at work still holds it.
func listLeftovers(dir string, ents []os.DirEntry, o Owners) ([]Leftover, error) {
	var out []Leftover
	for _, e := range ents {
		pid, ok := ParseLeftover(e.Name())
		if !ok || !(e.IsDir() || e.Type().IsRegular()) {
			continue
		}
		out = append(out, Leftover{Name: e.Name(), PID: pid})
	}
	if len(out) == 0 {
		return nil, nil
	}
	held, err := HeldLocks(o.LockDir)
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	var errs []error
	for _, l := range out {
		p := filepath.Join(dir, l.Name)
		born, err := birth(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // its maker finished meanwhile
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.InUse, l.Why = o.judge(l.PID, born, held)
		if l.Size, err = treeBytes(p); err != nil {
			errs = append(errs, err)
		}
		kept = append(kept, l)
	}
	return kept, errors.Join(errs...)
}

// removeLeftover removes a work entry judged left over. A crash in the
// middle leaves less of it under the same name, found again next time.
func removeLeftover(dir, name string) error {
	if _, ok := ParseLeftover(name); !ok || filepath.Base(name) != name {
		return fmt.Errorf("remove %q: not a work entry's name", name)
	}
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("remove leftover %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}
