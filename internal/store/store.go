// Package store is agentkernel's persistent state: one SQLite database,
// <data-dir>/state.db, in WAL mode, shared by every agentkernel process
// (CLI invocations, supervisors, later the API server). It holds the
// persistent sandboxes: their identity, what they were created from and
// their last known status. Status is a record of what was last observed;
// the Manager reconciles it with reality (is the supervisor alive?) on
// every read.
//
// The driver is modernc.org/sqlite (pure Go, CGO_ENABLED=0). Its package
// init registers the driver, start-up work in every process that links
// it; the store is only opened by the commands that need it, never by
// `run`.
//
// Concurrency: every write is one short transaction; busy_timeout makes
// concurrent writers wait for each other instead of failing, and WAL lets
// readers proceed while a writer commits. A process killed mid-write
// leaves the database consistent (SQLite's journal), so a kill -9 of the
// CLI at any moment never corrupts state.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound means no sandbox has that name.
var ErrNotFound = errors.New("sandbox not found")

// ErrExists means a sandbox of that name already exists.
var ErrExists = errors.New("sandbox already exists")

// Status values of a sandbox.
const (
	StatusRunning = "running"
	StatusStopped = "stopped"
)

// Sandbox is one persistent sandbox's row.
type Sandbox struct {
	Name        string            `json:"name"`
	UUID        string            `json:"uuid"`
	Image       string            `json:"image"`
	ImageDigest string            `json:"image_digest,omitempty"`
	Backend     string            `json:"backend"`
	Status      string            `json:"status"`
	StopReason  string            `json:"stop_reason,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Resources   json.RawMessage   `json:"resources,omitempty"`
	Spec        json.RawMessage   `json:"spec,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	// LastActivityAt is the last start, stop or exec.
	LastActivityAt time.Time  `json:"last_activity_at"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	// SupervisorPID and SupervisorStart (the process's start time in
	// clock ticks since boot, /proc/<pid>/stat field 22) identify the
	// supervisor: a pid alone could have been reused.
	SupervisorPID   int    `json:"supervisor_pid,omitempty"`
	SupervisorStart uint64 `json:"supervisor_start,omitempty"`
}

// Store is an open state database.
type Store struct {
	db *sql.DB
}

// migrations are applied in order, each once, recorded in
// schema_migrations. Never edit one that has shipped: append.
var migrations = []string{
	`CREATE TABLE sandboxes (
		name TEXT PRIMARY KEY,
		uuid TEXT NOT NULL UNIQUE,
		image TEXT NOT NULL,
		image_digest TEXT NOT NULL DEFAULT '',
		backend TEXT NOT NULL,
		status TEXT NOT NULL CHECK (status IN ('running','stopped')),
		stop_reason TEXT NOT NULL DEFAULT '',
		profile TEXT NOT NULL DEFAULT '',
		resources TEXT NOT NULL DEFAULT '{}',
		spec TEXT NOT NULL DEFAULT '{}',
		labels TEXT NOT NULL DEFAULT '{}',
		description TEXT NOT NULL DEFAULT '',
		created_at INTEGER NOT NULL,
		last_activity_at INTEGER NOT NULL,
		expires_at INTEGER,
		supervisor_pid INTEGER NOT NULL DEFAULT 0,
		supervisor_start INTEGER NOT NULL DEFAULT 0
	)`,
}

// Open opens (creating if needed) <dataDir>/state.db and brings its
// schema up to date.
func Open(ctx context.Context, dataDir string) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dataDir, "state.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s := &Store{db: db}
	// Processes that open a new database at once can meet SQLITE_BUSY
	// outside busy_timeout's reach (the first connection's switch to WAL):
	// tried again for a while.
	err = s.migrate(ctx)
	for try := 0; busy(err) && try < 50 && ctx.Err() == nil; try++ {
		time.Sleep(time.Duration(10+try*5) * time.Millisecond)
		err = s.migrate(ctx)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	return s, nil
}

// busy says whether err is SQLite's SQLITE_BUSY (5) or SQLITE_LOCKED (6),
// which a later try may not meet.
func busy(err error) bool {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		code := c.Code() & 0xff // the primary code of an extended one
		return code == 5 || code == 6
	}
	return false
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version),0) FROM schema_migrations`).Scan(&have); err != nil {
		return err
	}
	if have > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this agentkernel knows (%d); upgrade agentkernel", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, v, time.Now().Unix()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// NewUUID returns a UUID v7 (time-ordered).
func NewUUID() string {
	u, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return u.String()
}

const columns = `name, uuid, image, image_digest, backend, status, stop_reason, profile, resources, spec, labels, description, created_at, last_activity_at, expires_at, supervisor_pid, supervisor_start`

// Create inserts a new sandbox; ErrExists when the name is taken.
func (s *Store) Create(ctx context.Context, sb *Sandbox) error {
	if sb.UUID == "" {
		sb.UUID = NewUUID()
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = time.Now().UTC()
	}
	if sb.LastActivityAt.IsZero() {
		sb.LastActivityAt = sb.CreatedAt
	}
	if sb.Status == "" {
		sb.Status = StatusStopped
	}
	args, err := values(sb)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO sandboxes (`+columns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.name") {
		return fmt.Errorf("%q: %w", sb.Name, ErrExists)
	}
	return err
}

// Put replaces the row of sb.Name (which must exist).
func (s *Store) Put(ctx context.Context, sb *Sandbox) error {
	args, err := values(sb)
	if err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET (`+columns+`) = (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) WHERE name = ?`, append(args, sb.Name)...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%q: %w", sb.Name, ErrNotFound)
	}
	return nil
}

// Update reads the row of name, lets fn change it, and writes it back in
// one transaction: concurrent updates never lose each other's changes.
func (s *Store) Update(ctx context.Context, name string, fn func(*Sandbox) error) (*Sandbox, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	sb, err := scan(tx.QueryRowContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE name = ?`, name))
	if err != nil {
		return nil, err
	}
	if err := fn(sb); err != nil {
		return nil, err
	}
	args, err := values(sb)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET (`+columns+`) = (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) WHERE name = ?`, append(args, name)...); err != nil {
		return nil, err
	}
	return sb, tx.Commit()
}

// Get returns the row of name, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (*Sandbox, error) {
	return scan(s.db.QueryRowContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE name = ?`, name))
}

// List returns every sandbox, oldest first.
func (s *Store) List(ctx context.Context) ([]*Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM sandboxes ORDER BY created_at, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Sandbox
	for rows.Next() {
		sb, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// Delete removes the row of name; ErrNotFound if there is none.
func (s *Store) Delete(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	return nil
}

func values(sb *Sandbox) ([]any, error) {
	labels, err := json.Marshal(sb.Labels)
	if err != nil {
		return nil, err
	}
	if sb.Labels == nil {
		labels = []byte("{}")
	}
	raw := func(m json.RawMessage) string {
		if len(m) == 0 {
			return "{}"
		}
		return string(m)
	}
	var exp any
	if sb.ExpiresAt != nil {
		exp = sb.ExpiresAt.UnixNano()
	}
	return []any{sb.Name, sb.UUID, sb.Image, sb.ImageDigest, sb.Backend, sb.Status, sb.StopReason, sb.Profile,
		raw(sb.Resources), raw(sb.Spec), string(labels), sb.Description,
		sb.CreatedAt.UnixNano(), sb.LastActivityAt.UnixNano(), exp, sb.SupervisorPID, int64(sb.SupervisorStart)}, nil
}

type scanner interface{ Scan(...any) error }

func scan(r scanner) (*Sandbox, error) {
	var sb Sandbox
	var resources, spec, labels string
	var created, active int64
	var exp sql.NullInt64
	var start int64
	err := r.Scan(&sb.Name, &sb.UUID, &sb.Image, &sb.ImageDigest, &sb.Backend, &sb.Status, &sb.StopReason, &sb.Profile,
		&resources, &spec, &labels, &sb.Description, &created, &active, &exp, &sb.SupervisorPID, &start)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	sb.Resources, sb.Spec = json.RawMessage(resources), json.RawMessage(spec)
	if err := json.Unmarshal([]byte(labels), &sb.Labels); err != nil {
		return nil, fmt.Errorf("labels of %s: %w", sb.Name, err)
	}
	if len(sb.Labels) == 0 {
		sb.Labels = nil
	}
	sb.CreatedAt = time.Unix(0, created).UTC()
	sb.LastActivityAt = time.Unix(0, active).UTC()
	if exp.Valid {
		t := time.Unix(0, exp.Int64).UTC()
		sb.ExpiresAt = &t
	}
	sb.SupervisorStart = uint64(start)
	return &sb, nil
}
