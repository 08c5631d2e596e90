package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestMigrateRunbookNamesPerOwner: a database from before names were
// unique per owner keeps its runbooks, loses the global unique index on
// names, and then takes one name per owner while still refusing a
// duplicate within an owner.
func TestMigrateRunbookNamesPerOwner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		// Recreate the old schema's index, as an old database has it.
		if _, err := db.SQL.ExecContext(ctx, "DROP INDEX IF EXISTS runbooks_name_key"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL.ExecContext(ctx, "CREATE UNIQUE INDEX runbooks_name_key ON runbooks (name)"); err != nil {
			t.Fatal(err)
		}
		own := "own"
		mk := func(name string, owner *string) error {
			return db.Runbook.Create().SetUUID(uuid.NewString()).SetName(name).SetNillableOwner(owner).SetExtra(map[string]any{}).Exec(ctx)
		}
		if err := mk("CUSTOM_A", &own); err != nil {
			t.Fatal(err)
		}
		if err := mk("CUSTOM_B", nil); err != nil {
			t.Fatal(err)
		}
		if err := mk("CUSTOM_A", nil); !ent.IsConstraintError(err) {
			t.Fatalf("the old index should refuse a second CUSTOM_A: %v", err)
		}

		unversion(t, db)
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if n := db.Runbook.Query().CountX(ctx); n != 2 {
			t.Fatalf("%d runbooks after migrating, want 2", n)
		}
		if err := mk("CUSTOM_A", nil); err != nil {
			t.Errorf("the system's CUSTOM_A beside the project's: %v", err)
		}
		if err := mk("CUSTOM_A", nil); !ent.IsConstraintError(err) {
			t.Errorf("a second system CUSTOM_A: %v", err)
		}
		if err := mk("CUSTOM_A", &own); !ent.IsConstraintError(err) {
			t.Errorf("a second CUSTOM_A for project own: %v", err)
		}
		// Migrating again is a no-op.
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMigrateRunbookDescriptions: a runbook the portal described in
// extra["description"] before runbooks had a description field gets it
// moved into the field, once; extra["description"] written afterwards is
// the caller's own and stays.
func TestMigrateRunbookDescriptions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		// An old database: unversioned, no mark yet, the editor's
		// description in extra.
		if _, err := db.SQL.ExecContext(ctx, "DELETE FROM settings WHERE key = 'migrated:runbook_description'"); err != nil {
			t.Fatal(err)
		}
		mk := func(name string, extra map[string]any) *ent.Runbook {
			r, err := db.Runbook.Create().SetUUID(uuid.NewString()).SetName(name).SetExtra(extra).Save(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		unversion(t, db)
		old := mk("CUSTOM_OLD", map[string]any{"description": "Reboots.", "team": "ops"})
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		got := db.Runbook.GetX(ctx, old.ID)
		if got.Description == nil || *got.Description != "Reboots." || got.Extra["description"] != nil || got.Extra["team"] != "ops" {
			t.Errorf("after the migration: description %v, extra %v", got.Description, got.Extra)
		}
		later := mk("CUSTOM_LATER", map[string]any{"description": "mine"})
		// A release before versioning moved them at every start.
		unversion(t, db)
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := db.Runbook.GetX(ctx, later.ID); got.Description != nil || got.Extra["description"] != "mine" {
			t.Errorf("a second start moved a caller's extra: description %v, extra %v", got.Description, got.Extra)
		}
	})
}

// unversion makes db look like a database of a release before versioned
// migrations, which the baseline step brings up to date.
func unversion(t *testing.T, db *store.DB) {
	t.Helper()
	if _, err := db.SQL.ExecContext(context.Background(), "DROP TABLE schema_migrations"); err != nil {
		t.Fatal(err)
	}
}
