package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// SpacePlan is the disk a checkpoint takes at its peak, per filesystem:
// CRIU writes its images (about the estimate) into the work directory,
// then the archive (about as much again) is written beside them before
// the work directory goes. Where work and archive directory share a
// filesystem, it needs the sum. (An archive built around CRIU's pages
// image, on ext4 or XFS, needs less; the plan does not count on it.)
type SpacePlan struct {
	// Estimate is the estimated archive size (criu.EstimateSize).
	Estimate int64
	// Filesystems are the filesystems written to, the archive's first.
	Filesystems []FilesystemNeed
}

// FilesystemNeed is what one filesystem must have free.
type FilesystemNeed struct {
	// Dir is the directory written on it (the archive directory when it
	// is on it), What says what is written there.
	Dir, What string
	// Dev identifies the filesystem (st_dev).
	Dev uint64
	// Bytes is the peak use.
	Bytes int64
}

// PlanSpace plans a checkpoint of estimate bytes whose CRIU images go to
// workDir and whose archive goes to archiveDir. Directories not made yet
// are planned on the filesystem of their nearest existing parent.
func PlanSpace(estimate int64, workDir, archiveDir string) (SpacePlan, error) {
	p := SpacePlan{Estimate: estimate}
	for _, w := range []struct{ dir, what string }{
		{archiveDir, "the archive"},
		{workDir, "CRIU's images"},
	} {
		dev, err := fsDev(w.dir)
		if err != nil {
			return p, err
		}
		i := slices.IndexFunc(p.Filesystems, func(f FilesystemNeed) bool { return f.Dev == dev })
		if i < 0 {
			p.Filesystems = append(p.Filesystems, FilesystemNeed{Dir: w.dir, What: fmt.Sprintf("%s (%s)", w.what, sizeString(estimate)), Dev: dev, Bytes: estimate})
			continue
		}
		f := &p.Filesystems[i]
		f.Bytes += estimate
		f.What += fmt.Sprintf(" and %s (%s) in %s", w.what, sizeString(estimate), w.dir)
	}
	return p, nil
}

// Check refuses, with an error wrapping ErrNoRoom that names the
// directory, the need and the free space, when a filesystem of the plan
// has less free space (for unprivileged writers, statfs f_bavail) than it
// needs; freed bytes are about to be freed on the archive's filesystem
// (archives and work entries that a prune removes) and count as free.
func (p SpacePlan) Check(freed int64) error {
	for i, f := range p.Filesystems {
		free, err := freeBytes(f.Dir)
		if err != nil {
			return err
		}
		more := ""
		if i == 0 && freed > 0 {
			free += freed
			more = fmt.Sprintf(", %s of it freed by pruning", sizeString(freed))
		}
		if f.Bytes > free {
			return fmt.Errorf("the checkpoint does not fit in the filesystem of %s: it needs %s there at its peak, %s, and %s are free%s: %w",
				f.Dir, sizeString(f.Bytes), f.What, sizeString(free), more, ErrNoRoom)
		}
	}
	return nil
}

// nearestExisting is dir or its nearest parent that exists.
func nearestExisting(dir string, fn func(string) error) error {
	for p := dir; ; p = filepath.Dir(p) {
		err := fn(p)
		if err == nil || !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return err
		}
	}
}

// fsDev is the st_dev of dir's filesystem.
func fsDev(dir string) (uint64, error) {
	var st unix.Stat_t
	var at string
	err := nearestExisting(dir, func(p string) error { at = p; return unix.Stat(p, &st) })
	if err != nil {
		return 0, fmt.Errorf("filesystem of %s: stat %s: %w", dir, at, err)
	}
	return st.Dev, nil
}

// freeBytes is the space left for unprivileged writers on the filesystem
// of dir (statfs f_bavail), or of its nearest existing parent.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	var at string
	err := nearestExisting(dir, func(p string) error { at = p; return unix.Statfs(p, &st) })
	if err != nil {
		return 0, fmt.Errorf("free space of %s: statfs %s: %w", dir, at, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// archiveDir is where criu.Checkpoint writes with o, and its work
// directory with it.
func archiveDir(o criu.Options) string {
	if o.ArchiveDir != "" {
		return o.ArchiveDir
	}
	root := o.RootDir
	if root == "" {
		root = criu.DefaultRootDir
	}
	return filepath.Join(root, criu.CheckpointsDir)
}

// busy is a held target lock's error: its message names the holder and
// the lock, and it wraps ErrBusy, which callers test, without ErrBusy's
// message, which speaks of a container.
type busy struct{ err error }

func (e busy) Error() string   { return e.err.Error() }
func (e busy) Unwrap() []error { return []error{e.err, ErrBusy} }

// lockTarget takes the target lock of pid in lockDir for a checkpoint
// described by what; the error of a held lock wraps ErrBusy.
func lockTarget(lockDir string, pid int, what string) (*workentry.TargetLock, error) {
	l, err := workentry.LockTarget(lockDir, pid)
	if errors.Is(err, workentry.ErrLocked) {
		return nil, busy{fmt.Errorf("%s: %w", what, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return l, nil
}

// Run checkpoints t with criu.Checkpoint as the CLI does: holding t's
// target lock in lockDir (workentry.LockTarget; nodeshim serve takes the
// same, so the two never dump one process at once: the second fails with
// an error wrapping ErrBusy), after checking, before anything is frozen,
// that CRIU's images and the archive fit (SpacePlan: refused with an
// error wrapping ErrNoRoom). A failure that leaves the target alive is
// never reported as criu.ErrTargetLost.
func Run(ctx context.Context, t criu.Target, o criu.Options, lockDir string) (criu.Result, error) {
	lock, err := lockTarget(lockDir, t.Pid, fmt.Sprintf("checkpoint pid %d", t.Pid))
	if err != nil {
		return criu.Result{}, err
	}
	o.LockDir = lockDir
	res, err := runLocked(ctx, t, o, func(p SpacePlan) error { return p.Check(0) })
	return res, errors.Join(err, lock.Unlock())
}

// runLocked is Run once the target lock is held: room checks the space
// plan (and may prune to make room) before criu.Checkpoint runs.
func runLocked(ctx context.Context, t criu.Target, o criu.Options, room func(SpacePlan) error) (criu.Result, error) {
	if o.Lazy == nil {
		// A lazy checkpoint's archive holds no memory: it is served over
		// the network from the frozen tree.
		est, err := criu.EstimateSize(o.ProcRoot, t)
		if err != nil {
			return criu.Result{}, fmt.Errorf("checkpoint pid %d: %w", t.Pid, err)
		}
		dir := archiveDir(o)
		plan, err := PlanSpace(est, dir, dir)
		if err != nil {
			return criu.Result{}, fmt.Errorf("checkpoint pid %d: %w", t.Pid, err)
		}
		if err := room(plan); err != nil {
			return criu.Result{}, fmt.Errorf("checkpoint pid %d refused before freezing anything: %w", t.Pid, err)
		}
	}
	res, err := criu.Checkpoint(ctx, t, o)
	if err != nil {
		err = notLostIfAlive(o.ProcRoot, t.Pid, err)
	}
	return res, err
}

// notLost is the failure of a checkpoint whose target criu reported lost
// but which runs on: its message keeps criu's, its classes keep those of
// the abort (context, shutdown, errdefs) and drop criu.ErrTargetLost.
type notLost struct {
	msg  string
	keep []error
}

func (e *notLost) Error() string   { return e.msg }
func (e *notLost) Unwrap() []error { return e.keep }

// notLostIfAlive returns err, unless it wraps criu.ErrTargetLost while
// pid is alive (neither gone nor stopped): then an error saying that the
// workload runs on. A tree that a concurrent checkpoint had seized, or
// that another tracer holds, is not lost.
func notLostIfAlive(procRoot string, pid int, err error) error {
	if !errors.Is(err, criu.ErrTargetLost) {
		return err
	}
	st, serr := criu.ReadProcState(procRoot, pid)
	if serr != nil || st.Gone() || st.Stopped() {
		return err
	}
	var keep []error
	for _, c := range []error{context.Canceled, context.DeadlineExceeded, ErrShuttingDown,
		errdefs.ErrBusy, errdefs.ErrUnavailable, errdefs.ErrNotFound, errdefs.ErrNotSupported, criu.ErrTargetTraced} {
		if errors.Is(err, c) {
			keep = append(keep, c)
		}
	}
	msg := strings.ReplaceAll(err.Error(), criu.ErrTargetLost.Error(), "the target was disturbed but is not lost")
	return &notLost{msg: fmt.Sprintf("%s (pid %d runs on: %s)", msg, pid, st), keep: keep}
}
