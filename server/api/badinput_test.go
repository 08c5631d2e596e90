package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBadInput sends malformed and invalid requests: each must get a 4xx
// whose message names the field or problem, and leave the database as it
// was.
func TestBadInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", ipmiNode("keeper"))
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": "other"}), 201)

		snapshot := func() string {
			ns, err := srv.DB.Node.Query().All(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			evs, _ := srv.DB.NodeEvent.Query().Count(t.Context())
			trs, _ := srv.DB.Trait.Query().Count(t.Context())
			b, _ := json.Marshal(ns)
			return fmt.Sprintf("%s|events=%d|traits=%d", b, evs, trs)
		}
		before := snapshot()
		long := strings.Repeat("x", 256)
		cases := []struct {
			name, method, path string
			body               any
			status             int
			mention            string
		}{
			{"malformed JSON", "POST", "/v1/nodes", `{"driver": "fake",`, 400, "JSON"},
			{"not an object", "POST", "/v1/nodes", `[1,2]`, 400, "object"},
			{"unknown field", "POST", "/v1/nodes", map[string]any{"driver": "fake", "colour": "red"}, 400, "colour"},
			{"read-only field on create", "POST", "/v1/nodes", map[string]any{"driver": "fake", "provision_state": "active"}, 400, "provision_state"},
			{"missing driver", "POST", "/v1/nodes", map[string]any{"name": "x1"}, 400, "driver"},
			{"unknown driver", "POST", "/v1/nodes", map[string]any{"driver": "magic"}, 400, "driver"},
			{"ipmi with a bad port", "POST", "/v1/nodes", map[string]any{"driver": "ipmi", "driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": 70000}}, 400, "ipmi_port"},
			{"invalid uuid", "POST", "/v1/nodes", map[string]any{"driver": "fake", "uuid": "not-a-uuid"}, 400, "uuid"},
			{"over-long name", "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": long}, 400, "name"},
			{"bad name characters", "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": "a b"}, 400, "name"},
			{"over-long owner", "POST", "/v1/nodes", map[string]any{"driver": "fake", "owner": long}, 400, "owner"},
			{"wrong type", "POST", "/v1/nodes", map[string]any{"driver": "fake", "properties": "big"}, 400, "properties"},
			{"duplicate name", "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": "keeper"}, 409, "keeper"},
			{"duplicate uuid", "POST", "/v1/nodes", map[string]any{"driver": "fake", "uuid": id}, 409, id},
			{"body over 1 MiB", "POST", "/v1/nodes", `{"driver":"fake","extra":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`, 413, "1 MiB"},
			{"patch read-only", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "replace", "path": "/uuid", "value": "x"}}, 400, "uuid"},
			{"patch provision_state", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "replace", "path": "/provision_state", "value": "active"}}, 400, "provision_state"},
			{"patch unknown path", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "add", "path": "/colour", "value": "red"}}, 400, "colour"},
			{"patch bad op", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "frobnicate", "path": "/extra/a", "value": 1}}, 400, "frobnicate"},
			{"patch without value", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "add", "path": "/extra/a"}}, 400, "value"},
			{"patch remove missing", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "remove", "path": "/extra/nope"}}, 400, "patch"},
			{"patch not a list", "PATCH", "/v1/nodes/" + id, map[string]any{"op": "add"}, 400, "patch"},
			{"patch empty", "PATCH", "/v1/nodes/" + id, []any{}, 400, "empty"},
			{"patch duplicate name", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "replace", "path": "/name", "value": "other"}}, 409, "other"},
			{"patch bad name", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "replace", "path": "/name", "value": long}}, 400, "name"},
			{"patch owner type", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "replace", "path": "/owner", "value": 7}}, 400, "owner"},
			{"patch remove driver", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "remove", "path": "/driver"}}, 400, "driver"},
			{"patch bad ipmi port", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "add", "path": "/driver_info/ipmi_port", "value": 0}}, 400, "ipmi_port"},
			{"patch atomic: second op bad", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "add", "path": "/extra/a", "value": 1}, {"op": "replace", "path": "/uuid", "value": "y"}}, 400, "uuid"},
			{"patch driver_internal_info", "PATCH", "/v1/nodes/" + id, []map[string]any{{"op": "add", "path": "/driver_internal_info/a", "value": 1}}, 400, "driver_internal_info"},
			{"unknown node", "GET", "/v1/nodes/11111111-2222-3333-4444-555555555555", nil, 404, "11111111"},
			{"bad traits body", "PUT", "/v1/nodes/" + id + "/traits", map[string]any{"traits": "CUSTOM_A"}, 400, "traits"},
			{"invalid trait", "PUT", "/v1/nodes/" + id + "/traits", map[string]any{"traits": []string{"CUSTOM_A", "nope"}}, 400, "nope"},
			{"maintenance reason type", "PUT", "/v1/nodes/" + id + "/maintenance", map[string]any{"reason": 5}, 400, "reason"},
			{"unknown route", "GET", "/v1/widgets", nil, 404, "widgets"},
		}
		for _, tc := range cases {
			r := c.Do(t, tc.method, tc.path, tc.body)
			if r.Status != tc.status {
				t.Errorf("%s: status %d, want %d: %.300s", tc.name, r.Status, tc.status, r.Body)
				continue
			}
			if f := r.Fault(t); !strings.Contains(f, tc.mention) {
				t.Errorf("%s: message %q does not mention %q", tc.name, f, tc.mention)
			}
		}
		if after := snapshot(); after != before {
			t.Errorf("database changed by refused requests:\nbefore %s\nafter  %s", before, after)
		}
	})
}
