// Package store opens Anvil's database (SQLite through a pure-Go driver, or
// PostgreSQL through pgx) and brings its schema up to date.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/migrate"
	"github.com/anvilproject/anvil/server/errs"
)

// DB is an open database: the ent client plus what callers need to know
// about the backend (locking and upsert syntax differ between the two).
type DB struct {
	*ent.Client
	SQL     *sql.DB
	Dialect string
	// Unindexed, after Migrate on PostgreSQL, says why the node search has
	// no trigram index (and so reads every node); nil when it has one.
	Unindexed error
	// grew carries Grew's signal to the conductor's statistics loop.
	grew chan struct{}
}

// Pool sizes the connection pool. Zero values take the backend's
// defaults: 8 open connections on SQLite, 32 on PostgreSQL, as many idle
// as open, no lifetime limit.
type Pool struct {
	MaxOpen int
	// MaxIdle defaults to MaxOpen: fewer idle than open connections makes
	// a busy server close and reopen connections on every burst, which on
	// PostgreSQL is a new backend process each time.
	MaxIdle int
	// MaxLifetime recycles connections, e.g. to follow a failover behind
	// a proxy; 0 keeps them.
	MaxLifetime time.Duration
}

// Validate rejects negative sizes and more idle than open connections.
func (p Pool) Validate() error {
	switch {
	case p.MaxOpen < 0:
		return fmt.Errorf("--db-max-open %d: must be 0 (the default) or more", p.MaxOpen)
	case p.MaxIdle < 0:
		return fmt.Errorf("--db-max-idle %d: must be 0 (as many as --db-max-open) or more", p.MaxIdle)
	case p.MaxLifetime < 0:
		return fmt.Errorf("--db-conn-max-lifetime %s: must be 0 (no limit) or more", p.MaxLifetime)
	case p.MaxOpen > 0 && p.MaxIdle > p.MaxOpen:
		return fmt.Errorf("--db-max-idle %d: more than --db-max-open %d", p.MaxIdle, p.MaxOpen)
	}
	return nil
}

// Open parses a database setting — a file path, sqlite://PATH or
// postgres://… — and opens it with the default pool. It does not migrate;
// call Migrate.
func Open(ctx context.Context, setting string) (*DB, error) {
	return OpenPool(ctx, setting, Pool{})
}

// OpenPool is Open with the pool sized by p.
func OpenPool(ctx context.Context, setting string, p Pool) (*DB, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	drv, dsn, dia, err := parse(setting)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(drv, dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if p.MaxOpen == 0 {
		// SQLite allows one writer at a time; a small pool with WAL keeps
		// readers concurrent while the busy timeout serialises writers
		// instead of failing them with SQLITE_BUSY.
		p.MaxOpen = 8
		if dia == dialect.Postgres {
			p.MaxOpen = 32
		}
	}
	if p.MaxIdle == 0 {
		p.MaxIdle = p.MaxOpen
	}
	db.SetMaxOpenConns(p.MaxOpen)
	db.SetMaxIdleConns(p.MaxIdle)
	db.SetConnMaxLifetime(p.MaxLifetime)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dia, db)))
	return &DB{Client: client, SQL: db, Dialect: dia, grew: make(chan struct{}, 1)}, nil
}

// searchIndex gives PostgreSQL indexes for the portal's search, which
// matches any part of a name (ILIKE '%q%') or the start of a UUID (LIKE
// 'q%'): neither is served by a default B-tree (LIKE's prefix needs the
// "C" collation or pattern operators), so each of the page's two queries
// read all 10,000 nodes. A trigram index answers the name, under the "C"
// collation the search's ILIKE uses, and a pattern-operator B-tree the
// UUID prefix; PostgreSQL ORs the two bitmaps. A trigram index of the UUID
// too would be one index, but every step of a run rewrites its node's row
// (provision state and lock are indexed, so the update is never HOT) and
// then inserts all of a row's trigrams again: the 38 of a UUID cost a
// quarter of the cleaning rate.
//
// pg_trgm ships with PostgreSQL and is a trusted extension since 13, so
// whoever may create tables may install it; where it is refused, names
// are searched by reading every node, and Unindexed says why. The
// operator class is named with the extension's schema, which need not be
// on this connection's search_path. fastupdate is off: its pending list,
// which batches index inserts until a VACUUM, is read by every search and
// costed so by the planner, which then read every node instead.
//
// It runs after every upgrade, in a transaction under the upgrade's lock,
// so replicas starting together do not race on the same index name.
func (d *DB) searchIndex(ctx context.Context) error {
	tx, err := d.SQL.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate database: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, pgLock); err != nil {
		return fmt.Errorf("migrate database: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "CREATE INDEX IF NOT EXISTS node_uuid_prefix ON nodes (uuid varchar_pattern_ops)"); err != nil {
		return fmt.Errorf("migrate database: create the node UUID prefix index: %w", err)
	}
	const where = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"
	var schema string
	err = tx.QueryRowContext(ctx, where).Scan(&schema)
	if errors.Is(err, sql.ErrNoRows) {
		// The extension is the database's, not the schema's: anvil in
		// another schema may install it first, and then this CREATE
		// fails on the catalogue's unique name; the second look finds it
		// either way. The savepoint keeps the transaction usable after a
		// refusal.
		if _, err := tx.ExecContext(ctx, "SAVEPOINT pg_trgm"); err != nil {
			return fmt.Errorf("migrate database: %w", err)
		}
		_, create := tx.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_trgm")
		if create != nil {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT pg_trgm"); err != nil {
				return fmt.Errorf("migrate database: %w", err)
			}
		}
		if err = tx.QueryRowContext(ctx, where).Scan(&schema); errors.Is(err, sql.ErrNoRows) {
			d.Unindexed = fmt.Errorf("install the pg_trgm extension: %w", create)
			return tx.Commit()
		}
	}
	if err != nil {
		return fmt.Errorf("migrate database: look up pg_trgm: %w", err)
	}
	d.Unindexed = nil
	if _, err := tx.ExecContext(ctx, "CREATE INDEX IF NOT EXISTS node_search ON nodes USING gin (name COLLATE \"C\" "+schema+".gin_trgm_ops) WITH (fastupdate = off)"); err != nil {
		return fmt.Errorf("migrate database: create the node name search index: %w", err)
	}
	return tx.Commit()
}

// Analyze refreshes the planner's statistics. Without them both
// databases guess, and guess wrong for the node list: SQLite sorts all
// nodes for a page it could read from an index, PostgreSQL (whose
// autovacuum may be off or not yet have run) estimates 7 rows for
// 10,000. The server runs it at start-up, after migrating.
//
// PostgreSQL samples, so all of Anvil's tables (and only those: a bare
// ANALYZE would visit every schema in the database). SQLite reads each
// index in full, a quarter of a second for 10,000 nodes, so only the
// tables the node list reads and not the ever-growing history; a
// sampled ANALYZE (analysis_limit) would cap how many rows one value is
// thought to match, and a resource class all nodes share looked
// selective again.
func (d *DB) Analyze(ctx context.Context) error {
	stmts := []string{"ANALYZE " + migrate.NodesTable.Name, "ANALYZE " + migrate.TraitsTable.Name}
	if d.Dialect == dialect.Postgres {
		names := make([]string, len(migrate.Tables))
		for i, t := range migrate.Tables {
			names[i] = `"` + t.Name + `"`
		}
		stmts = []string{"ANALYZE " + strings.Join(names, ", ")}
	}
	for _, s := range stmts {
		if _, err := d.SQL.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("analyze database: %w", err)
		}
	}
	return nil
}

// Reanalyze runs Analyze again when the node count has moved by more than
// a tenth (or from none) since the count given, and returns the count
// the statistics now reflect. Statistics taken at start-up describe the
// fleet of that moment: a server started empty and then given 10,000
// nodes would plan every list as if the table held none.
func (d *DB) Reanalyze(ctx context.Context, analyzed int) (int, error) {
	n, err := d.Node.Query().Count(ctx)
	if err != nil {
		return analyzed, err
	}
	if diff := n - analyzed; max(diff, -diff)*10 > analyzed {
		if err := d.Analyze(ctx); err != nil {
			return analyzed, err
		}
		return n, nil
	}
	return analyzed, nil
}

// Grew says rows were just added to the tables lists read, so the
// statistics may be out of date now rather than in ten minutes: a fleet
// enrolled through the API one node at a time is listed at once, and
// PostgreSQL, believing the table empty, then sorts all of it for every
// page (9 times slower at 10,000 nodes). It never blocks.
func (d *DB) Grew() {
	select {
	case d.grew <- struct{}{}:
	default:
	}
}

// Growth delivers Grew's signals, coalesced.
func (d *DB) Growth() <-chan struct{} { return d.grew }

// Close closes the client and the pool.
func (d *DB) Close() error { return d.Client.Close() }

// Ping reports whether the database answers, for /readyz.
func (d *DB) Ping(ctx context.Context) error { return d.SQL.PingContext(ctx) }

// SQLiteFile returns the database file a SQLite setting names; false for
// any other database.
func SQLiteFile(setting string) (string, bool) {
	drv, _, _, err := parse(setting)
	if err != nil || drv != "sqlite" {
		return "", false
	}
	if setting == "" {
		setting = "anvil.db"
	}
	f, _, _ := strings.Cut(strings.TrimPrefix(setting, "sqlite://"), "?")
	return f, true
}

func parse(setting string) (driver, dsn, dia string, err error) {
	switch {
	case setting == "":
		return parse("anvil.db")
	case strings.HasPrefix(setting, "postgres://"), strings.HasPrefix(setting, "postgresql://"):
		return "pgx", setting, dialect.Postgres, nil
	case strings.HasPrefix(setting, "sqlite://"):
		return parse(strings.TrimPrefix(setting, "sqlite://"))
	case strings.Contains(setting, "://"):
		return "", "", "", fmt.Errorf("database %q: use a file path, sqlite://PATH or postgres://…", redact(setting))
	}
	path := setting
	q := url.Values{}
	if i := strings.IndexByte(setting, '?'); i >= 0 {
		path = setting[:i]
		if q, err = url.ParseQuery(setting[i+1:]); err != nil {
			return "", "", "", fmt.Errorf("database %q: %w", setting, err)
		}
	}
	// WAL lets readers run beside the single writer; the busy timeout makes
	// concurrent writers wait rather than fail; foreign keys are off by
	// default in SQLite and ent's cascades need them.
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// SQLite's page cache is per connection, 2 MB by default, outside
	// Go's heap and kept while the connection lives: with the pool's 8
	// connections, up to 16 MB that mostly repeats the operating system's
	// own cache of the same file. 1 MiB each halves that (docs/memory.md);
	// a setting's own cache_size wins.
	if !slices.ContainsFunc(q["_pragma"], func(p string) bool { return strings.HasPrefix(strings.ToLower(p), "cache_size") }) {
		q.Add("_pragma", "cache_size(-1024)")
	}
	q.Set("_txlock", "immediate")
	q.Set("_time_format", "sqlite") // see sqliteTimeFormat
	return "sqlite", "file:" + path + "?" + q.Encode(), dialect.SQLite, nil
}

// redact hides a password in a database URL so errors can be logged.
func redact(setting string) string {
	u, err := url.Parse(setting)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

// Redacted is the setting as it may appear in logs.
func Redacted(setting string) string {
	if strings.Contains(setting, "://") {
		return redact(setting)
	}
	return setting
}

// LockAttempts and LockInterval are how a request waits for a node that
// another operation holds, as Ironic's [conductor]
// node_locked_retry_attempts (3) and node_locked_retry_interval (1 s) do:
// a client that polls a node into its new state and acts at once would
// otherwise meet the lock of the work that set the state, released a
// moment later.
var (
	LockAttempts = 3
	LockInterval = time.Second
)

// RetryLocked runs fn until it succeeds or fails with anything but
// errs.NodeLocked, at most LockAttempts times. fn must have done nothing
// when it reports the node locked.
func RetryLocked(ctx context.Context, fn func() error) error {
	for i := 1; ; i++ {
		err := fn()
		if i >= LockAttempts || !errs.IsLocked(err) {
			return err
		}
		t := time.NewTimer(LockInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// WithTx runs fn in a transaction and commits when it returns nil, so a
// multi-row change is all or nothing. A transaction refused because a
// node is locked rolls back and is run again (RetryLocked), so fn must
// write nothing outside it.
func WithTx(ctx context.Context, db *DB, fn func(tx *ent.Client) error) error {
	return RetryLocked(ctx, func() error { return withTx(ctx, db, fn) })
}

func withTx(ctx context.Context, db *DB, fn func(tx *ent.Client) error) error {
	tx, err := db.Tx(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx.Client()); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
