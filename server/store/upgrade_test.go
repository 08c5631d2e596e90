package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/apitoken"
	"github.com/anvilproject/anvil/ent/campaign"
	"github.com/anvilproject/anvil/ent/migrate"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/runbook"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// drift is what ent's auto-migration would still change in db for the
// schema as it is now (never dropping, as no step does): empty when the
// migrations produce that schema.
func drift(t *testing.T, db *store.DB) string {
	t.Helper()
	var b strings.Builder
	if err := db.Schema.WriteTo(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

// TestMigrationsMatchSchema fails when the ent schema changed without a
// migration step that makes the change: the migrations applied to an
// empty database must leave ent nothing to do. Add a step to
// store.Migrations (see the README's "Adding a migration").
func TestMigrationsMatchSchema(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		if v, err := db.Version(ctx); err != nil || v != len(store.Migrations) {
			t.Fatalf("version %d %v after migrating, want %d", v, err, len(store.Migrations))
		}
		if d := drift(t, db); d != "" {
			t.Fatalf("the ent schema differs from what store.Migrations produce; add a step that makes these changes:\n%s", d)
		}
		// The comparison sees a difference when there is one.
		if _, err := db.SQL.ExecContext(ctx, "DROP INDEX node_created_at"); err != nil {
			t.Fatal(err)
		}
		if d := drift(t, db); !strings.Contains(d, "node_created_at") {
			t.Errorf("drift after dropping an index: %q", d)
		}
	})
}

// TestUpgradeVersions: upgrading a current database does nothing; one a
// newer anvil upgraded is refused by upgrade, by the start-up check and
// by db check, naming both versions; one with steps to take is refused
// by the start-up check of a server that must not migrate, and upgrading
// it applies them.
func TestUpgradeVersions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		latest := len(store.Migrations)
		if applied, err := db.Upgrade(ctx); err != nil || len(applied) != 0 {
			t.Fatalf("upgrading a current database applied %v: %v", applied, err)
		}
		if err := db.RequireCurrent(ctx); err != nil {
			t.Fatal(err)
		}
		if problems, err := db.Check(ctx); err != nil || len(problems) != 0 {
			t.Fatalf("check of a current database: %v %v", problems, err)
		}

		// A step this binary does not know.
		if _, err := db.SQL.ExecContext(ctx, fmt.Sprintf("INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, 'from the future', '2030-01-01T00:00:00Z')", latest+1)); err != nil {
			t.Fatal(err)
		}
		var newer *store.NewerError
		want := fmt.Sprintf("database schema version %d is newer than this anvil's %d", latest+1, latest)
		if _, err := db.Upgrade(ctx); !errors.As(err, &newer) || !strings.Contains(err.Error(), want) {
			t.Errorf("upgrade of a newer database: %v, want %q", err, want)
		}
		if err := db.RequireCurrent(ctx); !errors.As(err, &newer) {
			t.Errorf("start-up check of a newer database: %v", err)
		}
		if problems, err := db.Check(ctx); err != nil || !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("db check of a newer database: %v %v", problems, err)
		}

		// A database of the release before versioning.
		if _, err := db.SQL.ExecContext(ctx, "DELETE FROM schema_migrations"); err != nil {
			t.Fatal(err)
		}
		var pending *store.PendingError
		if err := db.RequireCurrent(ctx); !errors.As(err, &pending) || !strings.Contains(err.Error(), "run anvil db upgrade") || !strings.Contains(err.Error(), store.Migrations[0].Name) {
			t.Errorf("start-up check of a database with steps to take: %v", err)
		}
		applied, err := db.Upgrade(ctx)
		if err != nil || !slices.Equal(applied, allSteps()) {
			t.Fatalf("upgrade applied %v %v, want %v", applied, err, allSteps())
		}
		if d := drift(t, db); d != "" {
			t.Errorf("drift after applying the baseline to a current database:\n%s", d)
		}
	})
}

// TestUpgradeFromRelease5b855fe loads the database the last release before
// versioning made (nodes, ports, users, tokens, runbooks, history,
// allocations, campaigns; see testdata/release-5b855fe/make.sh) on each
// backend, upgrades it, and finds every row and the schema of now.
func TestUpgradeFromRelease5b855fe(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			setting := storetest.EmptySetting(t, backend)
			storetest.LoadRelease(t, setting, "testdata/release-5b855fe")
			db, err := store.Open(ctx, setting)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			before := counts(t, db)
			for table, want := range map[string]int{"nodes": 13, "ports": 2, "users": 2, "api_tokens": 2, "role_assignments": 2,
				"runbooks": 5, "runbook_steps": 8, "node_events": 13, "audit_events": 25, "allocations": 2, "campaigns": 1, "campaign_nodes": 2, "traits": 26} {
				if before[table] != want {
					t.Errorf("the fixture holds %d %s, want %d", before[table], table, want)
				}
			}
			if v, err := db.Version(ctx); err != nil || v != 0 {
				t.Fatalf("version of the release's database: %d %v, want 0", v, err)
			}
			applied, err := db.Upgrade(ctx)
			if err != nil || len(applied) != len(store.Migrations) {
				t.Fatalf("upgrade applied %v: %v", applied, err)
			}
			after := counts(t, db)
			for table, n := range before {
				if after[table] != n {
					t.Errorf("%s held %d rows before the upgrade, %d after", table, n, after[table])
				}
			}
			if len(after) != len(migrate.Tables) {
				t.Errorf("after the upgrade %d of the schema's %d tables exist", len(after), len(migrate.Tables))
			}
			if d := drift(t, db); d != "" {
				t.Errorf("the upgraded database differs from the schema:\n%s", d)
			}
			n := db.Node.Query().Where(node.Name("fx-node-1")).OnlyX(ctx)
			if n.Extra["rack"] != "r1" || n.Owner != "p1" || n.Properties["cpus"] != float64(8) {
				t.Errorf("fx-node-1 after the upgrade: extra %v, owner %v, properties %v", n.Extra, n.Owner, n.Properties)
			}
			if ps := n.QueryPorts().AllX(ctx); len(ps) != 2 {
				t.Errorf("fx-node-1 has %d ports after the upgrade, want 2", len(ps))
			}
			if m := db.Node.Query().Where(node.Name("demo-00007")).OnlyX(ctx); !m.Maintenance || m.MaintenanceReason == nil || *m.MaintenanceReason != "fixture: fan failure" {
				t.Errorf("demo-00007 maintenance %v %v", m.Maintenance, m.MaintenanceReason)
			}
			r := db.Runbook.Query().Where(runbook.Name("CUSTOM_FX_REBOOT")).WithSteps().OnlyX(ctx)
			if r.Description == nil || *r.Description != "Reboots the node." || r.Extra["team"] != "ops" || len(r.Edges.Steps) != 1 {
				t.Errorf("runbook after the upgrade: %+v", r)
			}
			if a := db.Allocation.Query().Where(allocation.Name("fx-alloc-2")).OnlyX(ctx); a.State != "active" || a.NodeID == nil {
				t.Errorf("allocation fx-alloc-2: state %s node %v", a.State, a.NodeID)
			}
			if c := db.Campaign.Query().Where(campaign.Name("fx-campaign")).OnlyX(ctx); c.FinishedAt == nil {
				t.Errorf("campaign fx-campaign lost its finish: %+v", c)
			}
			if tok := db.APIToken.Query().Where(apitoken.Description("fixture token")).WithUser().OnlyX(ctx); tok.Edges.User.Name != "ops" || !tok.System {
				t.Errorf("token after the upgrade: %+v", tok)
			}
			// New rows take ids after the release's.
			if err := db.Node.Create().SetUUID(uuid.NewString()).SetName("after-upgrade").SetDriver("fake-hardware").Exec(ctx); err != nil {
				t.Errorf("a node created after the upgrade: %v", err)
			}
		})
	}
}

// counts is the number of rows in each of the schema's tables.
func counts(t *testing.T, db *store.DB) map[string]int {
	t.Helper()
	exists := "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
	if db.Dialect == dialect.Postgres {
		exists = "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
	}
	out := map[string]int{}
	for _, tb := range migrate.Tables {
		// A table a later step adds is not in an old database.
		var there, n int
		if err := db.SQL.QueryRow(exists, tb.Name).Scan(&there); err != nil {
			t.Fatal(err)
		}
		if there == 0 {
			continue
		}
		if err := db.SQL.QueryRow(`SELECT count(*) FROM "` + tb.Name + `"`).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", tb.Name, err)
		}
		out[tb.Name] = n
	}
	return out
}

// TestConcurrentUpgrade: replicas starting together on an empty database
// take turns: one applies each step, the others find it applied, and
// none fails.
func TestConcurrentUpgrade(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			setting := storetest.EmptySetting(t, backend)
			const replicas = 4
			applied := make(chan []int, replicas)
			var wg sync.WaitGroup
			for range replicas {
				db, err := store.Open(ctx, setting)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				wg.Go(func() {
					a, err := db.Upgrade(ctx)
					if err != nil {
						t.Errorf("upgrade: %v", err)
					}
					applied <- a
				})
			}
			wg.Wait()
			close(applied)
			var all []int
			for a := range applied {
				all = append(all, a...)
			}
			slices.Sort(all)
			if want := allSteps(); !slices.Equal(all, want) {
				t.Errorf("the replicas applied %v together, want %v", all, want)
			}
		})
	}
}

// allSteps are the versions of every step this anvil knows, in order.
func allSteps() []int {
	v := make([]int, len(store.Migrations))
	for i := range v {
		v[i] = i + 1
	}
	return v
}

// TestCheckIndexes: db check finds an index the migrations make that is
// gone, and one they do not make that is there — the global unique index
// on runbook names that an anvil from before versioned migrations
// re-creates at start, which refuses two projects' runbooks of one name.
func TestCheckIndexes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		if problems, err := db.Check(ctx); err != nil || len(problems) != 0 {
			t.Fatalf("check of a new database: %v %v", problems, err)
		}
		if _, err := db.SQL.ExecContext(ctx, "CREATE UNIQUE INDEX runbooks_name_key ON runbooks (name)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL.ExecContext(ctx, "DROP INDEX node_created_at"); err != nil {
			t.Fatal(err)
		}
		problems, err := db.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"table nodes lacks index node_created_at", "table runbooks has index runbooks_name_key"}
		for _, w := range want {
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
				t.Errorf("check: %q, want a problem saying %q", problems, w)
			}
		}
		if len(problems) != len(want) {
			t.Errorf("check: %d problems, want %d: %q", len(problems), len(want), problems)
		}
	})
}
