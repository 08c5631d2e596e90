package store_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSQLiteTimesSortAsTimes: SQLite stores times in a form that sorts
// and compares as the times do (no time.String monotonic suffix, which
// made a row's created_at compare greater than itself sent back as a
// marker), and migrating rewrites what an earlier release stored in
// time.String's form, so paging by created_at neither repeats nor skips.
func TestSQLiteTimesSortAsTimes(t *testing.T) {
	ctx := context.Background()
	db := storetest.Open(t, storetest.Setting(t, "sqlite"))
	stored := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d$`)
	raw := func(u string) string {
		t.Helper()
		var v string
		if err := db.SQL.QueryRowContext(ctx, "SELECT created_at || '' FROM nodes WHERE uuid = ?", u).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var ids []string
	base := time.Now()
	for i := range 6 {
		u := uuid.NewString()
		ids = append(ids, u)
		// Monotonic readings, as time.Now gives, each a microsecond apart.
		if err := db.Node.Create().SetUUID(u).SetDriver("fake-hardware").SetCreatedAt(base.Add(time.Duration(i) * time.Microsecond)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v := raw(ids[0]); !stored.MatchString(v) {
		t.Fatalf("created_at stored as %q", v)
	}
	// Half the rows as an earlier release wrote them.
	for _, u := range ids[:3] {
		n := db.Node.Query().Where(node.UUID(u)).OnlyX(ctx)
		old := n.CreatedAt.Add(0).String() + " m=+0.004200001"
		if _, err := db.SQL.ExecContext(ctx, "UPDATE nodes SET created_at = ? WHERE uuid = ?", old, u); err != nil {
			t.Fatal(err)
		}
	}
	unversion(t, db)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range ids {
		if v := raw(u); !stored.MatchString(v) {
			t.Errorf("after migrating, %s's created_at is %q", u, v)
		}
	}
	// Paging by created_at with the last row as marker: each node once,
	// in creation order.
	var seen []string
	var after time.Time
	for page := 0; page < 10; page++ {
		q := db.Node.Query().Order(ent.Asc(node.FieldCreatedAt)).Limit(2)
		if page > 0 {
			q = q.Where(node.CreatedAtGT(after))
		}
		ns := q.AllX(ctx)
		if len(ns) == 0 {
			break
		}
		for _, n := range ns {
			seen = append(seen, n.UUID)
		}
		after = ns[len(ns)-1].CreatedAt
	}
	if len(seen) != len(ids) {
		t.Fatalf("paging by created_at saw %d rows, want %d: %v", len(seen), len(ids), seen)
	}
	for i := range ids {
		if seen[i] != ids[i] {
			t.Fatalf("paging order %v, want %v", seen, ids)
		}
	}
}
