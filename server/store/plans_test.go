package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodeListIndexesAndStatistics: migrating replaces the index of every
// node's parent with one of child nodes only (an old database loses the
// old one), and Analyze leaves the planner statistics; on SQLite the
// node list's counts read the covering index alone, not the rows.
func TestNodeListIndexesAndStatistics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		// Recreate the old schema's index, as an old database has it.
		if _, err := db.SQL.ExecContext(ctx, "CREATE INDEX node_parent_node ON nodes (parent_node)"); err != nil {
			t.Fatal(err)
		}
		unversion(t, db)
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		indexes := "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'nodes'"
		if db.Dialect == dialect.Postgres {
			indexes = "SELECT indexname FROM pg_indexes WHERE tablename = 'nodes' AND schemaname = current_schema()"
		}
		have := strings.Join(column(t, db.SQL, 0, indexes), " ")
		for _, want := range []string{"node_parent_node_set", "node_created_at"} {
			if !strings.Contains(have, want) {
				t.Errorf("no index %s among %s", want, have)
			}
		}
		if strings.Contains(" "+have+" ", " node_parent_node ") {
			t.Errorf("the old parent_node index is still there: %s", have)
		}

		if err := db.Analyze(ctx); err != nil {
			t.Fatal(err)
		}
		stats := "SELECT tbl FROM sqlite_stat1 WHERE tbl = 'nodes'"
		if db.Dialect == dialect.Postgres {
			// reltuples is -1 until the table is first analyzed.
			stats = "SELECT relname FROM pg_class WHERE oid = 'nodes'::regclass AND reltuples >= 0"
		}
		if got := column(t, db.SQL, 0, stats); len(got) == 0 {
			t.Errorf("no statistics for nodes after Analyze")
		}

		if db.Dialect == dialect.SQLite {
			// Spelled as nodes.Service.CountStates spells it.
			plan := strings.Join(column(t, db.SQL, 3, `EXPLAIN QUERY PLAN SELECT "nodes"."provision_state", COUNT(*),
				SUM(CASE WHEN "nodes"."provision_state" IN ('clean failed', 'service failed', 'error') OR "nodes"."fault" IS NOT NULL OR "nodes"."last_error" IS NOT NULL THEN 1 ELSE 0 END)
				FROM "nodes" WHERE "nodes"."parent_node" IS NULL GROUP BY "nodes"."provision_state"`), " ")
			if !strings.Contains(plan, "COVERING INDEX node_list_counts") {
				t.Errorf("the node list's count reads rows: %s", plan)
			}
		}
	})
}

// column reads the col-th column of every row.
func column(t *testing.T, db *sql.DB, col int, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		switch v := vals[col].(type) {
		case []byte:
			out = append(out, string(v))
		case string:
			out = append(out, v)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReanalyzeFollowsTheFleet: statistics taken on an empty table are
// retaken once nodes arrive, and not again until the count moves by a
// tenth.
func TestReanalyzeFollowsTheFleet(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		analyzed, err := db.Reanalyze(ctx, -1)
		if err != nil || analyzed != 0 {
			t.Fatalf("first analysis: %d, %v", analyzed, err)
		}
		insert := func(from, to int) {
			for i := from; i < to; i++ {
				if err := db.Node.Create().SetUUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)).SetDriver("fake").Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		insert(0, 50)
		if analyzed, err = db.Reanalyze(ctx, analyzed); err != nil || analyzed != 50 {
			t.Fatalf("after 50 nodes: statistics at %d, %v; want 50", analyzed, err)
		}
		rows := "SELECT stat FROM sqlite_stat1 WHERE tbl = 'nodes' AND idx = 'nodes_uuid_key'"
		if db.Dialect == dialect.Postgres {
			rows = "SELECT reltuples::bigint::text FROM pg_class WHERE oid = 'nodes'::regclass"
		}
		if got := column(t, db.SQL, 0, rows); len(got) != 1 || !strings.HasPrefix(got[0], "50") {
			t.Errorf("the planner thinks nodes holds %v rows, want 50", got)
		}
		insert(50, 54)
		if again, err := db.Reanalyze(ctx, analyzed); err != nil || again != 50 {
			t.Errorf("4 more nodes re-analyzed (statistics at %d, %v); a tenth is the threshold", again, err)
		}
		insert(54, 56)
		if again, err := db.Reanalyze(ctx, analyzed); err != nil || again != 56 {
			t.Errorf("6 more nodes than analyzed: statistics at %d, %v; want 56", again, err)
		}
	})
}

// TestNodeSearchIndex: on PostgreSQL, the portal's search (any part of a
// name, any case, or the start of a UUID) is answered from the trigram
// index of names and the prefix index of UUIDs rather than by reading all
// 10,000 nodes, in both the page's query and its count; spelled as
// nodes.Service spells them.
func TestNodeSearchIndex(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	db := storetest.Open(t, setting)
	if db.Unindexed != nil {
		t.Fatalf("no search index: %v", db.Unindexed)
	}
	ctx := context.Background()
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO nodes (created_at, uuid, name, driver)
		SELECT now(), md5(i::text)::uuid::text, 'Node-' || lpad(i::text, 5, '0'), 'fake' FROM generate_series(0, 9999) AS i`); err != nil {
		t.Fatal(err)
	}
	if err := db.Analyze(ctx); err != nil {
		t.Fatal(err)
	}
	where := `WHERE "nodes"."parent_node" IS NULL AND ("nodes"."name" COLLATE "C" ILIKE '%%%s%%' ESCAPE '\' OR "nodes"."uuid" LIKE '%s%%')`
	uuid := column(t, db.SQL, 0, "SELECT uuid FROM nodes WHERE name = 'Node-04242'")[0][:8]
	for _, c := range []struct {
		q     string
		found int
	}{{"node-0123", 10}, {uuid, 1}, {"NODE-01", 1000}} {
		queries := []string{`SELECT "nodes"."provision_state", COUNT(*) FROM "nodes" ` + fmt.Sprintf(where, c.q, c.q) + ` GROUP BY "nodes"."provision_state"`}
		// A page of a broad match is found sooner by walking the sort
		// column's index, where matches are dense.
		if c.found <= 50 {
			queries = append(queries, `SELECT "nodes"."id" FROM "nodes" `+fmt.Sprintf(where, c.q, c.q)+` ORDER BY "nodes"."name", "nodes"."id" LIMIT 51`)
		}
		for _, sql := range queries {
			plan := strings.Join(column(t, db.SQL, 0, "EXPLAIN "+sql), "\n")
			if !strings.Contains(plan, "node_search") || !strings.Contains(plan, "node_uuid_prefix") {
				t.Errorf("search for %q reads every node:\n%s\n%s", c.q, sql, plan)
			}
		}
		var n int
		if err := db.SQL.QueryRow(`SELECT COUNT(*) FROM "nodes" ` + fmt.Sprintf(where, c.q, c.q)).Scan(&n); err != nil || n != c.found {
			t.Errorf("search for %q found %d nodes (%v), want %d", c.q, n, err, c.found)
		}
	}
}

// TestNodeSearchWithoutTrigrams: a database where pg_trgm may not be
// installed still migrates, says why search is unindexed, and searches.
func TestNodeSearchWithoutTrigrams(t *testing.T) {
	base := storetest.PostgresSchema(t) // skips (outside CI) without PostgreSQL
	admin, err := sql.Open("pgx", storetest.DefaultPG)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	suffix := strings.TrimPrefix(strings.SplitN(strings.SplitN(base, "search_path=", 2)[1], "&", 2)[0], "t_")
	dbName, role := "anvil_notrgm_"+suffix, "anvil_notrgm_"+suffix
	for _, s := range []string{
		"CREATE DATABASE " + dbName,
		"REVOKE CREATE ON DATABASE " + dbName + " FROM PUBLIC",
		"CREATE ROLE " + role + " LOGIN",
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE " + dbName + " WITH (FORCE)")
		admin.Exec("DROP ROLE " + role)
	})
	owner, err := sql.Open("pgx", strings.Replace(storetest.DefaultPG, "/test?", "/"+dbName+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = owner.Exec("CREATE SCHEMA anvil AUTHORIZATION " + role)
	owner.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, "postgres://"+role+"@127.0.0.1:5432/"+dbName+"?sslmode=disable&search_path=anvil")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate without the right to install pg_trgm: %v", err)
	}
	if db.Unindexed == nil || !strings.Contains(db.Unindexed.Error(), "pg_trgm") {
		t.Fatalf("Unindexed = %v, want the reason pg_trgm could not be installed", db.Unindexed)
	}
	if err := db.Node.Create().SetUUID("5d3e8c4a-0000-4000-8000-000000000001").SetName("rack7-db").SetDriver("fake").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got := column(t, db.SQL, 0, `SELECT name FROM nodes WHERE name ILIKE '%K7-D%' OR uuid LIKE '5d3e%'`); len(got) != 1 {
		t.Errorf("unindexed search found %v", got)
	}
}
