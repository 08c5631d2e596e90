package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestEnrolmentRefreshesStatistics: a server started on an empty database
// and then given nodes one POST at a time has the planner's statistics
// follow them within seconds (the conductor's statistics loop wakes on
// enrolment), not at its ten-minute pass: until then PostgreSQL plans
// every list for an empty table.
func TestEnrolmentRefreshesStatistics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, c := start(t, setting)
		for i := 0; i < 120; i++ {
			mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("stats-%03d", i), "driver": "fake"}), 201)
		}
		// A bounded wait for the loop's pass, not a timing claim: the
		// figure must reach a tenth of the fleet's final size or better.
		rows := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			n, err := storetest.PlannerRows(db)
			if err == nil && n >= 108 {
				return
			}
			rows = n
		}
		t.Errorf("30 s after enrolling 120 nodes the planner believes nodes holds %d rows", rows)
	})
}
