package nodes

import (
	"context"
	"fmt"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestImportLeavesStatistics: the planner's statistics describe an import
// as soon as Import returns, on a database analyzed while it was empty
// (as a server's start-up leaves a new one), so the first list after a
// bulk enrolment is not planned for an empty table.
func TestImportLeavesStatistics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		if err := db.Analyze(ctx); err != nil {
			t.Fatal(err)
		}
		recs := make([]ImportRecord, 300)
		for i := range recs {
			recs[i] = ImportRecord{Line: i + 1, Node: CreateInput{UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Driver: "fake",
				ProvisionState: "enroll", DriverInfo: map[string]any{}, Properties: map[string]any{}, Extra: map[string]any{}}}
		}
		if err := Import(ctx, db, recs); err != nil {
			t.Fatal(err)
		}
		if got, err := storetest.PlannerRows(db); err != nil || got != 300 {
			t.Errorf("after importing 300 nodes the planner believes nodes holds %d rows (%v)", got, err)
		}
	})
}
