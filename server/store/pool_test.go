package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPoolKeepsWhatABurstOpened: after a burst that uses every connection
// of the default pool, all of them stay idle for the next burst instead
// of being closed (on PostgreSQL each reopen is a new backend process).
func TestPoolKeepsWhatABurstOpened(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			db, err := store.Open(ctx, storetest.Setting(t, backend))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			want := map[string]int{"sqlite": 8, "postgres": 32}[backend]
			if got := db.SQL.Stats().MaxOpenConnections; got != want {
				t.Fatalf("default max open %d, want %d", got, want)
			}
			conns := make([]*sql.Conn, want)
			for i := range conns {
				if conns[i], err = db.SQL.Conn(ctx); err != nil {
					t.Fatal(err)
				}
				if err := conns[i].PingContext(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range conns {
				c.Close()
			}
			if s := db.SQL.Stats(); s.Idle != want || s.MaxIdleClosed != 0 {
				t.Errorf("after a burst of %d: %d idle, %d closed for the idle limit; want all kept", want, s.Idle, s.MaxIdleClosed)
			}
		})
	}
}

func TestPoolSettings(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenPool(ctx, storetest.Setting(t, "sqlite"), store.Pool{MaxOpen: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.SQL.Stats().MaxOpenConnections; got != 3 {
		t.Errorf("--db-max-open 3 gave %d", got)
	}
	for _, tc := range []struct {
		pool store.Pool
		flag string
	}{
		{store.Pool{MaxOpen: -1}, "--db-max-open"},
		{store.Pool{MaxIdle: -1}, "--db-max-idle"},
		{store.Pool{MaxOpen: 4, MaxIdle: 5}, "--db-max-idle"},
		{store.Pool{MaxLifetime: -1}, "--db-conn-max-lifetime"},
	} {
		_, err := store.OpenPool(ctx, storetest.Setting(t, "sqlite"), tc.pool)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc.pool, err, tc.flag)
		}
	}
}

// TestSQLiteCacheSize: every SQLite connection's page cache is bounded at
// 1 MiB (PRAGMA cache_size answers in KiB when negative), unless the
// database setting names its own.
func TestSQLiteCacheSize(t *testing.T) {
	ctx := context.Background()
	for setting, want := range map[string]int{"": -1024, "?_pragma=cache_size(-4096)": -4096} {
		db, err := store.Open(ctx, "sqlite://"+t.TempDir()+"/cache.db"+setting)
		if err != nil {
			t.Fatal(err)
		}
		conns := make([]*sql.Conn, 3)
		for i := range conns {
			if conns[i], err = db.SQL.Conn(ctx); err != nil {
				t.Fatal(err)
			}
			var got int
			if err := conns[i].QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("setting %q: connection %d runs cache_size %d, want %d", setting, i, got, want)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		db.Close()
	}
}
