package podman

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// sqliteDSN opens podman's db.sql read-only (mode=ro: no journal or
// database writes, so podman's own writers are never blocked by more than a
// read transaction) and read-only at the statement level too
// (query_only). The database is not opened immutable: podman changes it
// while we read, and immutable=1 would make SQLite skip its locks and read
// a half-written page. A writer holding the database (podman runs its
// transactions with _txlock=exclusive) is waited for up to busy_timeout.
func sqliteDSN(path string, timeout time.Duration) string {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", timeout.Milliseconds()))
	q.Add("_pragma", "query_only(1)")
	return (&url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: q.Encode()}).String()
}

// The driver is modernc.org/sqlite, SQLite translated to Go: nodeshim
// builds without cgo for it. It adds about 6 MB to the nodeshim binary
// (35.7 to 41.7 MB); mattn/go-sqlite3, the cgo binding podman itself
// uses, is smaller (in a bare program 4.2 MB against modernc's 7.0 MB)
// but needs cgo and a C compiler for every build.

// lookupSQLite finds the container idOrName in podman 5's SQLite state at
// dbPath: ContainerConfig(ID, Name, JSON) and ContainerState(ID, JSON)
// (libpod/sqlite_state_internal.go, schema version 1). Unlike the BoltDB,
// the config's JSON keeps the container's networks.
func lookupSQLite(dbPath, idOrName string, timeout time.Duration) (Container, error) {
	db, err := sql.Open("sqlite", sqliteDSN(dbPath, timeout))
	if err != nil {
		return Container{}, fmt.Errorf("open podman sqlite state %s: %w", dbPath, err)
	}
	defer db.Close()
	// One connection: the pragmas apply per connection, and the lookup
	// and the reads are one read transaction.
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Container{}, sqliteErr(dbPath, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	id, err := resolveSQLiteID(ctx, tx, idOrName)
	if err != nil {
		return Container{}, fmt.Errorf("podman container %q in sqlite state %s: %w", idOrName, dbPath, sqliteErr(dbPath, err))
	}
	var cfg, st string
	err = tx.QueryRowContext(ctx,
		"SELECT c.JSON, s.JSON FROM ContainerConfig c JOIN ContainerState s ON s.ID = c.ID WHERE c.ID = ?", id).Scan(&cfg, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return Container{}, fmt.Errorf("podman container %s has no config or state in sqlite state %s", id, dbPath)
	}
	if err != nil {
		return Container{}, fmt.Errorf("podman container %s in sqlite state %s: %w", id, dbPath, sqliteErr(dbPath, err))
	}
	c, err := Decode([]byte(cfg), []byte(st), nil)
	if err != nil {
		return Container{}, fmt.Errorf("podman container %s in sqlite state %s: %w", id, dbPath, err)
	}
	return c.withBundleSpec()
}

// resolveSQLiteID finds a container id by full id, name or unique id
// prefix, in that order, as podman's LookupContainerID does. The prefix
// is compared with substr, not LIKE: a % or _ in idOrName is no wildcard.
func resolveSQLiteID(ctx context.Context, tx *sql.Tx, idOrName string) (string, error) {
	if idOrName == "" {
		return "", ErrNotFound
	}
	var id string
	err := tx.QueryRowContext(ctx, "SELECT ID FROM ContainerConfig WHERE ID = ? OR Name = ? ORDER BY ID = ? DESC LIMIT 1",
		idOrName, idOrName, idOrName).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	rows, err := tx.QueryContext(ctx, "SELECT ID FROM ContainerConfig WHERE substr(ID, 1, ?) = ? LIMIT 2", len(idOrName), idOrName)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return "", err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", ErrNotFound
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("id prefix %q is ambiguous", idOrName)
}

// sqliteErr classes a database podman holds past the busy timeout as
// errdefs.ErrUnavailable and a file that is not podman's database as
// errdefs.ErrInvalidArgument.
func sqliteErr(dbPath string, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return errdefs.New(errdefs.ErrUnavailable, fmt.Sprintf("podman sqlite state %s is locked: %v", dbPath, err))
	case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_ERROR:
		if se.Code()&0xff == sqlite3.SQLITE_ERROR && !strings.Contains(err.Error(), "no such") {
			return err
		}
		return errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%s is not a podman sqlite state: %v", dbPath, err))
	}
	return err
}
