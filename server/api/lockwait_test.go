package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// A request meeting a node that another operation holds waits for it as
// Ironic's conductor does (3 attempts, 1 s apart) before answering 409:
// gophercloud's TestNodesCreateDestroy deletes a node the moment it reads
// manageable, while the verification that set the state still held the
// lock, and met a 409 in CI.
func TestLockedNodeIsWaitedFor(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		ctx := context.Background()
		hold := func(uuid string, d time.Duration) {
			t.Helper()
			if err := srv.DB.Node.Update().Where(node.UUID(uuid)).SetReservation("cond-9").Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if d > 0 {
				time.AfterFunc(d, func() {
					_ = srv.DB.Node.Update().Where(node.UUID(uuid)).ClearReservation().Exec(context.Background())
				})
			}
		}

		// Released a moment later: each kind of write goes through.
		del := mkNode(t, c, "lw-delete")
		hold(del, 300*time.Millisecond)
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+del, nil), 204)

		patched := mkNode(t, c, "lw-patch")
		hold(patched, 300*time.Millisecond)
		mustStatus(t, c.Do(t, "PATCH", "/v1/nodes/"+patched, []map[string]any{{"op": "add", "path": "/extra/k", "value": "v"}}), 200)

		hold(patched, 300*time.Millisecond)
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+patched+"/states/provision", map[string]any{"target": "manage"}), 202)

		hold(patched, 300*time.Millisecond)
		mustStatus(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": patched, "address": "52:54:00:aa:00:01"}), 201)

		// Held for good: Ironic's NodeLocked, and nothing changed.
		kept := mkNode(t, c, "lw-kept")
		hold(kept, 0)
		r := c.Do(t, "DELETE", "/v1/nodes/"+kept, nil)
		if r.Status != 409 || !strings.Contains(r.Fault(t), "is locked by host cond-9") {
			t.Errorf("delete of a held node: %d %s", r.Status, r.Body)
		}
		r = c.Do(t, "PATCH", "/v1/nodes/"+kept, []map[string]any{{"op": "add", "path": "/extra/k", "value": "v"}})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "is locked by host cond-9") {
			t.Errorf("patch of a held node: %d %s", r.Status, r.Body)
		}
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/"+kept, nil), 200)
		if n := c.Do(t, "GET", "/v1/nodes/"+kept, nil).JSON(t); len(n["extra"].(map[string]any)) != 0 {
			t.Errorf("refused patch changed extra: %v", n["extra"])
		}
	})
}
