// Package storetest gives tests a fresh, migrated database on each backend:
// a SQLite file in the test's temp dir, and a private schema in the
// PostgreSQL database named by ANVIL_TEST_PG (default: the local test
// database with trust auth).
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/server/store"
)

// DefaultPG is the PostgreSQL the project's machines run.
const DefaultPG = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Backends are the database kinds every storage-touching test runs on.
var Backends = []string{"sqlite", "postgres"}

// Each runs fn as a subtest once per backend, each with a fresh database.
func Each(t *testing.T, fn func(t *testing.T, setting string, db *store.DB)) {
	t.Helper()
	for _, b := range Backends {
		t.Run(b, func(t *testing.T) {
			setting := Setting(t, b)
			fn(t, setting, Open(t, setting))
		})
	}
}

// Setting returns a database setting for a fresh database of the given
// backend that the current schema opens, cleaned up when the test ends.
// PostgreSQL's is already migrated: a copy of a template database this
// test process migrates once (see template), since migrating costs
// PostgreSQL some 200 DDL statements (0.6 s alone, 2 s under the suite's
// load) and copying a database 0.2 s. SQLite's is a new file, which
// migrating costs 50–80 ms. Tests of migration itself take EmptySetting.
func Setting(t testing.TB, backend string) string {
	t.Helper()
	switch backend {
	case "sqlite":
		return filepath.Join(t.TempDir(), "anvil.db")
	case "postgres":
		return postgresCopy(t)
	}
	t.Fatalf("unknown backend %q", backend)
	return ""
}

// EmptySetting returns a setting for a fresh database of the given
// backend with nothing in it, cleaned up when the test ends.
func EmptySetting(t testing.TB, backend string) string {
	t.Helper()
	if backend == "postgres" {
		return PostgresSchema(t)
	}
	return Setting(t, backend)
}

// Open opens and migrates the database behind setting.
func Open(t testing.TB, setting string) *store.DB {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, setting)
	if err != nil {
		t.Fatalf("open %s: %v", store.Redacted(setting), err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

// PostgresSchema creates a private, empty schema in the test PostgreSQL
// and returns a setting whose search_path points at it.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	base, admin := adminDB(t)
	// The search index's pg_trgm lives in public: installed by the first
	// test's migration it would land in that test's schema, and dropping
	// the schema would drop it, and every other test's index with it.
	// Test processes race to install it; the loser finds it installed.
	if _, err := admin.Exec("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public"); err != nil {
		var have bool
		if admin.QueryRow("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_trgm')").Scan(&have); !have {
			t.Fatalf("install pg_trgm: %v", err)
		}
	}
	schema := "t_" + randomHex()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() { admin.Exec("DROP SCHEMA " + schema + " CASCADE") })
	return withParam(t, base, "search_path", schema)
}

// adminDB returns the test PostgreSQL's setting and a connection to it,
// shared by the process. Without a reachable server the test is skipped,
// except in CI, where PostgreSQL is required.
func adminDB(t testing.TB) (string, *sql.DB) {
	t.Helper()
	base := os.Getenv("ANVIL_TEST_PG")
	if base == "" {
		base = DefaultPG
	}
	admin.once.Do(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
		}
		admin.db, admin.err = db, err
	})
	if admin.err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is required in CI: %v", store.Redacted(base), admin.err)
		}
		t.Skipf("skipping: PostgreSQL at %s not reachable: %v", store.Redacted(base), admin.err)
	}
	return base, admin.db
}

var admin struct {
	once sync.Once
	db   *sql.DB
	err  error
}

// tpl is this process's template: a database migrated once, named
// anvil_tpl_<random>, which each test's database copies. A session
// advisory lock on its name, held by a connection of its own for the
// life of the process, says it is in use; a process killed before its
// tests' cleanups ran leaves its template and copies (named after it)
// unlocked, and the next process to make a template drops them.
var tpl struct {
	once sync.Once
	name string
	err  error
}

// tplPrefix starts every template's name, and so every copy's.
const tplPrefix = "anvil_tpl_"

// postgresCopy returns the setting of a new database copied from this
// process's migrated template, dropped when the test ends (with FORCE, so
// a connection the test left open does not keep it).
func postgresCopy(t testing.TB) string {
	t.Helper()
	base, db := adminDB(t)
	tpl.once.Do(func() { tpl.name, tpl.err = makeTemplate(base, db) })
	if tpl.err != nil {
		t.Fatalf("make the migrated template database: %v", tpl.err)
	}
	name := tpl.name + "_" + randomHex()
	// WAL_LOG (PostgreSQL 15's default) copies block by block and needs
	// no checkpoint, where FILE_COPY waits for one (1–2 s here).
	if _, err := db.Exec("CREATE DATABASE " + name + " TEMPLATE " + tpl.name); err != nil {
		t.Fatalf("copy the template database: %v", err)
	}
	t.Cleanup(func() { db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	return withDatabase(base, name)
}

// makeTemplate drops what killed processes left, then creates and
// migrates this process's template, and locks it for the process's life.
func makeTemplate(base string, db *sql.DB) (string, error) {
	ctx := context.Background()
	if err := dropOrphans(ctx, db); err != nil {
		return "", err
	}
	name := tplPrefix + randomHex()
	lock, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	// Never returned to the pool: the lock lasts as long as the process.
	if _, err := lock.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", err
	}
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		return "", err
	}
	s, err := store.Open(ctx, withDatabase(base, name))
	if err != nil {
		return "", err
	}
	// Closed before any copy: PostgreSQL copies only a database no one
	// is connected to.
	defer s.Close()
	return name, s.Migrate(ctx)
}

// dropOrphans drops the templates, and their copies, of processes that
// are gone: those whose lock no one holds.
func dropOrphans(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SELECT datname FROM pg_database WHERE datname LIKE '"+tplPrefix+"%' AND NOT datistemplate")
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, n := range names {
		owner := n[:len(tplPrefix)+12]
		var free bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", owner).Scan(&free); err != nil {
			return err
		}
		if !free {
			continue
		}
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock(hashtext($1))", owner); err != nil {
			return err
		}
		// Another process may drop it first.
		conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
	}
	return nil
}

func randomHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withDatabase returns base naming database name instead; base parsed
// when adminDB connected with it.
func withDatabase(base, name string) string {
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

// withParam returns base with the query parameter k set to v.
func withParam(t testing.TB, base, k, v string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// LoadRelease loads an upgrade fixture (a directory such as
// server/store/testdata/release-5b855fe) into the empty database behind
// setting as that release left it: the release's own schema for the
// backend, then its rows. Nothing is migrated.
func LoadRelease(t testing.TB, setting, dir string) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, setting)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	backend := "sqlite"
	if db.Dialect == dialect.Postgres {
		backend = "postgres"
	}
	for _, f := range []string{"schema." + backend + ".sql", "data.sql"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL.ExecContext(ctx, string(raw)); err != nil {
			t.Fatalf("load %s: %v", f, err)
		}
	}
	if backend == "postgres" {
		// pg_dump would restore the identity sequences; the rows came
		// with their ids, so the sequences start after them.
		_, err := db.SQL.ExecContext(ctx, `DO $$ DECLARE t text; BEGIN
			FOR t IN SELECT table_name FROM information_schema.columns
				WHERE table_schema = current_schema() AND column_name = 'id' AND is_identity = 'YES' LOOP
				EXECUTE format('SELECT setval(pg_get_serial_sequence(%L, ''id''), (SELECT COALESCE(MAX(id), 0) + 1 FROM %I), false)', t, t);
			END LOOP; END $$`)
		if err != nil {
			t.Fatalf("advance the identity sequences: %v", err)
		}
	}
}

// PlannerRows is how many rows the planner's statistics say nodes holds
// (SQLite's first figure for an index is its table's row count), or an
// error when there are none yet.
func PlannerRows(db *store.DB) (int, error) {
	q := "SELECT CAST(stat AS INTEGER) FROM sqlite_stat1 WHERE tbl = 'nodes' AND idx = 'nodes_uuid_key'"
	if db.Dialect == dialect.Postgres {
		q = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'nodes'::regclass"
	}
	var n int
	err := db.SQL.QueryRowContext(context.Background(), q).Scan(&n)
	return n, err
}
