package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent/migrate"
)

// ErrUseDump is Backup's answer on PostgreSQL, whose own tools make a
// consistent copy of a running database.
var ErrUseDump = errors.New("on PostgreSQL back up with pg_dump (e.g. pg_dump -Fc -f anvil.dump DATABASE_URL) and restore with pg_restore; see the README's Backup and restore")

// Backup writes a consistent copy of a SQLite database to path while
// others keep reading and writing it: VACUUM INTO reads one snapshot, as
// any reader does under WAL. The copy is written to a temporary name
// beside path and renamed, so path is either absent or complete.
func (d *DB) Backup(ctx context.Context, path string) error {
	if d.Dialect != dialect.SQLite {
		return ErrUseDump
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("backup %s: the file exists; name a new one", path)
	}
	tmp := path + ".partial"
	_ = os.Remove(tmp)
	// A backup holds what the database holds: BMC passwords, the portal's
	// session keys, token and password hashes. It is created empty, 0600,
	// before SQLite fills it (VACUUM INTO writes into an empty file and
	// keeps its mode), so it is never readable by others, not even while
	// being written.
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if _, err := d.SQL.ExecContext(ctx, "VACUUM INTO ?", tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("backup %s: %w", path, err)
	}
	return nil
}

// Check reports what is wrong with the database, without changing it:
// on SQLite, what PRAGMA integrity_check finds; on both, migrations it
// lacks or a schema version newer than this binary's, and every table
// and column the schema expects that the database lacks (anvil db
// upgrade adds them). No problems means the database is fit to serve.
func (d *DB) Check(ctx context.Context) ([]string, error) {
	var problems []string
	if d.Dialect == dialect.SQLite {
		rows, err := d.SQL.QueryContext(ctx, "PRAGMA integrity_check")
		if err != nil {
			return nil, fmt.Errorf("integrity check: %w", err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return nil, fmt.Errorf("integrity check: %w", err)
			}
			if s != "ok" {
				problems = append(problems, "integrity: "+s)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("integrity check: %w", err)
		}
	}
	v, pending, err := d.Pending(ctx, Migrations)
	var newer *NewerError
	switch {
	case errors.As(err, &newer):
		problems = append(problems, "schema: "+newer.Error())
	case err != nil:
		return nil, err
	case len(pending) > 0:
		problems = append(problems, "schema: "+(&PendingError{Database: v, Pending: pending}).Error())
	}
	for _, t := range migrate.Tables {
		have, err := d.columns(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		if len(have) == 0 {
			problems = append(problems, fmt.Sprintf("schema: table %s is missing; run anvil db upgrade", t.Name))
			continue
		}
		var missing []string
		for _, c := range t.Columns {
			if !slices.Contains(have, c.Name) {
				missing = append(missing, c.Name)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("schema: table %s lacks column(s) %s; run anvil db upgrade", t.Name, strings.Join(missing, ", ")))
		}
	}
	if len(pending) == 0 && newer == nil {
		idx, err := d.checkIndexes(ctx)
		if err != nil {
			return nil, err
		}
		problems = append(problems, idx...)
	}
	return problems, nil
}

// postgresOnlyIndexes are made on PostgreSQL alone (see searchIndex):
// allowed there, never required (the trigram index needs an extension
// that may not be installable). sqliteOnlyIndexes are the node list's
// that baselineStep makes on SQLite alone. The reference schema is a
// SQLite one, so these lists say where PostgreSQL's differs; a new
// dialect-only index that is not added here fails TestCheckIndexes on
// PostgreSQL.
var (
	postgresOnlyIndexes = []string{"node_uuid_prefix", "node_search"}
	sqliteOnlyIndexes   = []string{"node_list_counts", "node_list_class", "node_owner_parent", "node_lessee_parent", "node_power_parent", "node_power_state"}
)

// checkIndexes compares the database's indexes, by table and name, with
// those of a new database this anvil's migrations make (a scratch SQLite
// file): a missing one slows or, if unique, unguards what relies on it;
// an unexpected one is what an anvil from before versioned migrations
// re-creates at start (such as the global unique index on runbook names
// that per-owner names replaced), and refuses rows it should not.
func (d *DB) checkIndexes(ctx context.Context) ([]string, error) {
	dir, err := os.MkdirTemp("", "anvil-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ref, err := Open(ctx, filepath.Join(dir, "reference.db"))
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	if err := ref.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("the reference schema: %w", err)
	}
	want, err := ref.indexes(ctx)
	if err != nil {
		return nil, err
	}
	have, err := d.indexes(ctx)
	if err != nil {
		return nil, err
	}
	var problems []string
	for key := range want {
		table, name, _ := strings.Cut(key, ".")
		if !have[key] && (d.Dialect == dialect.SQLite || !slices.Contains(sqliteOnlyIndexes, name)) {
			problems = append(problems, fmt.Sprintf("schema: table %s lacks index %s, which this anvil's migrations create; restore a backup, or recreate it as docs/reference/migrations.md describes", table, name))
		}
	}
	for key := range have {
		table, name, _ := strings.Cut(key, ".")
		if want[key] || d.Dialect == dialect.Postgres && slices.Contains(postgresOnlyIndexes, name) {
			continue
		}
		problems = append(problems, fmt.Sprintf("schema: table %s has index %s, which this anvil's schema does not (an anvil from before versioned migrations may have re-created it); drop it: DROP INDEX %s", table, name, name))
	}
	slices.Sort(problems)
	return problems, nil
}

// indexes is the set of "table.index" the database has, without the ones
// the database makes for primary keys itself.
func (d *DB) indexes(ctx context.Context) (map[string]bool, error) {
	q := "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%'"
	if d.Dialect == dialect.Postgres {
		q = "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname NOT LIKE '%\\_pkey'"
	}
	rows, err := d.SQL.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("listing indexes: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var table, name string
		if err := rows.Scan(&table, &name); err != nil {
			return nil, fmt.Errorf("listing indexes: %w", err)
		}
		out[table+"."+name] = true
	}
	return out, rows.Err()
}

// columns lists the columns a table has (none when it does not exist).
func (d *DB) columns(ctx context.Context, table string) ([]string, error) {
	return tableColumns(ctx, d.SQL, d.Dialect, table)
}

// tableColumns is columns on a connection or in a transaction.
func tableColumns(ctx context.Context, db entsql.ExecQuerier, dia, table string) ([]string, error) {
	q := "SELECT name FROM pragma_table_info(?)"
	if dia == dialect.Postgres {
		q = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1"
	}
	rows, err := db.QueryContext(ctx, q, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("columns of %s: %w", table, err)
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// OpenExisting is Open for tools that inspect a database: a SQLite path
// that does not exist is an error rather than a new, empty database.
func OpenExisting(ctx context.Context, setting string) (*DB, error) {
	_, dsn, dia, err := parse(setting)
	if err != nil {
		return nil, err
	}
	if dia == dialect.SQLite {
		path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
	}
	return Open(ctx, setting)
}
