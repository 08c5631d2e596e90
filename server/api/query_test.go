package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestUnknownQueryParameters walks every GET endpoint with a parameter it
// does not define: each answers 400 naming it, so a mistyped or
// unsupported filter can never widen a list to everything.
func TestUnknownQueryParameters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "q1", "driver": "fake", "owner": "own", "lessee": "les", "description": "rack 7 GPU box", "instance_uuid": "5a1c4e2b-9f2d-4f6e-8c1a-0b3d2e4f6a7c"}), 201)
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "q2", "driver": "fake", "owner": "oth"}), 201)
		r := admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_Q", "steps": []any{map[string]any{"interface": "power", "step": "power_on", "args": map[string]any{}, "order": 1}}})
		mustStatus(t, r, 201)
		rb := r.JSON(t)["uuid"].(string)
		ch := created(t, admin, "/v1/chassis", map[string]any{})
		dt := created(t, admin, "/v1/deploy_templates", map[string]any{"name": "CUSTOM_Q", "steps": []any{map[string]any{"interface": "power", "step": "reboot", "args": map[string]any{}, "priority": 1}}})
		q1 := admin.Do(t, "GET", "/v1/nodes/q1", nil).JSON(t)["uuid"].(string)
		vc := created(t, admin, "/v1/volume/connectors", map[string]any{"node_uuid": q1, "type": "iqn", "connector_id": "iqn.q"})
		vt := created(t, admin, "/v1/volume/targets", map[string]any{"node_uuid": q1, "volume_type": "iscsi", "volume_id": "q", "boot_index": 0})
		for _, path := range []string{
			"/v1/chassis", "/v1/chassis/detail", "/v1/chassis/" + ch, "/v1/chassis/" + ch + "/nodes", "/v1/chassis/" + ch + "/nodes/detail",
			"/v1/deploy_templates", "/v1/deploy_templates/" + dt, "/v1/volume", "/v1/volume/connectors", "/v1/volume/targets",
			"/v1/volume/connectors/" + vc, "/v1/volume/targets/" + vt, "/v1/nodes/q1/volume", "/v1/nodes/q1/volume/connectors",
			"/v1/nodes/q1/volume/targets", "/v1/nodes/q1/vendor_passthru/methods", "/v1/drivers/ipmi/vendor_passthru/methods",
			"/v1/nodes", "/v1/nodes/detail", "/v1/nodes/q1", "/v1/nodes/q1/traits", "/v1/nodes/q1/history",
			"/v1/nodes/q1/states", "/v1/nodes/q1/management/boot_device", "/v1/nodes/q1/steps",
			"/v1/nodes/q1/allocation", "/v1/conductors", "/v1/events", "/v1/allocations",
			"/v1/runbooks", "/v1/runbooks/detail", "/v1/runbooks/" + rb, "/v1/runbooks/" + rb + "/traits",
		} {
			r := admin.Do(t, "GET", path+"?zzz=1&foo=bar", nil)
			if r.Status != 400 || !strings.Contains(r.Fault(t), "Unexpected arguments: foo, zzz") {
				t.Errorf("GET %s?foo=bar: %d %s", path, r.Status, r.Body)
			}
		}
		// A conductor that serves no ring has no nodes, as in Ironic.
		if r := admin.Do(t, "GET", "/v1/nodes?conductor=c1", nil); r.Status != 200 || len(r.JSON(t)["nodes"].([]any)) != 0 {
			t.Errorf("GET /v1/nodes?conductor=c1: %d %s", r.Status, r.Body)
		}
		// Filters on fields newer than the request's version are refused
		// as Ironic refuses a filter the version lacks.
		at81 := *admin
		at81.Version = "1.81"
		for _, q := range []string{"shard=s", "sharded=true", "parent_node=q1", "include_children=true"} {
			if r := at81.Do(t, "GET", "/v1/nodes?"+q, nil); r.Status != 406 {
				t.Errorf("GET /v1/nodes?%s: %d %s", q, r.Status, r.Body)
			}
		}
		if r := admin.Do(t, "GET", "/v1/nodes?retired=maybe", nil); r.Status != 400 || !strings.Contains(r.Fault(t), "retired") {
			t.Errorf("retired=maybe: %d %s", r.Status, r.Body)
		}
		if r := admin.Do(t, "GET", "/v1/nodes?fault=bad%20luck", nil); r.Status != 400 || !strings.Contains(r.Fault(t), "Valid faults are: power failure") {
			t.Errorf("unknown fault: %d %s", r.Status, r.Body)
		}
		if err := db.Node.Update().Where(node.Name("q2")).SetFault("power failure").SetRetired(true).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		names := func(c string, query string) string {
			r := clients[c].Do(t, "GET", "/v1/nodes?sort_key=name&"+query, nil)
			mustStatus(t, r, 200)
			var out []string
			for _, n := range r.JSON(t)["nodes"].([]any) {
				out = append(out, n.(map[string]any)["name"].(string))
			}
			return strings.Join(out, ",")
		}
		for _, row := range []struct{ persona, query, want string }{
			{"system-admin", "project=own", "q1"},
			{"system-admin", "project=les", "q1"},
			{"system-admin", "project=oth", "q2"},
			{"lessee-reader", "project=oth", ""},
			{"system-admin", "description_contains=GPU", "q1"},
			{"system-admin", "fault=power%20failure", "q2"},
			{"system-admin", "fault=clean%20failure", ""},
			{"system-admin", "retired=true", "q2"},
			{"system-admin", "retired=false", "q1"},
			{"system-admin", "description_contains=nothing-like-it", ""},
			{"system-admin", "instance_uuid=5A1C4E2B-9F2D-4F6E-8C1A-0B3D2E4F6A7C", "q1"},
		} {
			if got := names(row.persona, row.query); got != row.want {
				t.Errorf("%s ?%s lists %q, want %q", row.persona, row.query, got, row.want)
			}
		}
	})
}
