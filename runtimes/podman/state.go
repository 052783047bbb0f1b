package podman

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Backend is a podman state database backend, as containers.conf's
// [engine] database_backend names it.
type Backend string

// The backends podman knows.
const (
	// BackendDefault is an unset database_backend: podman (5.x,
	// libpod/runtime.go) opens the BoltDB if it exists and SQLite
	// otherwise.
	BackendDefault Backend = ""
	// BackendSQLite is podman 5's default: <graph root>/db.sql.
	BackendSQLite Backend = "sqlite"
	// BackendBoltDB is podman 4's default:
	// <graph root>/libpod/bolt_state.db.
	BackendBoltDB Backend = "boltdb"
)

// ErrNoState: the storage has no state database of the backend wanted.
var ErrNoState = errdefs.New(errdefs.ErrNotFound, "podman state database not found")

// State is a podman state database: its backend and path.
type State struct {
	Backend Backend
	Path    string
}

// String names the state for messages: "sqlite state /var/lib/...".
func (s State) String() string { return fmt.Sprintf("podman %s state %s", s.Backend, s.Path) }

// SQLitePath and BoltPath return where podman keeps each backend's
// database under a graph root (podman's static dir is <graph
// root>/libpod unless containers.conf moves it; podman 5.4 puts db.sql in
// the graph root itself).
func SQLitePath(graphRoot string) string { return filepath.Join(graphRoot, "db.sql") }

// BoltPath: see SQLitePath.
func BoltPath(graphRoot string) string { return filepath.Join(graphRoot, "libpod", "bolt_state.db") }

// FindState returns the state database of the storage at graphRoot that
// podman opens when containers.conf sets database_backend to configured:
// that backend's database, or for BackendDefault the BoltDB when it
// exists and SQLite otherwise. A database that does not exist is
// ErrNoState, naming the backend and path.
func FindState(graphRoot string, configured Backend) (State, error) {
	bolt := State{BackendBoltDB, BoltPath(graphRoot)}
	sqlite := State{BackendSQLite, SQLitePath(graphRoot)}
	var st State
	switch configured {
	case BackendBoltDB:
		st = bolt
	case BackendSQLite:
		st = sqlite
	case BackendDefault:
		st = sqlite
		if _, err := os.Stat(bolt.Path); err == nil {
			st = bolt
		}
	default:
		return State{}, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("podman database_backend %q: want sqlite or boltdb", configured))
	}
	if _, err := os.Stat(st.Path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return State{}, fmt.Errorf("%s (database_backend %q): %w", st, configured, ErrNoState)
		}
		return State{}, fmt.Errorf("%s: %w", st, err)
	}
	return st, nil
}

// Lookup finds the container idOrName (a full id, a unique id prefix or a
// name) in s. A database held by a podman command for longer than timeout
// is an error of class errdefs.ErrUnavailable.
func (s State) Lookup(idOrName string, timeout time.Duration) (Container, error) {
	switch s.Backend {
	case BackendSQLite:
		return lookupSQLite(s.Path, idOrName, timeout)
	case BackendBoltDB:
		return lookupBolt(s.Path, idOrName, timeout)
	}
	return Container{}, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("podman state %s: unknown backend %q", s.Path, s.Backend))
}

// ConfigFiles returns the containers.conf files podman reads as root, in
// the order it reads them (a later file's setting wins), under root ("/"
// for the host): /usr/share/containers/containers.conf,
// /etc/containers/containers.conf and the *.conf drop-ins of
// /etc/containers/containers.conf.d in lexical order; or only
// containersConf when set (podman's $CONTAINERS_CONF replaces them all).
func ConfigFiles(root, containersConf string) []string {
	if containersConf != "" {
		return []string{containersConf}
	}
	files := []string{
		filepath.Join(root, "usr/share/containers/containers.conf"),
		filepath.Join(root, "etc/containers/containers.conf"),
	}
	dropins, _ := filepath.Glob(filepath.Join(root, "etc/containers/containers.conf.d", "*.conf"))
	sort.Strings(dropins)
	return append(files, dropins...)
}

// ConfiguredBackend returns the database_backend the containers.conf files
// set (missing files are skipped; the last setting wins), BackendDefault
// when none does.
func ConfiguredBackend(files []string) (Backend, error) {
	b := BackendDefault
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read containers.conf %s: %w", f, err)
		}
		v, ok, err := ParseDatabaseBackend(data)
		if err != nil {
			return "", fmt.Errorf("containers.conf %s: %w", f, err)
		}
		if ok {
			b = v
		}
	}
	return b, nil
}

// ParseDatabaseBackend reads database_backend from the [engine] table of
// a containers.conf (TOML). It reads only that key: a line
// `database_backend = "sqlite"` (or single-quoted, with an optional
// trailing comment) under [engine]; ok is false when the file does not
// set it. A value other than "", "sqlite" or "boltdb" is an error, as
// podman refuses it.
func ParseDatabaseBackend(data []byte) (b Backend, ok bool, err error) {
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			section = strings.TrimSpace(strings.Trim(line, "[]"))
			continue
		}
		if section != "engine" {
			continue
		}
		key, val, found := strings.Cut(line, "=")
		if !found || strings.TrimSpace(key) != "database_backend" {
			continue
		}
		v, err := tomlString(strings.TrimSpace(val))
		if err != nil {
			return "", false, fmt.Errorf("line %d: database_backend: %w", n, err)
		}
		switch Backend(v) {
		case BackendDefault, BackendSQLite, BackendBoltDB:
			b, ok = Backend(v), true
		default:
			return "", false, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("line %d: database_backend %q: want sqlite or boltdb", n, v))
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	return b, ok, nil
}

// tomlString reads a basic or literal TOML string without escapes,
// followed by nothing or a comment.
func tomlString(s string) (string, error) {
	if len(s) < 2 || (s[0] != '"' && s[0] != '\'') {
		return "", fmt.Errorf("%q is not a quoted string", s)
	}
	end := strings.IndexByte(s[1:], s[0])
	if end < 0 {
		return "", fmt.Errorf("%q: unterminated string", s)
	}
	v, rest := s[1:1+end], strings.TrimSpace(s[2+end:])
	if rest != "" && rest[0] != '#' {
		return "", fmt.Errorf("%q: trailing %q", s, rest)
	}
	if strings.ContainsRune(v, '\\') {
		return "", fmt.Errorf("%q: escapes are not supported", s)
	}
	return v, nil
}
