package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// SourceRef names one checkpointed configuration payload.
type SourceRef struct {
	// UID is the payload's content hash (Payload.UID).
	UID string `json:"uid"`
	// AssignedAt is when the payload was first recorded as assigned; the
	// soak period is measured from it.
	AssignedAt metav1.Time `json:"assignedAt"`
}

// record is the on-disk state: assigned and last-known-good, written
// together in one file so that both change in one atomic rename.
type record struct {
	Assigned      *SourceRef `json:"assigned,omitempty"`
	LastKnownGood *SourceRef `json:"lastKnownGood,omitempty"`
}

// Layout of the state directory (<root-dir>/config).
const (
	stateFile      = "state.json"
	checkpointsDir = "checkpoints"
	tempInfix      = ".tmp-"
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

func (s *store) init() error {
	for _, d := range []string{s.dir, filepath.Join(s.dir, checkpointsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create state directory %s: %w", d, err)
		}
	}
	return nil
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

func (s *store) checkpointPath(uid string) string {
	return filepath.Join(s.dir, checkpointsDir, uid+".json")
}

// saveCheckpoint writes the payload under its UID unless it is there already.
func (s *store) saveCheckpoint(p Payload) error {
	uid := p.UID()
	if _, err := os.Stat(s.checkpointPath(uid)); err == nil {
		return nil
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode checkpoint %s: %w", uid, err)
	}
	return s.writeFile(filepath.Join(s.dir, checkpointsDir), uid+".json", data)
}

// ErrCheckpointCorrupt is returned, wrapped, when a checkpoint's content
// does not match its UID.
var ErrCheckpointCorrupt = errors.New("checkpoint content does not match its uid")

func (s *store) loadCheckpoint(uid string) (Payload, error) {
	path := s.checkpointPath(uid)
	data, err := os.ReadFile(path)
	if err != nil {
		return Payload{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	var p Payload
	if err := json.Unmarshal(data, &p); err != nil {
		return Payload{}, fmt.Errorf("decode checkpoint %s: %w", path, err)
	}
	if p.UID() != uid {
		return Payload{}, fmt.Errorf("%s: %w", path, ErrCheckpointCorrupt)
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
// checkpoints that the record no longer references. Failures are returned
// for logging; they never affect the configuration in use.
func (s *store) cleanup(r record) error {
	var errs []error
	keep := map[string]bool{}
	for _, ref := range []*SourceRef{r.Assigned, r.LastKnownGood} {
		if ref != nil {
			keep[ref.UID+".json"] = true
		}
	}
	for _, d := range []string{s.dir, filepath.Join(s.dir, checkpointsDir)} {
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
