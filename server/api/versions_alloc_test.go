package api_test

import (
	"fmt"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAllocationPrefersNamedNode (1.79): an allocation named like one of
// its candidates gets that node, every time, though candidates are
// otherwise tried in random order; an allocation named like no node still
// gets one.
func TestAllocationPrefersNamedNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, admin := start(t, setting)
		ids := map[string]string{}
		for i := range 8 {
			name := fmt.Sprintf("compute-%d", i)
			ids[name] = availableNode(t, admin, map[string]any{"name": name})
		}
		// Each allocation takes its node, so the named node is still free
		// for the next; compute-0 goes last, when only it is left.
		for i := 7; i >= 1; i-- {
			name := fmt.Sprintf("compute-%d", i)
			r := admin.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal", "name": name})
			mustStatus(t, r, 201)
			if a := r.JSON(t); a["state"] != "active" || a["node_uuid"] != ids[name] {
				t.Fatalf("allocation %s: state %v, node %v; want node %s", name, a["state"], a["node_uuid"], ids[name])
			}
		}
		r := admin.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal", "name": "web-1"})
		mustStatus(t, r, 201)
		if a := r.JSON(t); a["state"] != "active" || a["node_uuid"] != ids["compute-0"] {
			t.Fatalf("allocation web-1: state %v, node %v; want the last free node", a["state"], a["node_uuid"])
		}
	})
}
