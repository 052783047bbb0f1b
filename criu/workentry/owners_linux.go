package workentry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
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

// SignatureSuffix names an archive's signature file (criu/archive/seal's
// SignatureSuffix, which the tests check): the archive's name and ".sig".
const SignatureSuffix = ".sig"

// OrphanGrace is how long a signature file may stand beside no archive
// before a sweep takes it for a leftover. nodeshim writes a signature
// only once its archive is in place and removes it before its archive,
// so a signature alone is the leftover of a removal killed half way (or
// of an older nodeshim's, which removed the archive first), and no
// signature's maker is at work on it after a moment; the grace spares
// one being copied in ahead of its archive.
const OrphanGrace = time.Minute

// Sweep removes the work entries of dir that o judges left over, and
// returns their names: a work directory that is a tmpfs mount point (an
// encrypted checkpoint's, left mounted by a killed maker) is unmounted
// first, so that neither the mount nor the memory its files hold is
// left. It removes too the signature files that stand beside no archive
// for longer than OrphanGrace. Entries it cannot judge or remove stay,
// for the next sweep or the retention policy to find.
func Sweep(dir string, o Owners) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var names []string
	var removed []string
	for _, e := range ents {
		if _, ok := Parse(e.Name()); ok {
			names = append(names, e.Name())
			continue
		}
		if archive, ok := strings.CutSuffix(e.Name(), SignatureSuffix); ok && archive != "" && e.Type().IsRegular() {
			if orphanSignature(dir, archive, now()) && os.Remove(filepath.Join(dir, e.Name())) == nil {
				removed = append(removed, e.Name())
			}
		}
	}
	if len(names) == 0 {
		return removed
	}
	held, err := HeldLocks(o.LockDir)
	if err != nil {
		return removed
	}
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
		if Remove(dir, name) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}

// Remove removes the work entry name of dir, judged left over: a tmpfs
// mounted on it, or on a work entry within it (a pod checkpoint's holds
// its containers'), is unmounted first (see Sweep).
func Remove(dir, name string) error {
	if _, ok := Parse(name); !ok || filepath.Base(name) != name {
		return fmt.Errorf("remove %q: not a work entry's name", name)
	}
	p := filepath.Join(dir, name)
	if err := unmountTmpfs(dir, p); err != nil {
		return err
	}
	// A pod checkpoint's work directory holds its containers' own work
	// entries, each maybe an encrypted checkpoint's tmpfs: they go first,
	// or the removal below would stop at a mount.
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		ents, err := os.ReadDir(p)
		if err != nil {
			return fmt.Errorf("remove leftover %s: %w", p, err)
		}
		for _, e := range ents {
			if _, ok := Parse(e.Name()); ok && e.IsDir() {
				if err := Remove(p, e.Name()); err != nil {
					return err
				}
			}
		}
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove leftover %s: %w", p, err)
	}
	return nil
}

// orphanSignature reports whether the signature of archive in dir stands
// beside no archive and was made more than OrphanGrace before now.
func orphanSignature(dir, archive string, now time.Time) bool {
	if _, err := os.Lstat(filepath.Join(dir, archive)); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	born, err := Birth(filepath.Join(dir, archive+SignatureSuffix))
	return err == nil && now.Sub(born) > OrphanGrace
}

// TmpfsSource is the source of the tmpfs that keeps an encrypted
// checkpoint's plain images in memory (criu/archive/seal mounts it on the
// work directory): the one mount a sweep takes down.
const TmpfsSource = "nodeshim-seal"

// unmountTmpfs unmounts the tmpfs mounted on the entry p of dir, if one
// is (p the root of a mount: statx(2) STATX_ATTR_MOUNT_ROOT, Linux 5.8,
// or another mount id than dir's), lazily (MNT_DETACH) when it is busy.
// Only a whole tmpfs of source TmpfsSource is taken down, as the mount
// table shows the topmost mount on p; any other mount, a bind mount of a
// tmpfs's directory included, is left alone and fails the removal: a
// removal must not reach through a mount.
func unmountTmpfs(dir, p string) error {
	mounted, err := mountRoot(dir, p)
	if err != nil || !mounted {
		return err
	}
	if err := ownTmpfs(p); err != nil {
		return err
	}
	err = unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("unmount the tmpfs on %s: %w", p, err)
	}
	return nil
}

// mountRoot reports whether p, an entry of dir, is the root of a mount.
func mountRoot(dir, p string) (bool, error) {
	var sd, sp unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &sd); err != nil {
		return false, fmt.Errorf("statx %s: %w", dir, err)
	}
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &sp); err != nil {
		return false, fmt.Errorf("statx %s: %w", p, err)
	}
	if sp.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return sp.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	if sd.Mask&sp.Mask&unix.STATX_MNT_ID != 0 {
		return sd.Mnt_id != sp.Mnt_id, nil
	}
	if sd.Dev_major != sp.Dev_major || sd.Dev_minor != sp.Dev_minor {
		return true, nil
	}
	// Before Linux 5.8 a bind mount of the same filesystem shows only in
	// the mount table: the calling thread's (/proc/self is the thread
	// group leader's, whose namespace may differ, Linux 3.17).
	abs, err := filepath.Abs(p)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return false, err
	}
	mounts, err := mountinfo.Parse(b)
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.Point == abs {
			return true, nil
		}
	}
	return false, nil
}

// ownTmpfs checks that the topmost mount on p, as the calling thread's
// mount table lists it (/proc/thread-self/mountinfo; see mountRoot), is a
// whole tmpfs of source TmpfsSource.
func ownTmpfs(p string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return err
	}
	entries, err := mountinfo.Parse(b)
	if err != nil {
		return fmt.Errorf("/proc/thread-self/mountinfo: %w", err)
	}
	var top *mountinfo.Entry
	for i := range entries {
		if entries[i].Point == real {
			top = &entries[i]
		}
	}
	switch {
	case top == nil:
		return fmt.Errorf("%s is a mount point the mount table does not list", p)
	case top.FSType != "tmpfs" || top.Root != "/" || top.Source != TmpfsSource:
		return fmt.Errorf("%s is a mount point of %s %s (root %s), not the tmpfs %s that nodeshim mounts", p, top.FSType, top.Source, top.Root, TmpfsSource)
	}
	return nil
}
