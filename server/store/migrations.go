package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/schema"

	"github.com/anvilproject/anvil/server/store/baseline"
)

// A database's schema version is how many of Migrations it has applied,
// one row each in schema_migrations. The table is Anvil's own, not ent's,
// so ent's auto-migration (which the releases before versioning ran at
// every start, and which an old replica still runs) leaves it alone.
//
// Steps are ordered Go functions rather than SQL files per dialect: the
// schema holds objects only one dialect has (SQLite's expression indexes)
// and data moves that need Go, ent's own diff writes each dialect's DDL
// for a frozen snapshot of its tables (Migration.CreateTables), and
// every step runs in one transaction with the row that records it, which
// both SQLite and PostgreSQL allow for DDL. A step that fails leaves the
// database at the version before it.
const versionTable = "schema_migrations"

// pgLock makes PostgreSQL transactions that change the schema take turns:
// keyed by schema, so replicas of one database wait for each other and
// databases in other schemas do not.
const pgLock = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '." + versionTable + "'))"

// Step is one migration. Steps are never edited or reordered once
// released: databases out there have applied them. Changing the ent
// schema takes a new step that brings a database from the previous
// step's schema to the new one (TestMigrationsMatchSchema fails until it
// does).
type Step struct {
	// Name says what the step does; db upgrade prints it.
	Name string
	Up   func(ctx context.Context, m *Migration) error
}

// Migrations are the steps every database takes, in order. Step 1 is the
// schema of the last release before versioning, and also brings a
// database made by any earlier release (whose ent auto-migration only
// ever added) up to it.
var Migrations = []Step{
	{Name: "baseline: the schema of the last unversioned release (5b855fe)", Up: baselineStep},
	{Name: "nodes: the portal's group columns indexed with name and id, replacing their single-column indexes", Up: groupIndexesStep},
}

// groupIndexesStep indexes each column the portal groups its node list
// by (owner, lessee, state, class) with name and id after it, the order
// of a grouped page, so a page 40 deep walks an index instead of sorting
// every node. Each new index serves lookups on its first column too, so
// the single-column ones go: they only cost every node update.
func groupIndexesStep(ctx context.Context, m *Migration) error {
	for _, col := range []string{"owner", "lessee", "provision_state", "resource_class"} {
		if err := m.Exec(ctx, "CREATE INDEX IF NOT EXISTS node_"+col+"_name_id ON nodes ("+col+", name, id)"); err != nil {
			return err
		}
		if err := m.Exec(ctx, "DROP INDEX IF EXISTS node_"+col); err != nil {
			return err
		}
	}
	return nil
}

// Migration is what a step runs on: one transaction, committed with the
// record of the step. Steps speak SQL, not ent's generated code: that
// code follows the newest schema, and would name columns a later step
// adds when an old database takes this step.
type Migration struct {
	// SQL runs statements in the transaction.
	SQL     entsql.ExecQuerier
	Dialect string
	drv     dialect.Driver
}

// Bind writes a query's ? placeholders as PostgreSQL's $1, $2, … there.
func (m *Migration) Bind(q string) string {
	if m.Dialect != dialect.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CreateTables adds the tables, columns and indexes of a frozen schema
// snapshot (a copy of ent/migrate/schema.go, as baseline is) that the
// database lacks, with ent's auto-migration; it drops nothing.
func (m *Migration) CreateTables(ctx context.Context, tables []*schema.Table) error {
	a, err := schema.NewMigrate(m.drv, schema.WithDropColumn(false), schema.WithDropIndex(false))
	if err != nil {
		return err
	}
	return a.Create(ctx, tables...)
}

// Exec runs statements in order.
func (m *Migration) Exec(ctx context.Context, stmts ...string) error {
	for _, s := range stmts {
		if _, err := m.SQL.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// txDriver is ent's driver on one open transaction: ent's migration and
// client open "transactions" of their own, which join this one.
type txDriver struct {
	tx      *entsql.Tx
	dialect string
}

func (t txDriver) Exec(ctx context.Context, query string, args, v any) error {
	return t.tx.Exec(ctx, query, args, v)
}

func (t txDriver) Query(ctx context.Context, query string, args, v any) error {
	return t.tx.Query(ctx, query, args, v)
}

func (t txDriver) Tx(context.Context) (dialect.Tx, error) { return dialect.NopTx(t), nil }
func (t txDriver) Dialect() string                        { return t.dialect }
func (t txDriver) Close() error                           { return nil }

// NewerError is the refusal of a database that a newer Anvil upgraded:
// this binary does not know what its later steps changed.
type NewerError struct{ Database, Binary int }

func (e *NewerError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this anvil's %d: a newer anvil upgraded it; run that anvil (or one newer), or restore the backup taken before the upgrade", e.Database, e.Binary)
}

// PendingError is the refusal to serve a database with migrations this
// binary has not applied, when it is not to apply them itself.
type PendingError struct {
	Database int
	Pending  []Step
}

func (e *PendingError) Error() string {
	names := make([]string, len(e.Pending))
	for i, s := range e.Pending {
		names[i] = fmt.Sprintf("%d %s", e.Database+i+1, s.Name)
	}
	return fmt.Sprintf("database schema version %d needs %d migration(s) (%s): run anvil db upgrade, or serve with --auto-migrate", e.Database, len(e.Pending), strings.Join(names, "; "))
}

// Version reads the database's schema version without changing anything:
// 0 for an empty database or one made before versioned migrations.
func (d *DB) Version(ctx context.Context) (int, error) {
	return version(ctx, d.SQL, d.Dialect)
}

func version(ctx context.Context, q entsql.ExecQuerier, dia string) (int, error) {
	exists := "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '" + versionTable + "'"
	if dia == dialect.Postgres {
		exists = "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = '" + versionTable + "'"
	}
	n, err := scanInt(ctx, q, exists)
	if err != nil || n == 0 {
		return 0, err
	}
	return scanInt(ctx, q, "SELECT COALESCE(MAX(version), 0) FROM "+versionTable)
}

func scanInt(ctx context.Context, q entsql.ExecQuerier, query string) (int, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	defer rows.Close()
	var n int
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("read the schema version: %w", err)
		}
	}
	return n, rows.Err()
}

// Pending returns the database's version and the steps of steps it has
// yet to apply, or a NewerError when it has applied more than steps
// holds.
func (d *DB) Pending(ctx context.Context, steps []Step) (int, []Step, error) {
	v, err := d.Version(ctx)
	if err != nil {
		return 0, nil, err
	}
	if v > len(steps) {
		return v, nil, &NewerError{Database: v, Binary: len(steps)}
	}
	return v, steps[v:], nil
}

// RequireCurrent refuses, without changing anything, a database that is
// not at Migrations' version: a PendingError or a NewerError.
func (d *DB) RequireCurrent(ctx context.Context) error {
	v, pending, err := d.Pending(ctx, Migrations)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return &PendingError{Database: v, Pending: pending}
	}
	return nil
}

// Migrate applies Migrations: Upgrade without the report.
func (d *DB) Migrate(ctx context.Context) error {
	_, err := d.Upgrade(ctx)
	return err
}

// Upgrade applies the Migrations the database lacks and returns the
// versions it applied (none when it was current).
func (d *DB) Upgrade(ctx context.Context) ([]int, error) {
	return d.Apply(ctx, Migrations)
}

// Apply brings the database to len(steps), a step at a time, each in a
// transaction with its schema_migrations row, and returns the versions
// it applied. Processes upgrading the same database at once take turns
// (SQLite's write lock, PostgreSQL's advisory lock on the schema), and
// each reads the version again under it, so a step runs once. A database
// past len(steps) is refused with a NewerError.
//
// On PostgreSQL it then makes sure of the name search's trigram index,
// whose extension may be installed any time after the step that wanted
// it (see searchIndex).
func (d *DB) Apply(ctx context.Context, steps []Step) ([]int, error) {
	var applied []int
	for {
		v, done, err := d.applyNext(ctx, steps)
		if err != nil {
			return applied, err
		}
		if done {
			break
		}
		applied = append(applied, v)
	}
	if d.Dialect == dialect.Postgres {
		if err := d.searchIndex(ctx); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// applyNext applies the database's next step, if any, and returns its
// version; done when there was none.
func (d *DB) applyNext(ctx context.Context, steps []Step) (int, bool, error) {
	etx, err := entsql.OpenDB(d.Dialect, d.SQL).Tx(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("migrate database: %w", err)
	}
	tx := etx.(*entsql.Tx)
	defer tx.Rollback()
	if d.Dialect == dialect.Postgres {
		if _, err := tx.ExecContext(ctx, pgLock); err != nil {
			return 0, false, fmt.Errorf("migrate database: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+versionTable+" (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"); err != nil {
		return 0, false, fmt.Errorf("migrate database: create %s: %w", versionTable, err)
	}
	v, err := version(ctx, tx, d.Dialect)
	if err != nil {
		return 0, false, err
	}
	if v > len(steps) {
		return 0, false, &NewerError{Database: v, Binary: len(steps)}
	}
	if v == len(steps) {
		return v, true, tx.Commit()
	}
	step := steps[v]
	drv := txDriver{tx: tx, dialect: d.Dialect}
	m := &Migration{SQL: tx, Dialect: d.Dialect, drv: drv}
	if err := step.Up(ctx, m); err != nil {
		return 0, false, fmt.Errorf("migrate database: step %d (%s): %w", v+1, step.Name, err)
	}
	rec := "INSERT INTO " + versionTable + " (version, name, applied_at) VALUES (?, ?, ?)"
	if d.Dialect == dialect.Postgres {
		rec = "INSERT INTO " + versionTable + " (version, name, applied_at) VALUES ($1, $2, $3)"
	}
	if _, err := tx.ExecContext(ctx, rec, v+1, step.Name, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return 0, false, fmt.Errorf("migrate database: record step %d: %w", v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("migrate database: step %d (%s): %w", v+1, step.Name, err)
	}
	return v + 1, false, nil
}

// baselineStep creates the schema of 5b855fe, and brings a database an
// earlier release made up to it: what that release's Migrate did at every
// start.
func baselineStep(ctx context.Context, m *Migration) error {
	if err := m.CreateTables(ctx, baseline.Tables); err != nil {
		return err
	}
	// Runbook names were once unique across owners, which let a project
	// squat a name the system wanted; (owner, name) is unique now.
	// node_parent_node_set, which holds child nodes only, replaces the
	// index of every node's parent_node (see the Node schema).
	if err := m.Exec(ctx, "DROP INDEX IF EXISTS runbooks_name_key", "DROP INDEX IF EXISTS node_parent_node"); err != nil {
		return err
	}
	if err := moveRunbookDescriptions(ctx, m); err != nil {
		return fmt.Errorf("move runbook descriptions out of extra: %w", err)
	}
	if m.Dialect == dialect.Postgres {
		// PostgreSQL's own indexes are the search's, made after every
		// upgrade (see Apply).
		return nil
	}
	// The node list counts every matching node by provision state and
	// failure; SQLite would read each whole row (JSON and all) for that,
	// 10,000 of them on a large fleet, where this index holds all the
	// count and the portal's filters read. It uses an expression (so
	// ent's schema cannot declare it) and the count spells "last_error IS
	// NOT NULL" the same way. PostgreSQL's sequential scan is cheap
	// enough, and power_state in an index would cost its power-sync
	// updates their HOT path (so none of these is PostgreSQL's).
	//
	// The second holds the same led by resource class: SQLite prefers any
	// index that a "resource_class = ?" can search, so without it a class
	// filter read each node's row through node_resource_class, even one
	// class of all 10,000.
	//
	// The list's owner, lessee and power pick-lists count nodes by each
	// under parent_node IS NULL; with parent_node beside it an index
	// answers the count alone (0.8 ms) where the bare column's index read
	// each of 10,000 rows for its parent (5 ms).
	//
	// The list sorts by power state; SQLite would otherwise sort every
	// node's row for one page.
	if err := m.Exec(ctx,
		"CREATE INDEX IF NOT EXISTS node_list_counts ON nodes (provision_state, parent_node, fault, (last_error IS NOT NULL), power_state, maintenance, resource_class, name, uuid)",
		"CREATE INDEX IF NOT EXISTS node_list_class ON nodes (resource_class, provision_state, parent_node, fault, (last_error IS NOT NULL), power_state, maintenance, name, uuid)",
		"CREATE INDEX IF NOT EXISTS node_owner_parent ON nodes (owner, parent_node)",
		"CREATE INDEX IF NOT EXISTS node_lessee_parent ON nodes (lessee, parent_node)",
		"CREATE INDEX IF NOT EXISTS node_power_parent ON nodes (power_state, parent_node)",
		"CREATE INDEX IF NOT EXISTS node_power_state ON nodes (power_state)",
	); err != nil {
		return err
	}
	if err := rewriteSQLiteTimes(ctx, m.SQL); err != nil {
		return fmt.Errorf("rewrite times stored by an earlier release: %w", err)
	}
	return nil
}

// movedDescriptions marks, in settings, that moveRunbookDescriptions ran.
// The mark predates versioned migrations: a database that ran the move
// then keeps the extra.description its callers wrote since.
const movedDescriptions = "migrated:runbook_description"

// moveRunbookDescriptions moves what the portal's editor kept in a
// runbook's extra["description"], before runbooks had Ironic's 1.112
// description field, into that field, once: afterwards extra.description
// is an API caller's own data and stays where it was put.
func moveRunbookDescriptions(ctx context.Context, m *Migration) error {
	done, err := scanInt(ctx, m.SQL, `SELECT count(*) FROM settings WHERE "key" = '`+movedDescriptions+`'`)
	if err != nil || done > 0 {
		return err
	}
	rows, err := m.SQL.QueryContext(ctx, "SELECT id, extra FROM runbooks WHERE description IS NULL AND extra IS NOT NULL")
	if err != nil {
		return err
	}
	type move struct {
		id    int
		desc  string
		extra string
	}
	var moves []move
	for rows.Next() {
		var id int
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			rows.Close()
			return err
		}
		var extra map[string]any
		if err := json.Unmarshal(raw, &extra); err != nil {
			rows.Close()
			return fmt.Errorf("runbook %d: extra: %w", id, err)
		}
		desc, ok := extra["description"].(string)
		if !ok || desc == "" || utf8.RuneCountInString(desc) > 255 {
			continue
		}
		delete(extra, "description")
		b, err := json.Marshal(extra)
		if err != nil {
			rows.Close()
			return err
		}
		moves = append(moves, move{id, desc, string(b)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, mv := range moves {
		if _, err := m.SQL.ExecContext(ctx, m.Bind("UPDATE runbooks SET description = ?, extra = ? WHERE id = ?"), mv.desc, mv.extra, mv.id); err != nil {
			return err
		}
	}
	_, err = m.SQL.ExecContext(ctx, m.Bind(`INSERT INTO settings ("key", value) VALUES (?, ?)`), movedDescriptions, []byte("1"))
	return err
}
