package retention

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/criu/workentry"
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
func listLeftovers(dir string, ents []os.DirEntry, o workentry.Owners) ([]Leftover, error) {
	var out []Leftover
	for _, e := range ents {
		pid, ok := workentry.Parse(e.Name())
		if !ok || !(e.IsDir() || e.Type().IsRegular()) {
			continue
		}
		out = append(out, Leftover{Name: e.Name(), PID: pid})
	}
	if len(out) == 0 {
		return nil, nil
	}
	held, err := workentry.HeldLocks(o.LockDir)
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	var errs []error
	for _, l := range out {
		p := filepath.Join(dir, l.Name)
		born, err := workentry.Birth(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // its maker finished meanwhile
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.InUse, l.Why = o.Judge(l.PID, born, held)
		if l.Size, err = treeBytes(p); err != nil {
			errs = append(errs, err)
		}
		kept = append(kept, l)
	}
	return kept, errors.Join(errs...)
}
