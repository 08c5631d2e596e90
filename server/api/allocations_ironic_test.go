package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// allocFixture enrols n1 (owner own, lessee les) and n2 (owner oth),
// both available, and three allocations: a1 by own's member (on n1), a2
// for oth (on n2), a3 for a resource class nothing has (error).
func allocFixture(t *testing.T, clients map[string]*servertest.Client) (n1, n2, a1, a2, a3 string) {
	t.Helper()
	admin := clients["system-admin"]
	n1 = availableNode(t, admin, map[string]any{"name": "n1", "owner": "own", "lessee": "les"})
	n2 = availableNode(t, admin, map[string]any{"name": "n2", "owner": "oth"})
	create := func(c *servertest.Client, body map[string]any) string {
		return allocate(t, c, body)["uuid"].(string)
	}
	a1 = create(clients["owner-member"], map[string]any{"resource_class": "baremetal", "name": "a-one"})
	a2 = create(admin, map[string]any{"resource_class": "baremetal", "owner": "oth", "candidate_nodes": []string{"n2"}, "name": "a-two"})
	a3 = create(admin, map[string]any{"resource_class": "gpu"})
	return
}

func allocUUIDs(t *testing.T, r *servertest.Response) string {
	t.Helper()
	mustStatus(t, r, 200)
	var out []string
	for _, a := range r.JSON(t)["allocations"].([]any) {
		out = append(out, a.(map[string]any)["uuid"].(string))
	}
	return strings.Join(out, ",")
}

// wantFor reads a persona expectation row, columns as in personas.
func wantFor(row string) []string { return strings.Fields(strings.ReplaceAll(row, "|", "")) }

// TestAllocationUpdate: PATCH changes name and extra only, under
// baremetal:allocation:update; a hidden allocation is 404, and every bad
// patch is a 400 naming the field with nothing written.
func TestAllocationUpdate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		_, _, a1, _, _ := allocFixture(t, clients)

		// allocation:update is ALLOCATION_MEMBER: system members (the elevated
		// service project included) and members of the owning project; a
		// service user of the owner is no reader of it, so cannot see it.
		want := wantFor("401 | 200 200 403 403 | 200 200 200 403 404 | 404 404 404 404 404 | 404 404 404 404 | 200")
		for i, p := range personas {
			body := fmt.Sprintf(`[{"op":"add","path":"/extra/by","value":%q}]`, p.name)
			if got := clients[p.name].Do(t, "PATCH", "/v1/allocations/"+a1, body).Status; fmt.Sprint(got) != want[i] {
				t.Errorf("PATCH as %s: %d, want %s", p.name, got, want[i])
			}
		}

		r := admin.Do(t, "PATCH", "/v1/allocations/a-one", `[{"op":"replace","path":"/name","value":"a-renamed"},{"op":"add","path":"/extra/k","value":"v"}]`)
		mustStatus(t, r, 200)
		if a := r.JSON(t); a["name"] != "a-renamed" || a["extra"].(map[string]any)["k"] != "v" || a["extra"].(map[string]any)["by"] != "service-project-service" {
			t.Errorf("patched: %v", a)
		}
		for _, tc := range []struct{ body, field string }{
			{`[{"op":"replace","path":"/resource_class","value":"x"}]`, "resource_class"},
			{`[{"op":"replace","path":"/owner","value":"oth"}]`, "owner"},
			{`[{"op":"copy","from":"/state","path":"/extra/s"}]`, "state"},
			{`[{"op":"replace","path":"/name","value":"bad name"}]`, "name"},
			{`[{"op":"replace","path":"/name","value":7}]`, "name"},
			{`[{"op":"replace","path":"/extra","value":"x"}]`, "extra"},
			{`{"op":"replace"}`, "patch"},
			{`[]`, "patch"},
			{`[{"op":"remove","path":"/extra/missing"}]`, "patch"},
		} {
			r := admin.Do(t, "PATCH", "/v1/allocations/"+a1, tc.body)
			if r.Status != 400 || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("PATCH %s: %d %q, want 400 naming %s", tc.body, r.Status, r.Fault(t), tc.field)
			}
		}
		if r := at(admin, "1.56").Do(t, "PATCH", "/v1/allocations/"+a1, `[{"op":"remove","path":"/name"}]`); r.Status != 405 {
			t.Errorf("PATCH at 1.56: %d, want 405", r.Status)
		}
		r = admin.Do(t, "PATCH", "/v1/allocations/"+a1, `[{"op":"remove","path":"/name"},{"op":"remove","path":"/extra/k"}]`)
		mustStatus(t, r, 200)
		if a := r.JSON(t); a["name"] != nil || a["extra"].(map[string]any)["k"] != nil || a["resource_class"] != "baremetal" || a["owner"] != "own" {
			t.Errorf("after remove: %v", a)
		}
		if r := admin.Do(t, "PATCH", "/v1/allocations/"+a1, `[{"op":"add","path":"/name","value":"a-two"}]`); r.Status != 409 {
			t.Errorf("duplicate name: %d, want 409", r.Status)
		}
	})
}

// TestNodeAllocationDelete: DELETE /v1/nodes/{node}/allocation checks
// node visibility (404), then baremetal:allocation:delete (403), and
// frees the node.
func TestNodeAllocationDelete(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		n1, _, _, _, _ := allocFixture(t, clients)
		// The node's visibility first (node:get), then ALLOCATION_MEMBER.
		want := wantFor("401 | 204 204 403 403 | 204 204 204 403 403 | 403 403 403 403 404 | 404 404 404 404 | 204")
		for i, p := range personas {
			if admin.Do(t, "GET", "/v1/nodes/"+n1+"/allocation", nil).Status == 404 {
				allocate(t, admin, map[string]any{"resource_class": "baremetal", "owner": "own", "candidate_nodes": []string{n1}})
			}
			if got := clients[p.name].Do(t, "DELETE", "/v1/nodes/n1/allocation", nil).Status; fmt.Sprint(got) != want[i] {
				t.Errorf("DELETE as %s: %d, want %s", p.name, got, want[i])
			}
		}
		if admin.Do(t, "GET", "/v1/nodes/"+n1+"/allocation", nil).Status == 404 {
			allocate(t, admin, map[string]any{"resource_class": "baremetal", "owner": "own", "candidate_nodes": []string{n1}})
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+n1+"/allocation", nil), 204)
		n := admin.Do(t, "GET", "/v1/nodes/"+n1, nil).JSON(t)
		if n["allocation_uuid"] != nil || n["instance_uuid"] != nil {
			t.Errorf("node still allocated: %v %v", n["allocation_uuid"], n["instance_uuid"])
		}
		r := admin.Do(t, "DELETE", "/v1/nodes/"+n1+"/allocation", nil)
		if r.Status != 404 || !strings.Contains(r.Fault(t), "Allocation for node") {
			t.Errorf("no allocation: %d %q", r.Status, r.Fault(t))
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/nope/allocation", nil), 404)
	})
}

// TestAllocationListFilters: node (UUID or name), resource_class,
// owner, state, fields and paging, each filtered in SQL, and a 400
// naming the parameter for each bad value.
func TestAllocationListFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		reader := clients["system-reader"]
		n1, n2, a1, a2, a3 := allocFixture(t, clients)

		for q, want := range map[string]string{
			"":                            a1 + "," + a2 + "," + a3,
			"?node=n1":                    a1,
			"?node=" + n2:                 a2,
			"?resource_class=gpu":         a3,
			"?owner=oth":                  a2,
			"?state=error":                a3,
			"?state=active&sort_dir=desc": a2 + "," + a1,
			"?sort_key=name&sort_dir=asc": a3 + "," + a1 + "," + a2,
			"?sort_key=name&marker=" + a1: a2,
		} {
			if got := allocUUIDs(t, reader.Do(t, "GET", "/v1/allocations"+q, nil)); got != want {
				t.Errorf("GET /v1/allocations%s = %s, want %s", q, got, want)
			}
		}
		r := reader.Do(t, "GET", "/v1/allocations?limit=2", nil)
		page := r.JSON(t)
		next, _ := page["next"].(string)
		if len(page["allocations"].([]any)) != 2 || !strings.Contains(next, "marker=") {
			t.Fatalf("first page %s", r.Body)
		}
		if got := allocUUIDs(t, reader.Do(t, "GET", next[strings.Index(next, "/v1/"):], nil)); got != a3 {
			t.Errorf("second page %s, want %s", got, a3)
		}
		f := reader.Do(t, "GET", "/v1/allocations?fields=uuid,state", nil).JSON(t)["allocations"].([]any)[0].(map[string]any)
		if strings.Join(keysOf(f), ",") != "links,state,uuid" {
			t.Errorf("fields gives %v", keysOf(f))
		}
		if f := reader.Do(t, "GET", "/v1/allocations/"+a1+"?fields=name", nil).JSON(t); strings.Join(keysOf(f), ",") != "links,name" {
			t.Errorf("show fields gives %v", keysOf(f))
		}
		n := reader.Do(t, "GET", "/v1/nodes/"+n1, nil).JSON(t)
		if n["allocation_uuid"] != a1 {
			t.Errorf("node allocation_uuid %v, want %s", n["allocation_uuid"], a1)
		}
		if n := at(reader, "1.51").Do(t, "GET", "/v1/nodes/"+n1, nil).JSON(t); n["allocation_uuid"] != nil {
			t.Errorf("allocation_uuid shown at 1.51")
		}
		list := reader.Do(t, "GET", "/v1/nodes?fields=name,allocation_uuid&sort_key=name", nil).JSON(t)["nodes"].([]any)
		if list[0].(map[string]any)["allocation_uuid"] != a1 || list[1].(map[string]any)["allocation_uuid"] != a2 {
			t.Errorf("node list allocation_uuid: %v", list)
		}

		for _, tc := range []struct {
			who, q string
			want   int
			field  string
		}{
			{"system-reader", "?node=nope", 400, "nope"},
			{"system-reader", "?state=gone", 400, "state"},
			{"system-reader", "?fields=bogus", 400, "bogus"},
			{"system-reader", "?limit=-1", 400, "limit"},
			{"system-reader", "?sort_key=extra", 400, "extra"},
			{"system-reader", "?sort_dir=up", 400, "sort_dir"},
			{"system-reader", "?marker=" + n1, 400, "marker"},
			{"system-reader", "?colour=red", 400, "colour"},
			{"owner-reader", "?owner=oth", 403, "own project"},
			{"other-reader", "?node=n1", 400, "n1"},
			{"other-reader", "?marker=" + a1, 400, "marker"},
		} {
			r := clients[tc.who].Do(t, "GET", "/v1/allocations"+tc.q, nil)
			if r.Status != tc.want || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("%s GET %s: %d %q, want %d naming %s", tc.who, tc.q, r.Status, r.Fault(t), tc.want, tc.field)
			}
		}
		if r := at(reader, "1.59").Do(t, "GET", "/v1/allocations?owner=own", nil); r.Status != 406 {
			t.Errorf("owner filter at 1.59: %d, want 406", r.Status)
		}
		// A project sees its own allocations only, and may name itself.
		for q, want := range map[string]string{
			"owner-reader|":           a1,
			"owner-reader|?owner=own": a1,
			"lessee-reader|":          "",
			"other-reader|?owner=oth": a2,
		} {
			who, query, _ := strings.Cut(q, "|")
			if got := allocUUIDs(t, clients[who].Do(t, "GET", "/v1/allocations"+query, nil)); got != want {
				t.Errorf("%s GET %s lists %s, want %s", who, query, got, want)
			}
		}
	})
}

// TestDeployedAllocationLifecycle: as Ironic, a deployed node keeps its
// allocation until it is undeployed (DELETE and removing instance_uuid
// are 409 outside maintenance), the tear-down releases it, and an
// instance is never overwritten by another.
func TestDeployedAllocationLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		id := availableNode(t, admin, map[string]any{"name": "dal", "owner": "own"})
		a := allocate(t, clients["owner-member"], map[string]any{"resource_class": "baremetal", "name": "dal-lease"})
		if a["node_uuid"] != id {
			t.Fatalf("allocation landed on %v, want %s", a["node_uuid"], id)
		}
		uuid := a["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")

		for _, path := range []string{"/v1/allocations/" + uuid, "/v1/nodes/" + id + "/allocation"} {
			r := clients["owner-member"].Do(t, "DELETE", path, nil)
			if r.Status != 409 || !strings.Contains(r.Fault(t), "because the node is active") {
				t.Errorf("DELETE %s of a deployed node's allocation: %d %q, want 409", path, r.Status, r.Fault(t))
			}
		}
		r := admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/instance_uuid"}})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "can not have instance_uuid removed") {
			t.Errorf("removing a deployed node's instance_uuid: %d %q, want 409", r.Status, r.Fault(t))
		}
		r = admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/instance_uuid", "value": "6b0b8a3e-8d3c-4b53-9c0e-6c1d7b1e2f3a"}})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "is associated with instance "+uuid) {
			t.Errorf("overwriting the instance: %d %q, want 409", r.Status, r.Fault(t))
		}
		mustStatus(t, admin.Do(t, "GET", "/v1/allocations/"+uuid, nil), 200)

		provision(t, admin, id, map[string]any{"target": "deleted"}, 202)
		n := waitState(t, admin, id, "available")
		if n["allocation_uuid"] != nil || n["instance_uuid"] != nil {
			t.Errorf("undeployed node still allocated: %v %v", n["allocation_uuid"], n["instance_uuid"])
		}
		mustStatus(t, admin.Do(t, "GET", "/v1/allocations/"+uuid, nil), 404)
		h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil)
		if !strings.Contains(string(h.Body), "allocation dal-lease released") {
			t.Errorf("the tear-down's history does not say the allocation went: %s", h.Body)
		}

		// In maintenance an allocation always goes, as in Ironic; idle,
		// removing instance_uuid releases it.
		a = allocate(t, clients["owner-member"], map[string]any{"resource_class": "baremetal"})
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/maintenance", "value": true}}), 200)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/instance_uuid"}}), 200)
		mustStatus(t, admin.Do(t, "GET", "/v1/allocations/"+a["uuid"].(string), nil), 404)
	})
}
