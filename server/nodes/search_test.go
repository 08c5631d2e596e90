package nodes

import (
	"context"
	"testing"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSearchPlannedPerPattern: on PostgreSQL a search's page, count and
// counts by state are planned with their pattern every time, never from
// a generic plan; for a pattern every one of 10,000 names contains, the
// generic plan PostgreSQL would otherwise keep reads all of them through
// the trigram index. One connection, so pg_prepared_statements sees the
// statements pgx prepared.
func TestSearchPlannedPerPattern(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenPool(ctx, storetest.PostgresSchema(t), store.Pool{MaxOpen: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO nodes (created_at, uuid, name, driver)
		SELECT now(), md5(i::text)::uuid::text, 'node-' || lpad(i::text, 5, '0'), 'fake' FROM generate_series(0, 9999) AS i`); err != nil {
		t.Fatal(err)
	}
	if err := db.Analyze(ctx); err != nil {
		t.Fatal(err)
	}
	enf, err := policies.New(policies.Defaults(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(db, &guard.Guard{Enforcer: enf})
	admin := policies.WithPrincipal(ctx, &policies.Principal{User: "op", System: true, Roles: policies.ExpandRoles([]string{"admin"})})
	search := "DE-"
	o := ListOptions{Search: &search, SortKey: "name", Numbered: true, Limit: 50}
	for range 8 {
		page, err := s.List(admin, o)
		if err != nil || len(page.Nodes) != 50 || page.Nodes[0].Name == nil || *page.Nodes[0].Name != "node-00000" {
			t.Fatalf("search page: %v, %v", page, err)
		}
		if n, err := s.Count(admin, o); err != nil || n != 10000 {
			t.Fatalf("search count: %d, %v", n, err)
		}
		if c, err := s.CountStates(admin, o); err != nil || c["enroll"].Total != 10000 {
			t.Fatalf("search counts by state: %v, %v", c, err)
		}
	}
	rows, err := db.SQL.QueryContext(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%ILIKE%' AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var stmt string
		var generic, custom int
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		seen++
		if generic != 0 || custom < 8 {
			t.Errorf("%d generic and %d custom plans for %s", generic, custom, stmt)
		}
	}
	if seen != 3 {
		t.Errorf("%d prepared search statements, want the page, the count and the counts by state", seen)
	}
}
