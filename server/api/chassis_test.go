package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// mustFault checks a 4xx and that its message names what was wrong.
func mustFault(t *testing.T, r *servertest.Response, status int, mention string) {
	t.Helper()
	mustStatus(t, r, status)
	if f := r.Fault(t); !strings.Contains(f, mention) {
		t.Errorf("fault %q does not mention %q", f, mention)
	}
}

// TestChassis: CRUD, paging and fields as Ironic serves them, and a node's
// chassis_uuid on create, show, PATCH and as a list filter.
func TestChassis(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/chassis", map[string]any{"description": "rack 1", "extra": map[string]any{"row": "a"}})
		mustStatus(t, r, 201)
		ch := r.JSON(t)
		id := ch["uuid"].(string)
		if !strings.HasSuffix(r.Header.Get("Location"), "/v1/chassis/"+id) || ch["description"] != "rack 1" || ch["nodes"] == nil || ch["updated_at"] != nil {
			t.Fatalf("created %v, Location %q", ch, r.Header.Get("Location"))
		}
		second := c.Do(t, "POST", "/v1/chassis", map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"})
		mustStatus(t, second, 201)
		mustFault(t, c.Do(t, "POST", "/v1/chassis", map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"}), 409, "already exists")
		mustFault(t, c.Do(t, "POST", "/v1/chassis", map[string]any{"description": strings.Repeat("x", 256)}), 400, "description")
		mustFault(t, c.Do(t, "POST", "/v1/chassis", map[string]any{"uuid": "nope"}), 400, "uuid")
		mustFault(t, c.Do(t, "POST", "/v1/chassis", map[string]any{"name": "x"}), 400, "name")

		list := c.Do(t, "GET", "/v1/chassis", nil).JSON(t)["chassis"].([]any)
		if len(list) != 2 || keysOf(list[0].(map[string]any))[0] != "description" || len(list[0].(map[string]any)) != 3 {
			t.Errorf("list %v", list)
		}
		page := c.Do(t, "GET", "/v1/chassis?limit=1", nil).JSON(t)
		if next, _ := page["next"].(string); !strings.Contains(next, "marker="+id) {
			t.Errorf("first page %v", page)
		}
		if p := c.Do(t, "GET", "/v1/chassis?limit=1&marker="+id, nil).JSON(t); p["next"] != nil || len(p["chassis"].([]any)) != 1 {
			t.Errorf("second page %v", p)
		}
		desc := c.Do(t, "GET", "/v1/chassis?sort_key=uuid&sort_dir=desc&fields=uuid", nil).JSON(t)["chassis"].([]any)
		if desc[0].(map[string]any)["uuid"].(string) < desc[1].(map[string]any)["uuid"].(string) || desc[0].(map[string]any)["description"] != nil {
			t.Errorf("sorted desc %v", desc)
		}
		if d := c.Do(t, "GET", "/v1/chassis/detail", nil).JSON(t)["chassis"].([]any); d[0].(map[string]any)["extra"] == nil {
			t.Errorf("detail %v", d)
		}
		mustFault(t, c.Do(t, "GET", "/v1/chassis?sort_key=extra", nil), 400, "sort_key")
		mustFault(t, c.Do(t, "GET", "/v1/chassis?fields=bogus", nil), 400, "bogus")
		mustFault(t, c.Do(t, "GET", "/v1/chassis?detail=true&fields=uuid", nil), 400, "fields")
		mustFault(t, c.Do(t, "GET", "/v1/chassis?foo=1", nil), 400, "foo")
		mustStatus(t, c.Do(t, "GET", "/v1/chassis/5c9dcd04-2073-49bc-9618-99ae634d8971", nil), 404)

		r = c.Do(t, "PATCH", "/v1/chassis/"+id, []map[string]any{{"op": "add", "path": "/extra/answer", "value": 42}, {"op": "remove", "path": "/description"}})
		mustStatus(t, r, 200)
		if p := r.JSON(t); p["description"] != nil || p["extra"].(map[string]any)["answer"] != float64(42) || p["updated_at"] == nil {
			t.Errorf("patched %v", p)
		}
		mustFault(t, c.Do(t, "PATCH", "/v1/chassis/"+id, []map[string]any{{"op": "replace", "path": "/uuid", "value": "x"}}), 400, "uuid")
		mustFault(t, c.Do(t, "PATCH", "/v1/chassis/"+id, []map[string]any{{"op": "replace", "path": "/extra", "value": 3}}), 400, "extra")

		// Nodes: chassis_uuid on create, in the body, filters and PATCH.
		mustFault(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "chassis_uuid": "5c9dcd04-2073-49bc-9618-99ae634d8971"}), 400, "chassis_uuid")
		r = c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "in-rack", "driver": "fake", "chassis_uuid": id})
		mustStatus(t, r, 201)
		if r.JSON(t)["chassis_uuid"] != id {
			t.Errorf("node created with chassis_uuid %v", r.JSON(t)["chassis_uuid"])
		}
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "loose", "driver": "fake"}), 201)
		if n := c.Do(t, "GET", "/v1/nodes/in-rack", nil).JSON(t); n["chassis_uuid"] != id {
			t.Errorf("node shows chassis_uuid %v", n["chassis_uuid"])
		}
		for _, path := range []string{"/v1/nodes?chassis_uuid=" + id, "/v1/chassis/" + id + "/nodes", "/v1/chassis/" + id + "/nodes/detail", "/v1/nodes?fields=name,chassis_uuid&chassis_uuid=" + id} {
			ns := c.Do(t, "GET", path, nil).JSON(t)["nodes"].([]any)
			if len(ns) != 1 || ns[0].(map[string]any)["name"] != "in-rack" {
				t.Errorf("%s lists %v", path, ns)
			}
			if strings.Contains(path, "fields") && ns[0].(map[string]any)["chassis_uuid"] != id {
				t.Errorf("%s shows %v", path, ns[0])
			}
		}
		mustFault(t, c.Do(t, "GET", "/v1/nodes?chassis_uuid=5c9dcd04-2073-49bc-9618-99ae634d8971", nil), 404, "Chassis")
		mustFault(t, c.Do(t, "GET", "/v1/nodes?chassis_uuid=rack", nil), 400, "chassis_uuid")
		mustFault(t, c.Do(t, "DELETE", "/v1/chassis/"+id, nil), 400, "contains nodes")
		mustFault(t, c.Do(t, "PATCH", "/v1/nodes/loose", []map[string]any{{"op": "add", "path": "/chassis_uuid", "value": "5c9dcd04-2073-49bc-9618-99ae634d8971"}}), 400, "chassis_uuid")
		r = c.Do(t, "PATCH", "/v1/nodes/loose", []map[string]any{{"op": "add", "path": "/chassis_uuid", "value": second.JSON(t)["uuid"]}})
		mustStatus(t, r, 200)
		if r.JSON(t)["chassis_uuid"] != second.JSON(t)["uuid"] {
			t.Errorf("patched node %v", r.JSON(t)["chassis_uuid"])
		}
		r = c.Do(t, "PATCH", "/v1/nodes/in-rack", []map[string]any{{"op": "remove", "path": "/chassis_uuid"}})
		mustStatus(t, r, 200)
		if r.JSON(t)["chassis_uuid"] != nil {
			t.Errorf("node keeps chassis %v", r.JSON(t)["chassis_uuid"])
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/chassis/"+id, nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/chassis/"+id, nil), 404)
	})
}
