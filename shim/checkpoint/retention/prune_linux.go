package retention

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/workentry"
)

// SignatureSuffix names an archive's signature file (criu/archive/seal's
// SignatureSuffix, which the tests check), removed with the archive.
const SignatureSuffix = ".sig"

// TrashDir is the directory, inside the checkpoint directory, that
// archives are renamed into before they are unlinked. It holds only
// archives already chosen for removal: Sweep empties it.
const TrashDir = ".nodeshim-trash"

// ErrHeld says an archive is in use by another process (a restore, an
// image being built) and was not removed.
var ErrHeld = errors.New("archive is in use")

// archives returns the checkpoint archives among the entries of a directory.
func archives(ents []os.DirEntry) ([]Archive, error) {
	var out []Archive
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		c, at, attempt, ok := ParseName(e.Name())
		if !ok {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list checkpoint archives: %w", err)
		}
		out = append(out, Archive{Name: e.Name(), Container: c, Time: at, Modified: fi.ModTime(), Attempt: attempt, Size: fi.Size()})
	}
	return out, nil
}

// Hold takes a shared lock on the archive at path for as long as it is
// read (a restore, an image being built): Prune skips an archive so held.
// It fails with ErrHeld while Prune is removing the archive.
func Hold(path string) (release func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint archive: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: being removed: %w", path, ErrHeld)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f.Close, nil
}

// Remove removes the archive name of dir: it takes the archive's lock
// (failing with ErrHeld when a reader holds it), renames it into TrashDir,
// syncs the directory and unlinks it. A crash after the rename leaves the
// archive in the trash, where Sweep finds it; before it, the archive is
// whole. Nothing is ever half-deleted.
func Remove(dir, name string) error {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return fmt.Errorf("remove checkpoint archive %q: not a file name", name)
	}
	src := filepath.Join(dir, name)
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("remove checkpoint archive: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("remove %s: %w", src, ErrHeld)
		}
		return fmt.Errorf("lock %s: %w", src, err)
	}
	trash := filepath.Join(dir, TrashDir)
	if err := os.Mkdir(trash, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("remove checkpoint archive: %w", err)
	}
	dst := filepath.Join(trash, name)
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("remove checkpoint archive: %w", err)
	}
	// The archive's signature file (package seal) goes with it, after it:
	// a crash between the two leaves a signature without an archive,
	// never a signed archive unsigned.
	sig := name + SignatureSuffix
	if err := os.Rename(filepath.Join(dir, sig), filepath.Join(trash, sig)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove checkpoint archive signature: %w", err)
	}
	// The rename must be on disk before the unlink: else a power loss
	// could bring the archive back under its name, half-freed.
	if err := syncDir(dir); err != nil {
		return err
	}
	// A concurrent Sweep (another process's prune) may unlink it first.
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove checkpoint archive: %w", err)
	}
	if err := os.Remove(filepath.Join(trash, sig)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove checkpoint archive signature: %w", err)
	}
	return syncDir(trash)
}

// Sweep finishes removals a crash interrupted: it unlinks everything in
// dir's TrashDir and returns the names it removed.
func Sweep(dir string) ([]string, error) {
	trash := filepath.Join(dir, TrashDir)
	ents, err := os.ReadDir(trash)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep checkpoint trash: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(trash, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("sweep checkpoint trash: %w", err))
			continue
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		errs = append(errs, syncDir(trash))
	}
	return removed, errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Listing is what Scan finds in a checkpoint directory: the archives,
// and the work entries of checkpoints and restores, live or left over.
type Listing struct {
	// Archives are the checkpoint archives: regular files whose name
	// ParseName accepts.
	Archives []Archive
	// Leftovers are the work entries, judged by the Owners given.
	Leftovers []Leftover
}

// Scan lists dir once: its archives, and its work entries judged by o. A
// missing dir is an empty listing.
func Scan(dir string, o workentry.Owners) (Listing, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("list checkpoint directory: %w", err)
	}
	var l Listing
	if l.Archives, err = archives(ents); err != nil {
		return l, err
	}
	l.Leftovers, err = listLeftovers(dir, ents, o)
	return l, err
}

// LeftoverBytes sums the sizes of the work entries in use (inUse) or left
// over (!inUse).
func (l Listing) LeftoverBytes(inUse bool) int64 {
	var n int64
	for _, w := range l.Leftovers {
		if w.InUse == inUse {
			n += w.Size
		}
	}
	return n
}

// ArchiveBytes sums the sizes of the archives.
func (l Listing) ArchiveBytes() int64 {
	var n int64
	for _, a := range l.Archives {
		n += a.Size
	}
	return n
}

// Result is what one application of a policy did.
type Result struct {
	// Removed are the archives removed (or, in a dry run, to be removed).
	Removed []Removal `json:"removed"`
	// Skipped are removals refused because a reader held the archive.
	Skipped []Removal `json:"skipped,omitempty"`
	// Swept are leftovers of an interrupted prune finished first.
	Swept []string `json:"swept,omitempty"`
	// Kept lists the archives left.
	Kept []Archive `json:"kept"`
	// Leftovers are the work entries of killed checkpoints and restores
	// removed (or, in a dry run, to be removed).
	Leftovers []Leftover `json:"leftovers,omitempty"`
	// Working are the work entries in use, left alone; their bytes count
	// against MaxBytes.
	Working []Leftover `json:"working,omitempty"`
}

// ApplyOptions are the inputs of Apply besides the directory and policy.
type ApplyOptions struct {
	// DryRun only reports what would be removed.
	DryRun bool
	// Busy, when set, names archives that are kept whatever the policy
	// says (a container being checkpointed).
	Busy func(Archive) bool
	// Owners judges the work entries.
	Owners workentry.Owners
	// Removed is called after each archive's removal, for the log and
	// the metrics; RemovedLeftover after each work entry's.
	Removed         func(Removal)
	RemovedLeftover func(Leftover)
}

// Apply sweeps dir's trash, scans it once and removes the work entries
// left over and the archives p removes at now; the work entries in use
// count against MaxBytes. With o.DryRun it only reports them.
func Apply(dir string, p Policy, now time.Time, o ApplyOptions) (Result, error) {
	var res Result
	var errs []error
	if !o.DryRun {
		swept, err := Sweep(dir)
		res.Swept = swept
		errs = append(errs, err)
	}
	l, err := Scan(dir, o.Owners)
	if err != nil {
		errs = append(errs, err)
		if l.Archives == nil {
			return res, errors.Join(errs...)
		}
	}
	plan, _ := Plan(p, l.Archives, now, l.LeftoverBytes(true), o.Busy)
	r, err := Execute(dir, l, plan, o)
	r.Swept = res.Swept
	return r, errors.Join(append(errs, err)...)
}

// Execute carries out a plan made on listing l of dir: it removes the
// work entries l found left over and the archives of plan, and reports
// what is left. With o.DryRun it only reports.
func Execute(dir string, l Listing, plan []Removal, o ApplyOptions) (Result, error) {
	var res Result
	var errs []error
	for _, w := range l.Leftovers {
		if w.InUse {
			res.Working = append(res.Working, w)
			continue
		}
		if !o.DryRun {
			if err := workentry.Remove(dir, w.Name); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		res.Leftovers = append(res.Leftovers, w)
		if o.RemovedLeftover != nil {
			o.RemovedLeftover(w)
		}
	}
	gone := map[string]bool{}
	for _, r := range plan {
		if !o.DryRun {
			if err := Remove(dir, r.Name); errors.Is(err, ErrHeld) {
				res.Skipped = append(res.Skipped, r)
				continue
			} else if errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		gone[r.Name] = true
		res.Removed = append(res.Removed, r)
		if o.Removed != nil {
			o.Removed(r)
		}
	}
	for _, a := range l.Archives {
		if !gone[a.Name] {
			res.Kept = append(res.Kept, a)
		}
	}
	return res, errors.Join(errs...)
}
