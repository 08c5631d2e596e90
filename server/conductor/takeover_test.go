package conductor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNoTakeoverUntilOwnHeartbeatsSteady: after a database outage every
// heartbeat is stale, the survivors' too; a conductor takes a silent
// one's nodes only once its own heartbeats have succeeded for a whole
// timeout, so live conductors keep their runs across a restart.
func TestNoTakeoverUntilOwnHeartbeatsSteady(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		const timeout = 400 * time.Millisecond
		c := New(db, slog.New(slog.DiscardHandler), Config{Name: "live", Heartbeat: 50 * time.Millisecond, HeartbeatTimeout: timeout})
		old := time.Now().Add(-time.Hour)
		for _, name := range []string{"live", "silent"} {
			if err := db.Conductor.Create().SetHostname(name).SetStartedAt(old).SetHeartbeatAt(old).SetOnline(true).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		n := fakeNode(t, db, nil)
		if err := db.Node.UpdateOneID(n.ID).SetReservation("silent").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		held := func() bool {
			got, err := db.Node.Get(ctx, n.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got.Reservation != nil
		}
		// The database was unreachable for this conductor too.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := c.heartbeat(cancelled); err == nil {
			t.Fatal("a heartbeat on a cancelled context succeeded")
		}
		if err := c.takeOver(ctx); err != nil || !held() {
			t.Fatalf("took over right after its own heartbeat failed (err %v)", err)
		}
		if err := c.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.takeOver(ctx); err != nil || !held() {
			t.Fatalf("took over on its first heartbeat back (err %v)", err)
		}
		time.Sleep(timeout)
		if err := c.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.takeOver(ctx); err != nil || held() {
			t.Fatalf("silent conductor's node still held after a steady timeout (err %v)", err)
		}
		got, _ := db.Node.Get(ctx, n.ID)
		if got.ProvisionState != nodes.StateCleanFailed {
			t.Errorf("recovered node is %s, want %s", got.ProvisionState, nodes.StateCleanFailed)
		}
	})
}
