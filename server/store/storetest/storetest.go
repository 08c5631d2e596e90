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

// Setting returns a database setting for a fresh, empty database of the
// given backend, cleaned up when the test ends.
func Setting(t testing.TB, backend string) string {
	t.Helper()
	switch backend {
	case "sqlite":
		return filepath.Join(t.TempDir(), "anvil.db")
	case "postgres":
		return PostgresSchema(t)
	}
	t.Fatalf("unknown backend %q", backend)
	return ""
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

// PostgresSchema creates a private schema in the test PostgreSQL and
// returns a setting whose search_path points at it. Without a reachable
// server the test is skipped, except in CI, where PostgreSQL is required.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	base := os.Getenv("ANVIL_TEST_PG")
	if base == "" {
		base = DefaultPG
	}
	admin, err := sql.Open("pgx", base)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = admin.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is required in CI: %v", store.Redacted(base), err)
		}
		t.Skipf("skipping: PostgreSQL at %s not reachable: %v", store.Redacted(base), err)
	}
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
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
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
