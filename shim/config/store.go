package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/shim/config/configstatus"
)

// SourceRef names one configuration payload, kept on disk as a snapshot
// under its UID (defined in configstatus).
type SourceRef = configstatus.SourceRef

// record is the on-disk state: assigned and last-known-good, written
// together in one file so that both change in one atomic rename.
type record struct {
	Assigned      *SourceRef `json:"assigned,omitempty"`
	LastKnownGood *SourceRef `json:"lastKnownGood,omitempty"`
}

// Layout of the state directory (<root-dir>/config): the record in
// state.json, one snapshot of each payload it references in snapshots/.
const (
	stateFile    = "state.json"
	snapshotsDir = "snapshots"
	tempInfix    = ".tmp-"
	// legacySnapshotsDir is where the snapshots were kept before they had
	// their own name (a name CRIU's checkpoints also use); init moves them
	// to snapshotsDir.
	legacySnapshotsDir = "checkpoints"
)

var uidPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// store reads and writes the state directory. Every write is: create a temp
// file with O_EXCL and mode 0600, write, fsync, rename over the target,
// fsync the directory (the recipe of etcd's WAL and runc's atomic writes).
type store struct {
	dir string
	// crashPoint, when set, is called at each step of every write so that
	// tests can kill the process between any two of them.
	crashPoint func(step string)
}

func (s *store) point(step string) {
	if s.crashPoint != nil {
		s.crashPoint(step)
	}
}

// init creates the state directory and moves the snapshots of a store
// written in the legacy layout into snapshots/.
func (s *store) init() error {
	for _, d := range []string{s.dir, filepath.Join(s.dir, snapshotsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create state directory %s: %w", d, err)
		}
	}
	return s.migrate()
}

// migrate moves each snapshot in the legacy directory to snapshots/ and
// removes the legacy directory. Each move is one rename(2) within the state
// directory, so a snapshot is in one of the two places at every instant and
// an interrupted migration resumes at the next Open. A snapshot present in
// both (content-addressed, so the same payload) is kept in snapshots/ only;
// leftovers of an interrupted write are dropped.
func (s *store) migrate() error {
	legacy := filepath.Join(s.dir, legacySnapshotsDir)
	entries, err := os.ReadDir(legacy)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read legacy snapshot directory %s: %w", legacy, err)
	}
	dir := filepath.Join(s.dir, snapshotsDir)
	for _, e := range entries {
		from, to := filepath.Join(legacy, e.Name()), filepath.Join(dir, e.Name())
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if _, err := os.Lstat(to); !ok || !uidPattern.MatchString(uid) || err == nil {
			if err := os.Remove(from); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", from, err)
			}
			continue
		}
		if err := os.Rename(from, to); err != nil {
			return fmt.Errorf("move snapshot %s to %s: %w", from, to, err)
		}
	}
	for _, d := range []string{dir, legacy} {
		if err := atomicfile.SyncDir(d); err != nil {
			return err
		}
	}
	if err := os.Remove(legacy); err != nil {
		return fmt.Errorf("remove legacy snapshot directory %s: %w", legacy, err)
	}
	return atomicfile.SyncDir(s.dir)
}

// writeFile replaces dir/name atomically with data.
func (s *store) writeFile(dir, name string, data []byte) error {
	target := filepath.Join(dir, name)
	f, err := os.CreateTemp(dir, "."+name+tempInfix+"*") // O_EXCL, mode 0600
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", target, err)
	}
	tmp := f.Name()
	s.point("created")
	cleanup := func() { f.Close(); os.Remove(tmp) }
	if _, err := f.Write(data); err != nil {
		cleanup()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	s.point("written")
	if err := f.Sync(); err != nil {
		cleanup()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	s.point("synced")
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s to %s: %w", tmp, target, err)
	}
	s.point("renamed")
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	s.point("dir-synced")
	return nil
}

func (s *store) snapshotPath(uid string) string {
	return filepath.Join(s.dir, snapshotsDir, uid+".json")
}

// saveSnapshot writes the payload under its UID unless it is there already.
func (s *store) saveSnapshot(p Payload) error {
	uid := p.UID()
	if _, err := os.Stat(s.snapshotPath(uid)); err == nil {
		return nil
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode snapshot %s: %w", uid, err)
	}
	return s.writeFile(filepath.Join(s.dir, snapshotsDir), uid+".json", data)
}

// ErrSnapshotCorrupt is returned, wrapped, when a snapshot's content does
// not match its UID.
var ErrSnapshotCorrupt = errors.New("snapshot content does not match its uid")

func (s *store) loadSnapshot(uid string) (Payload, error) {
	path := s.snapshotPath(uid)
	data, err := os.ReadFile(path)
	if err != nil {
		return Payload{}, fmt.Errorf("read snapshot %s: %w", path, err)
	}
	var p Payload
	if err := json.Unmarshal(data, &p); err != nil {
		return Payload{}, fmt.Errorf("decode snapshot %s: %w", path, err)
	}
	if p.UID() != uid {
		return Payload{}, fmt.Errorf("%s: %w", path, ErrSnapshotCorrupt)
	}
	return p, nil
}

func (s *store) readRecord() (record, error) {
	path := filepath.Join(s.dir, stateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return record{}, nil
	}
	if err != nil {
		return record{}, fmt.Errorf("read %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("decode %s: %w", path, err)
	}
	for _, ref := range []*SourceRef{r.Assigned, r.LastKnownGood} {
		if ref != nil && !uidPattern.MatchString(ref.UID) {
			return record{}, fmt.Errorf("decode %s: bad uid %q", path, ref.UID)
		}
	}
	return r, nil
}

func (s *store) writeRecord(r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode state record: %w", err)
	}
	return s.writeFile(s.dir, stateFile, data)
}

// cleanup removes temp files left by a write that was interrupted and the
// snapshots that the record no longer references. Failures are returned
// for logging; they never affect the configuration in use.
func (s *store) cleanup(r record) error {
	var errs []error
	keep := map[string]bool{}
	for _, ref := range []*SourceRef{r.Assigned, r.LastKnownGood} {
		if ref != nil {
			keep[ref.UID+".json"] = true
		}
	}
	for _, d := range []string{s.dir, filepath.Join(s.dir, snapshotsDir)} {
		entries, err := os.ReadDir(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", d, err))
			continue
		}
		for _, e := range entries {
			n := e.Name()
			stale := strings.HasPrefix(n, ".") && strings.Contains(n, tempInfix)
			if d != s.dir && !stale && !keep[n] {
				stale = true
			}
			if stale {
				if err := os.Remove(filepath.Join(d, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}
