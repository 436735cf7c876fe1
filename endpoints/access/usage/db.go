package usage

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// schema is the database's tables. Times are Unix milliseconds (UTC);
// durations milliseconds. losses counts records that never reached the
// table: records > 0 dropped ones (the queue was full, or a write
// failed), records < 0 an unclean stop that lost at most -records.
const schema = `
CREATE TABLE IF NOT EXISTS requests (
	time              INTEGER NOT NULL,
	user              TEXT    NOT NULL,
	account           TEXT    NOT NULL,
	tier              TEXT    NOT NULL,
	model             TEXT    NOT NULL,
	status            INTEGER NOT NULL,
	outcome           TEXT    NOT NULL,
	prompt_tokens     INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	held_ms           INTEGER NOT NULL,
	served_ms         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_time ON requests(time);
CREATE TABLE IF NOT EXISTS losses (
	time    INTEGER NOT NULL,
	records INTEGER NOT NULL,
	why     TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`

// dsn is the driver's name for path with pragmas: WAL (readers do not
// block the writer), synchronous FULL (a committed batch survives a power
// loss), a busy timeout for a reader holding a lock.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	if readOnly {
		q.Add("mode", "ro")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// openWrite opens the database for the recorder (one connection: one
// writer), made 0600 in an existing directory, with its tables.
func openWrite(path string) (*sql.DB, error) {
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	f.Close()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	return db, nil
}

// OpenReadOnly opens the database at path for queries; it must exist.
func OpenReadOnly(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	return db, nil
}
