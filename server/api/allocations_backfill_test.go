package api_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// activeNode enrols a fake node with body's fields and adopts it, as a
// node deployed before allocations were used.
func activeNode(t *testing.T, admin *servertest.Client, body map[string]any) string {
	t.Helper()
	body["driver"] = "fake"
	if _, ok := body["resource_class"]; !ok {
		body["resource_class"] = "baremetal"
	}
	r := admin.Do(t, "POST", "/v1/nodes", body)
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	toActive(t, admin, id)
	return id
}

// TestAllocationBackfill: POST /v1/allocations with node (1.58) records
// the allocation of a node already active, as Ironic's conductor backfills
// it: the node's resource class and instance UUID when none are given;
// a node that is not active, does not match, or carries another instance
// is refused (409) and the allocation kept in error saying why; a node the
// caller may not see is the same 400 as a missing one; a project
// backfills its own nodes only, as its own allocation.
func TestAllocationBackfill(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting)
		admin := clients["system-admin"]

		a := activeNode(t, admin, map[string]any{"name": "bf-a", "resource_class": "large"})
		r := at(admin, "1.57").Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-a"})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "node") {
			t.Errorf("node at 1.57: %d %s", r.Status, r.Body)
		}
		r = at(admin, "1.58").Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-a", "name": "bf-alloc"})
		mustStatus(t, r, 201)
		al := r.JSON(t)
		if al["state"] != "active" || al["node_uuid"] != a || al["resource_class"] != "large" || al["last_error"] != nil {
			t.Errorf("backfilled allocation %v", al)
		}
		if _, shown := al["node"]; shown {
			t.Errorf("the allocation shows the request's node field: %v", al)
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+a, nil).JSON(t)
		if n["allocation_uuid"] != al["uuid"] || n["instance_uuid"] != al["uuid"] || n["provision_state"] != "active" {
			t.Errorf("node after backfill: allocation_uuid %v, instance_uuid %v, state %v", n["allocation_uuid"], n["instance_uuid"], n["provision_state"])
		}

		// A node deployed with an instance UUID gives it to the allocation.
		inst := uuid.NewString()
		b := activeNode(t, admin, map[string]any{"name": "bf-b", "instance_uuid": inst})
		r = admin.Do(t, "POST", "/v1/allocations", map[string]any{"node": b})
		mustStatus(t, r, 201)
		if got := r.JSON(t); got["uuid"] != inst || got["node_uuid"] != b || got["resource_class"] != "baremetal" {
			t.Errorf("backfill of a node with instance %s: %v", inst, got)
		}

		// Refusals keep the allocation in error, with Ironic's reasons.
		avail := availableNode(t, admin, map[string]any{"name": "bf-avail"})
		c := activeNode(t, admin, map[string]any{"name": "bf-c"})
		other := uuid.NewString()
		d := activeNode(t, admin, map[string]any{"name": "bf-d", "instance_uuid": other})
		taken := uuid.NewString()
		activeNode(t, admin, map[string]any{"name": "bf-e", "instance_uuid": taken})
		for _, tc := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"node": avail, "name": "bf-f1"}, `Node must be in the "active" state, but the current state is "available"`},
			{map[string]any{"node": c, "name": "bf-f2", "resource_class": "small"}, "Resource class baremetal does not match the requested resource class small"},
			{map[string]any{"node": c, "name": "bf-f3", "traits": []string{"CUSTOM_GPU"}}, "does not match the requested traits"},
			{map[string]any{"node": c, "name": "bf-f4", "candidate_nodes": []string{"bf-avail"}}, "Candidate nodes must be empty or contain the target node"},
			{map[string]any{"node": "bf-a", "name": "bf-f5", "uuid": uuid.NewString()}, "Node " + a + " is associated with instance " + al["uuid"].(string)},
			{map[string]any{"node": d, "name": "bf-f6", "uuid": uuid.NewString()}, "is associated with instance " + other},
			{map[string]any{"node": c, "name": "bf-f7", "uuid": taken}, "Instance " + taken + " is already associated with a node"},
		} {
			r := admin.Do(t, "POST", "/v1/allocations", tc.body)
			if r.Status != 409 || !strings.Contains(r.Fault(t), tc.want) {
				t.Errorf("%v: %d %s, want 409 saying %q", tc.body, r.Status, r.Body, tc.want)
				continue
			}
			kept := admin.Do(t, "GET", "/v1/allocations/"+tc.body["name"].(string), nil)
			mustStatus(t, kept, 200)
			if k := kept.JSON(t); k["state"] != "error" || !strings.Contains(k["last_error"].(string), tc.want) || k["node_uuid"] != nil {
				t.Errorf("%v: allocation kept as %v", tc.body, k)
			}
		}
		// Without a UUID of its own, a second backfill of bf-a takes its
		// instance's, which the first allocation has: Ironic's conflict.
		if r := admin.Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-a"}); r.Status != 409 || !strings.Contains(r.Fault(t), "already exists") {
			t.Errorf("second backfill of bf-a: %d %s", r.Status, r.Body)
		}
		for id, want := range map[string]any{avail: nil, c: nil, d: other} {
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["instance_uuid"] != want || n["allocation_uuid"] != nil {
				t.Errorf("node %s after a refused backfill: instance_uuid %v, allocation_uuid %v", id, n["instance_uuid"], n["allocation_uuid"])
			}
		}

		// Tenancy: a project backfills the nodes it may see, as its own
		// allocation; another project's node is the 400 of a missing one.
		own := activeNode(t, admin, map[string]any{"name": "bf-own", "owner": "own"})
		missing := clients["other-member"].Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-nope"})
		hidden := clients["other-member"].Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-own"})
		if missing.Status != 400 || hidden.Status != 400 || strings.ReplaceAll(hidden.Fault(t), "bf-own", "X") != strings.ReplaceAll(missing.Fault(t), "bf-nope", "X") {
			t.Errorf("hidden node: %d %s; missing node: %d %s; want the same 400", hidden.Status, hidden.Body, missing.Status, missing.Body)
		}
		mustStatus(t, clients["owner-reader"].Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-own"}), 403)
		r = clients["owner-member"].Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-own", "owner": "oth"})
		mustStatus(t, r, 403)
		r = clients["owner-member"].Do(t, "POST", "/v1/allocations", map[string]any{"node": "bf-own"})
		mustStatus(t, r, 201)
		if got := r.JSON(t); got["owner"] != "own" || got["node_uuid"] != own || got["state"] != "active" {
			t.Errorf("project backfill: %v", got)
		}
		if got := admin.Do(t, "GET", "/v1/nodes/"+own, nil).JSON(t); got["provision_state"] != "active" {
			t.Errorf("the project's node after backfill: %v", got["provision_state"])
		}

		// Without node, resource_class stays required.
		if r := admin.Do(t, "POST", "/v1/allocations", map[string]any{"name": "bf-norc"}); r.Status != 400 || !strings.Contains(r.Fault(t), "resource_class") {
			t.Errorf("no resource_class, no node: %d %s", r.Status, r.Body)
		}

		// Debian's client backfills with --node.
		bm := newCLI(t, srv.URL, "--os-auth-type", "http_basic", "--os-username", "system-admin", "--os-password", "password-system-admin")
		cli := activeNode(t, admin, map[string]any{"name": "bf-cli"})
		got := bm.json("--os-baremetal-api-version", "1.58", "allocation", "create", "--node", "bf-cli").(map[string]any)
		if got["state"] != "active" || got["node_uuid"] != cli {
			t.Errorf("allocation create --node: %v", got)
		}
	})
}
