package api_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// availableNode enrols a fake node and takes it to available.
func availableNode(t *testing.T, admin *servertest.Client, body map[string]any) string {
	t.Helper()
	body["driver"], body["resource_class"] = "fake", "baremetal"
	r := admin.Do(t, "POST", "/v1/nodes", body)
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	provision(t, admin, id, map[string]any{"target": "provide"}, 202)
	waitState(t, admin, id, "available")
	return id
}

// allocate creates an allocation, which Anvil answers allocating as
// Ironic does, and waits for the conductor to settle it; it returns the
// settled allocation.
func allocate(t *testing.T, c *servertest.Client, body map[string]any) map[string]any {
	t.Helper()
	r := c.Do(t, "POST", "/v1/allocations", body)
	mustStatus(t, r, 201)
	a := r.JSON(t)
	if a["state"] != "allocating" || a["node_uuid"] != nil {
		t.Fatalf("new allocation %v, want allocating without a node", a)
	}
	return settled(t, c, a["uuid"].(string))
}

// settled waits until the allocation is active or error.
func settled(t *testing.T, c *servertest.Client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := c.Do(t, "GET", "/v1/allocations/"+id, nil)
		mustStatus(t, r, 200)
		a := r.JSON(t)
		if a["state"] != "allocating" {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocation %s still allocating", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestrictedAllocationsAreAtomic: 50 concurrent restricted
// allocations over 20 matching nodes give exactly 20 successes, no node
// twice, and only nodes the project owns or leases.
func TestRestrictedAllocationsAreAtomic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		mine := map[string]bool{}
		for i := 0; i < 20; i++ {
			body := map[string]any{"name": fmt.Sprintf("alloc-%02d", i), "owner": "own"}
			if i%2 == 1 {
				body["owner"], body["lessee"] = "x", "own"
			}
			mine[availableNode(t, admin, body)] = true
		}
		for i := 0; i < 10; i++ {
			availableNode(t, admin, map[string]any{"name": fmt.Sprintf("foreign-%02d", i), "owner": "oth"})
		}
		var mu sync.Mutex
		var ids []string
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := member.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal"})
				if r.Status != 201 {
					t.Errorf("allocation: %d %s", r.Status, r.Body)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				ids = append(ids, r.JSON(t)["uuid"].(string))
			}()
		}
		wg.Wait()
		won := map[string]int{}
		failed := 0
		for _, id := range ids {
			a := settled(t, member, id)
			if a["owner"] != "own" {
				t.Errorf("restricted allocation owner %v", a["owner"])
			}
			switch a["state"] {
			case "active":
				won[a["node_uuid"].(string)]++
			case "error":
				failed++
			}
		}
		if len(won) != 20 || failed != 30 {
			t.Fatalf("%d nodes allocated, %d allocations failed; want 20 and 30", len(won), failed)
		}
		for id, n := range won {
			if n != 1 || !mine[id] {
				t.Errorf("node %s allocated %d times (own or leased: %v)", id, n, mine[id])
			}
		}
	})
}

func TestAllocationRules(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		id := availableNode(t, admin, map[string]any{"name": "rules-1", "owner": "own"})
		mustStatus(t, member.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal", "owner": "oth"}), 403)
		mustStatus(t, clients["owner-reader"].Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal"}), 403)
		if r := member.Do(t, "POST", "/v1/allocations", map[string]any{"traits": []string{"CUSTOM_X"}}); r.Status != 400 || r.Fault(t) == "" {
			t.Errorf("missing resource_class: %d", r.Status)
		}
		a := allocate(t, member, map[string]any{"resource_class": "baremetal", "name": "mine"})
		if a["state"] != "active" || a["node_uuid"] != id || a["last_error"] != nil {
			t.Fatalf("allocation %v", a)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["instance_uuid"] != a["uuid"] {
			t.Errorf("node instance_uuid %v", n["instance_uuid"])
		}
		mustStatus(t, member.Do(t, "GET", "/v1/nodes/"+id+"/allocation", nil), 200)
		mustStatus(t, clients["other-admin"].Do(t, "GET", "/v1/allocations/mine", nil), 404)
		if l := clients["other-admin"].Do(t, "GET", "/v1/allocations", nil).JSON(t)["allocations"].([]any); len(l) != 0 {
			t.Errorf("another project lists %d allocations", len(l))
		}
		// A system allocation may name any owner, and no match is an error
		// state with a reason, not a failed request.
		x := allocate(t, admin, map[string]any{"resource_class": "baremetal", "owner": "nobody"})
		if x["state"] != "error" || x["last_error"] != "Failed to process allocation "+x["uuid"].(string)+": no available nodes match the resource class baremetal." {
			t.Errorf("unmatched allocation %v", x)
		}
		mustStatus(t, member.Do(t, "DELETE", "/v1/allocations/mine", nil), 204)
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["instance_uuid"] != nil {
			t.Errorf("release left instance_uuid %v", n["instance_uuid"])
		}
	})
}
