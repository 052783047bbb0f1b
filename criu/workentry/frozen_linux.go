package workentry

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// frozenPrefix and frozenSuffix name the frozen records of a lock
// directory: frozen-<pid>-<random>.json.
const (
	frozenPrefix = "frozen-"
	frozenSuffix = ".json"
)

// FrozenRecord is a checkpoint's note, in the lock directory, of the
// freezer cgroups it is about to freeze, held from before the freeze
// until they are thawed. It is an open file description lock like
// TargetLock's, so it goes with its maker's death: a record nobody holds
// was left by a maker killed while the cgroups may be frozen, and
// ThawLeftFrozen thaws them. Without it, a nodeshim killed mid-dump would
// leave the workload frozen for good (CRIU's own thaw is its maker's).
type FrozenRecord struct {
	f    *os.File
	path string
}

// frozenDoc is a record's content.
type frozenDoc struct {
	// Cgroups are the freezer cgroup directories (cgroup v1 freezer or
	// v2) to thaw.
	Cgroups []string `json:"cgroups"`
}

// RecordFrozen writes and holds the record of cgroups in dir (made 0700
// when missing), durably, before they are frozen. With no cgroups, or no
// dir (a caller without a lock directory), nothing is recorded: a nil
// *FrozenRecord's Thawed does nothing.
func RecordFrozen(dir string, cgroups []string) (*FrozenRecord, error) {
	if len(cgroups) == 0 || dir == "" {
		return nil, nil
	}
	for _, cg := range cgroups {
		if !filepath.IsAbs(cg) {
			return nil, fmt.Errorf("record frozen cgroups: %q is not an absolute path", cg)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("record frozen cgroups: %w", err)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("record frozen cgroups: %w", err)
	}
	path := filepath.Join(dir, frozenPrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b)+frozenSuffix)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record frozen cgroups: %w", err)
	}
	fail := func(err error) (*FrozenRecord, error) {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("record frozen cgroups in %s: %w", path, err)
	}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, wholeFile(unix.F_WRLCK)); err != nil {
		return fail(err)
	}
	doc, err := json.Marshal(frozenDoc{Cgroups: cgroups})
	if err != nil {
		return fail(err)
	}
	if _, err := f.Write(append(doc, '\n')); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return &FrozenRecord{f: f, path: path}, nil
}

// Thawed removes the record once its cgroups are thawed, and lets it go.
func (r *FrozenRecord) Thawed() error {
	if r == nil {
		return nil
	}
	err := os.Remove(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, r.f.Close())
}

// ThawLeftFrozen thaws the cgroups of every record in dir that nobody
// holds (its maker was killed), removes those records and returns the
// cgroups it thawed. A cgroup that is gone (its pod deleted meanwhile) is
// passed over. A record it cannot read stays for the next call, and is
// named in the error.
func ThawLeftFrozen(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("thaw left frozen cgroups: %w", err)
	}
	var thawed []string
	var errs []error
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), frozenPrefix) || !strings.HasSuffix(e.Name(), frozenSuffix) {
			continue
		}
		cgs, err := thawRecord(filepath.Join(dir, e.Name()))
		thawed = append(thawed, cgs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return thawed, errors.Join(errs...)
}

// thawRecord takes the record at p if nobody holds it, thaws its cgroups
// and removes it.
func thawRecord(p string) ([]string, error) {
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("thaw left frozen cgroups: %w", err)
	}
	defer f.Close()
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, wholeFile(unix.F_WRLCK)); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, nil // its maker is at work
		}
		return nil, fmt.Errorf("thaw left frozen cgroups: lock %s: %w", p, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("thaw left frozen cgroups: read %s: %w", p, err)
	}
	var doc frozenDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		// Its maker was killed while writing it: it had frozen nothing.
		if rmErr := os.Remove(p); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("thaw left frozen cgroups: remove %s: %w", p, rmErr)
		}
		return nil, nil
	}
	var thawed []string
	var errs []error
	for _, cg := range doc.Cgroups {
		if !filepath.IsAbs(cg) {
			continue
		}
		switch err := Thaw(cg); {
		case err == nil:
			thawed = append(thawed, cg)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("thaw %s (recorded in %s): %w", cg, p, err))
		}
	}
	if len(errs) > 0 {
		return thawed, errors.Join(errs...)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return thawed, fmt.Errorf("thaw left frozen cgroups: remove %s: %w", p, err)
	}
	return thawed, nil
}

// Thaw thaws the freezer cgroup dir: cgroup v1's freezer.state, else
// cgroup v2's cgroup.freeze.
func Thaw(dir string) error {
	p, v := filepath.Join(dir, "freezer.state"), "THAWED"
	if _, err := os.Stat(p); err != nil {
		p, v = filepath.Join(dir, "cgroup.freeze"), "0"
	}
	// O_TRUNC as a shell's echo >: cgroupfs ignores it, a plain file needs it.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(v)
	return errors.Join(werr, f.Close())
}

// syncDir fsyncs the directory dir, so that an entry made in it lasts.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
