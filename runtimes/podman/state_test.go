package podman

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

func TestParseDatabaseBackend(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       Backend
		ok, err    bool
	}{
		{name: "unset", conf: "[engine]\nruntime = \"crun\"\n"},
		{name: "sqlite", conf: "[engine]\ndatabase_backend = \"sqlite\"\n", want: BackendSQLite, ok: true},
		{name: "boltdb literal string and comment", conf: "[engine]\n  database_backend='boltdb' # podman 4\n", want: BackendBoltDB, ok: true},
		{name: "empty is the default", conf: "[engine]\ndatabase_backend = \"\"\n", want: BackendDefault, ok: true},
		{name: "other table", conf: "[containers]\ndatabase_backend = \"boltdb\"\n"},
		{name: "engine subtable", conf: "[engine.runtimes]\ndatabase_backend = \"boltdb\"\n"},
		{name: "commented out", conf: "[engine]\n#database_backend = \"boltdb\"\n"},
		{name: "last wins", conf: "[engine]\ndatabase_backend = \"boltdb\"\ndatabase_backend = \"sqlite\"\n", want: BackendSQLite, ok: true},
		{name: "unknown backend", conf: "[engine]\ndatabase_backend = \"mysql\"\n", err: true},
		{name: "unquoted", conf: "[engine]\ndatabase_backend = sqlite\n", err: true},
		{name: "unterminated", conf: "[engine]\ndatabase_backend = \"sqlite\n", err: true},
		{name: "trailing", conf: "[engine]\ndatabase_backend = \"sqlite\" x\n", err: true},
		{name: "escape", conf: "[engine]\ndatabase_backend = \"sql\\u0069te\"\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok, err := ParseDatabaseBackend([]byte(tc.conf))
			if (err != nil) != tc.err || b != tc.want || ok != tc.ok {
				t.Errorf("ParseDatabaseBackend = %q, %v, %v; want %q, %v, error %v", b, ok, err, tc.want, tc.ok, tc.err)
			}
		})
	}
}

func FuzzParseDatabaseBackend(f *testing.F) {
	f.Add([]byte("[engine]\ndatabase_backend = \"sqlite\" # x\n"))
	f.Add([]byte("[engine]\ndatabase_backend='boltdb'\n[network]\n"))
	f.Add([]byte("[engine\ndatabase_backend=\"\"\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, ok, err := ParseDatabaseBackend(data)
		if err != nil {
			return
		}
		if b != BackendDefault && b != BackendSQLite && b != BackendBoltDB {
			t.Errorf("ParseDatabaseBackend(%q) = %q", data, b)
		}
		if !ok && b != BackendDefault {
			t.Errorf("ParseDatabaseBackend(%q) = %q without ok", data, b)
		}
	})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestConfiguredBackend(t *testing.T) {
	root := t.TempDir()
	engine := func(b string) string { return "[engine]\ndatabase_backend = \"" + b + "\"\n" }
	if b, err := ConfiguredBackend(ConfigFiles(root, "")); err != nil || b != BackendDefault {
		t.Errorf("no containers.conf: %q, %v", b, err)
	}
	writeFile(t, filepath.Join(root, "usr/share/containers/containers.conf"), engine("boltdb"))
	writeFile(t, filepath.Join(root, "etc/containers/containers.conf"), "[engine]\n")
	if b, err := ConfiguredBackend(ConfigFiles(root, "")); err != nil || b != BackendBoltDB {
		t.Errorf("vendor file sets boltdb: %q, %v", b, err)
	}
	// Drop-ins are read after containers.conf, in lexical order.
	writeFile(t, filepath.Join(root, "etc/containers/containers.conf.d/20-b.conf"), engine("sqlite"))
	writeFile(t, filepath.Join(root, "etc/containers/containers.conf.d/10-a.conf"), engine("boltdb"))
	writeFile(t, filepath.Join(root, "etc/containers/containers.conf.d/30-c.toml"), engine("boltdb"))
	if b, err := ConfiguredBackend(ConfigFiles(root, "")); err != nil || b != BackendSQLite {
		t.Errorf("drop-ins: %q, %v (files %v)", b, err, ConfigFiles(root, ""))
	}
	// $CONTAINERS_CONF replaces them all.
	own := filepath.Join(root, "own.conf")
	writeFile(t, own, "[containers]\n")
	if b, err := ConfiguredBackend(ConfigFiles(root, own)); err != nil || b != BackendDefault {
		t.Errorf("CONTAINERS_CONF: %q, %v", b, err)
	}
	writeFile(t, own, engine("nosql"))
	if _, err := ConfiguredBackend(ConfigFiles(root, own)); err == nil || !strings.Contains(err.Error(), own) {
		t.Errorf("a bad backend: %v, want an error naming %s", err, own)
	}
}

func TestFindState(t *testing.T) {
	both, bolt, sqlite, none := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{BoltPath(both), SQLitePath(both), BoltPath(bolt), SQLitePath(sqlite)} {
		writeFile(t, p, "")
	}
	for _, tc := range []struct {
		name, root string
		configured Backend
		want       Backend
		err        error
	}{
		{"default prefers an existing boltdb", both, BackendDefault, BackendBoltDB, nil},
		{"default on podman 4 storage", bolt, BackendDefault, BackendBoltDB, nil},
		{"default on podman 5 storage", sqlite, BackendDefault, BackendSQLite, nil},
		{"configured sqlite", both, BackendSQLite, BackendSQLite, nil},
		{"configured boltdb", both, BackendBoltDB, BackendBoltDB, nil},
		{"configured sqlite missing", bolt, BackendSQLite, "", ErrNoState},
		{"configured boltdb missing", sqlite, BackendBoltDB, "", ErrNoState},
		{"default, nothing", none, BackendDefault, "", ErrNoState},
		{"unknown backend", both, "mysql", "", errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := FindState(tc.root, tc.configured)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("FindState = %v, %v; want %v", st, err, tc.err)
				}
				if tc.err == ErrNoState && (!errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), tc.root)) {
					t.Errorf("error %q: want class not found and the path", err)
				}
				return
			}
			if err != nil || st.Backend != tc.want {
				t.Fatalf("FindState = %v, %v; want backend %s", st, err, tc.want)
			}
		})
	}
	if _, err := (State{Backend: "mysql", Path: "/x"}).Lookup("c", 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown backend: %v", err)
	}
}

// A file that is no SQLite database, or one without podman's tables, is
// said to be no podman state.
func TestSQLiteNotPodman(t *testing.T) {
	notDB := filepath.Join(t.TempDir(), "db.sql")
	writeFile(t, notDB, strings.Repeat("not a database ", 100))
	empty := filepath.Join(t.TempDir(), "db.sql")
	writeFile(t, empty, "")
	for _, path := range []string{notDB, empty} {
		_, err := lookupSQLite(path, "c", 0)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), path) {
			t.Errorf("lookupSQLite(%s) = %v, want invalid argument naming the file", path, err)
		}
	}
	// Read-only: nothing was written, not even to the empty file.
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file after a lookup: %v, %v", fi, err)
	}
	if _, err := lookupSQLite(filepath.Join(t.TempDir(), "missing.sql"), "c", 0); err == nil {
		t.Error("a missing database: no error")
	}
}
