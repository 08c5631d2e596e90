package store_test

import (
	"context"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestUpsert: a row whose key is taken is kept, or with replace takes the
// new value, and Upsert says whether it wrote. Two transactions writing
// the same key at once both commit: on PostgreSQL the second waits for
// the first and then keeps its row, where an INSERT that failed on the
// unique index would have aborted the whole transaction, and with it the
// change a notice tells of.
func TestUpsert(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		put := func(ex entsql.ExecQuerier, v string, replace bool) bool {
			t.Helper()
			ins := db.Insert(setting.Table).Columns(setting.FieldKey, setting.FieldValue).Values("k", []byte(v))
			wrote, err := store.Upsert(ctx, ex, ins, replace, setting.FieldKey)
			if err != nil {
				t.Fatal(err)
			}
			return wrote
		}
		value := func() string {
			t.Helper()
			s, err := db.Setting.Query().Where(setting.Key("k")).Only(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return string(s.Value)
		}
		if !put(db, "first", false) || value() != "first" {
			t.Fatalf("a new key was not written: %q", value())
		}
		if put(db, "second", false) || value() != "first" {
			t.Fatalf("a kept key was overwritten: %q", value())
		}
		if !put(db, "third", true) || value() != "third" {
			t.Fatalf("a replaced key reads %q", value())
		}
		if n := db.Setting.Query().Where(setting.Key("k")).CountX(ctx); n != 1 {
			t.Fatalf("%d rows for one key", n)
		}

		if db.Dialect != "postgres" {
			return // SQLite has one writer: transactions do not overlap
		}
		race := func(ex entsql.ExecQuerier, v string) (bool, error) {
			ins := db.Insert(setting.Table).Columns(setting.FieldKey, setting.FieldValue).Values("race", []byte(v))
			return store.Upsert(ctx, ex, ins, false, setting.FieldKey)
		}
		a, err := db.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		b, err := db.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		if wrote, err := race(a.Client(), "a"); err != nil || !wrote {
			t.Fatalf("the first transaction: wrote %v, %v", wrote, err)
		}
		type result struct {
			wrote bool
			err   error
		}
		second := make(chan result, 1)
		go func() {
			wrote, err := race(b.Client(), "b")
			second <- result{wrote, err}
		}()
		// Commit once the second insert waits on the first's row.
		for waiting, deadline := 0, time.Now().Add(10*time.Second); waiting == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the second transaction's insert never waited for the first")
			}
			if err := db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := <-second; r.err != nil || r.wrote {
			t.Fatalf("the second transaction: wrote %v, %v", r.wrote, r.err)
		}
		if err := b.Commit(); err != nil {
			t.Fatalf("the second transaction could not commit: %v", err)
		}
		s, err := db.Setting.Query().Where(setting.Key("race")).Only(ctx)
		if err != nil || string(s.Value) != "a" {
			t.Fatalf("the raced key: %v, %v", s, err)
		}
	})
}
