package workentry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/procfs"
)

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

// Judge returns whether the entry of pid made at born may still be in
// use, and why.
func (o Owners) Judge(pid int, born time.Time, held map[int]string) (bool, string) {
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

// Birth is when the entry was made: its birth time (statx STATX_BTIME)
// where the filesystem keeps one, else the earlier of its modification
// and change times, which are no earlier than its birth, so an entry
// whose maker lives is never taken for a leftover.
func Birth(path string) (time.Time, error) {
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

// Sweep removes the work entries of dir that o judges left over, and
// returns their names. Entries it cannot judge or remove stay, for the
// next sweep or the retention policy to find.
func Sweep(dir string, o Owners) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if _, ok := Parse(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil
	}
	held, err := HeldLocks(o.LockDir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, name := range names {
		pid, _ := Parse(name)
		p := filepath.Join(dir, name)
		born, err := Birth(p)
		if err != nil {
			continue
		}
		if inUse, _ := o.Judge(pid, born, held); inUse {
			continue
		}
		if err := os.RemoveAll(p); err == nil {
			removed = append(removed, name)
		}
	}
	return removed
}
