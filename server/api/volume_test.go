package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/server/volume"
)

// power sets a node's power and waits until the BMC state is recorded.
func power(t *testing.T, c *servertest.Client, id, target string) {
	t.Helper()
	mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target}), 202)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["power_state"] == target && n["target_power_state"] == nil && n["reservation"] == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s stays %v", id, n["power_state"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func uuids(t *testing.T, r *servertest.Response, key string) []string {
	t.Helper()
	mustStatus(t, r, 200)
	var out []string
	for _, x := range r.JSON(t)[key].([]any) {
		out = append(out, x.(map[string]any)["uuid"].(string))
	}
	return out
}

// TestVolume: connectors and targets with Ironic's validation, filters and
// paging, and changes only while the node's state allows them.
func TestVolume(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vol-1", "driver": "fake"})
		mustStatus(t, r, 201)
		n1 := r.JSON(t)["uuid"].(string)
		r = c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vol-2", "driver": "fake"})
		mustStatus(t, r, 201)
		n2 := r.JSON(t)["uuid"].(string)

		// Connectors.
		r = c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": n1, "type": "iqn", "connector_id": "iqn.2017-07.org.openstack:01:d9a51732c3f"})
		mustStatus(t, r, 201)
		vc := r.JSON(t)
		if vc["node_uuid"] != n1 || vc["type"] != "iqn" || vc["extra"] == nil || r.Header.Get("Location") == "" {
			t.Fatalf("connector %v", vc)
		}
		mustFault(t, c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": n2, "type": "iqn", "connector_id": "iqn.2017-07.org.openstack:01:d9a51732c3f"}), 409, "already exists")
		mustFault(t, c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": n1, "type": "floppy", "connector_id": "x"}), 400, "type")
		mustFault(t, c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": n1, "type": "wwpn"}), 400, "connector_id")
		mustFault(t, c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": "5c9dcd04-2073-49bc-9618-99ae634d8971", "type": "ip", "connector_id": "192.0.2.1"}), 400, "node_uuid")
		mustFault(t, c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": "vol-1", "type": "ip", "connector_id": "192.0.2.1"}), 400, "node_uuid")
		r = c.Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": n2, "type": "mac", "connector_id": "52:54:00:12:34:56", "extra": map[string]any{"k": "v"}})
		mustStatus(t, r, 201)
		vc2 := r.JSON(t)["uuid"].(string)

		if got := uuids(t, c.Do(t, "GET", "/v1/volume/connectors", nil), "connectors"); len(got) != 2 {
			t.Errorf("connectors %v", got)
		}
		if got := uuids(t, c.Do(t, "GET", "/v1/volume/connectors?node=vol-2", nil), "connectors"); len(got) != 1 || got[0] != vc2 {
			t.Errorf("?node= lists %v", got)
		}
		if got := uuids(t, c.Do(t, "GET", "/v1/nodes/vol-1/volume/connectors", nil), "connectors"); len(got) != 1 || got[0] != vc["uuid"] {
			t.Errorf("node's connectors %v", got)
		}
		list := c.Do(t, "GET", "/v1/volume/connectors?detail=true&sort_key=type&sort_dir=desc", nil).JSON(t)["connectors"].([]any)
		if first := list[0].(map[string]any); first["type"] != "mac" || first["extra"] == nil {
			t.Errorf("detail sorted %v", list)
		}
		short := c.Do(t, "GET", "/v1/volume/connectors?fields=uuid", nil).JSON(t)["connectors"].([]any)
		if len(short[0].(map[string]any)) != 2 {
			t.Errorf("fields=uuid gives %v", short[0])
		}
		page := c.Do(t, "GET", "/v1/volume/connectors?limit=1", nil).JSON(t)
		if page["next"] == nil {
			t.Errorf("no next link: %v", page)
		}
		mustFault(t, c.Do(t, "GET", "/v1/volume/connectors?node=nope", nil), 404, "nope")
		mustFault(t, c.Do(t, "GET", "/v1/volume/connectors?sort_key=extra", nil), 400, "sort_key")
		mustFault(t, c.Do(t, "GET", "/v1/volume/connectors?owner=x", nil), 400, "owner")
		mustStatus(t, at(c, "1.31").Do(t, "GET", "/v1/volume/connectors", nil), 404)
		root := c.Do(t, "GET", "/v1/volume", nil).JSON(t)
		if root["connectors"] == nil || root["targets"] == nil {
			t.Errorf("/v1/volume %v", root)
		}
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/vol-1/volume", nil), 200)

		// A change needs the node powered off; enroll allows deletion.
		patch := []map[string]any{{"op": "add", "path": "/extra/answer", "value": 42}}
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/connectors/"+vc2, patch), 400, "volume connector update")
		power(t, c, n2, "power off")
		r = c.Do(t, "PATCH", "/v1/volume/connectors/"+vc2, patch)
		mustStatus(t, r, 200)
		if r.JSON(t)["extra"].(map[string]any)["answer"] != float64(42) || r.JSON(t)["updated_at"] == nil {
			t.Errorf("patched %v", r.JSON(t))
		}
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/connectors/"+vc2, []map[string]any{{"op": "replace", "path": "/type", "value": "disk"}}), 400, "type")
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/connectors/"+vc2, []map[string]any{{"op": "replace", "path": "/uuid", "value": n1}}), 400, "uuid")
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/connectors/"+vc2, []map[string]any{{"op": "replace", "path": "/node_uuid", "value": "5c9dcd04-2073-49bc-9618-99ae634d8971"}}), 400, "node_uuid")
		mustStatus(t, c.Do(t, "DELETE", "/v1/volume/connectors/"+vc["uuid"].(string), nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/volume/connectors/"+vc["uuid"].(string), nil), 404)

		// Targets.
		body := map[string]any{"node_uuid": n2, "volume_type": "iscsi", "volume_id": "04452bed-5367-4202-8bf5-de4335ac56d2", "boot_index": 0,
			"properties": map[string]any{"target_iqn": "iqn.x", "auth_password": "pw"}}
		r = c.Do(t, "POST", "/v1/volume/targets", body)
		mustStatus(t, r, 201)
		vt := r.JSON(t)
		if p := vt["properties"].(map[string]any); p["auth_password"] != "******" || p["target_iqn"] != "iqn.x" || vt["boot_index"] != float64(0) {
			t.Errorf("target %v", vt)
		}
		mustFault(t, c.Do(t, "POST", "/v1/volume/targets", body), 409, "boot index")
		body["boot_index"] = 1
		delete(body, "volume_id")
		mustFault(t, c.Do(t, "POST", "/v1/volume/targets", body), 400, "volume_id")
		body["volume_id"] = "not-a-uuid-but-fine"
		delete(body, "boot_index")
		mustFault(t, c.Do(t, "POST", "/v1/volume/targets", body), 400, "boot_index")
		body["boot_index"] = "one"
		mustFault(t, c.Do(t, "POST", "/v1/volume/targets", body), 400, "boot_index")
		body["boot_index"] = 1
		mustStatus(t, c.Do(t, "POST", "/v1/volume/targets", body), 201)
		body["node_uuid"] = n1
		mustStatus(t, c.Do(t, "POST", "/v1/volume/targets", body), 201)
		if got := uuids(t, c.Do(t, "GET", "/v1/nodes/vol-2/volume/targets", nil), "targets"); len(got) != 2 {
			t.Errorf("node's targets %v", got)
		}
		if got := uuids(t, c.Do(t, "GET", "/v1/volume/targets?sort_key=boot_index&sort_dir=desc&limit=1", nil), "targets"); len(got) != 1 {
			t.Errorf("targets page %v", got)
		}
		mustFault(t, c.Do(t, "GET", "/v1/volume/targets?sort_key=properties", nil), 400, "sort_key")
		vtID := vt["uuid"].(string)
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/targets/"+vtID, []map[string]any{{"op": "replace", "path": "/boot_index", "value": 1}}), 409, "boot index")
		r = c.Do(t, "PATCH", "/v1/volume/targets/"+vtID, []map[string]any{{"op": "replace", "path": "/boot_index", "value": 5}})
		mustStatus(t, r, 200)
		if r.JSON(t)["boot_index"] != float64(5) || r.JSON(t)["properties"].(map[string]any)["auth_password"] != "******" {
			t.Errorf("patched target %v", r.JSON(t))
		}
		// In available and powered on, the node keeps its records.
		power(t, c, n2, "power on")
		mustFault(t, c.Do(t, "PATCH", "/v1/volume/targets/"+vtID, []map[string]any{{"op": "replace", "path": "/boot_index", "value": 6}}), 400, "power on")
		mustStatus(t, c.Do(t, "DELETE", "/v1/volume/targets/"+vtID, nil), 204) // enroll allows it
		provision(t, c, n2, map[string]any{"target": "manage"}, 202)
		waitState(t, c, n2, "manageable")
		provision(t, c, n2, map[string]any{"target": "provide"}, 202)
		waitState(t, c, n2, "available")
		power(t, c, n2, "power on")
		mustFault(t, c.Do(t, "DELETE", "/v1/volume/connectors/"+vc2, nil), 400, "volume connector deletion")

		// Deleting a node takes its volume records with it.
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+n1, nil), 204)
		if got := uuids(t, c.Do(t, "GET", "/v1/volume/targets", nil), "targets"); len(got) != 1 {
			t.Errorf("targets after node delete %v", got)
		}
	})
}

// TestVolumeTenants: what each project sees of volume records. Lists hold
// only records of nodes the project owns or leases, a hidden node's
// records and the node itself answer as if they did not exist, and target
// properties need view_target_properties (system readers, admins).
func TestVolumeTenants(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mk := func(name, owner, lessee string) string {
			return created(t, admin, "/v1/nodes", map[string]any{"name": name, "driver": "fake", "owner": owner, "lessee": lessee})
		}
		owned, foreign := mk("owned", "own", "les"), mk("foreign", "oth", "")
		vcOwned := created(t, admin, "/v1/volume/connectors", map[string]any{"node_uuid": owned, "type": "iqn", "connector_id": "iqn.a"})
		vcForeign := created(t, admin, "/v1/volume/connectors", map[string]any{"node_uuid": foreign, "type": "iqn", "connector_id": "iqn.b"})
		vt := created(t, admin, "/v1/volume/targets", map[string]any{"node_uuid": owned, "volume_type": "iscsi", "volume_id": "v1", "boot_index": 0,
			"properties": map[string]any{"target_portal": "192.0.2.5:3260", "auth_password": "pw"}})
		created(t, admin, "/v1/volume/targets", map[string]any{"node_uuid": foreign, "volume_type": "iscsi", "volume_id": "v2", "boot_index": 0})

		for persona, want := range map[string]int{"system-reader": 2, "owner-reader": 1, "lessee-member": 1, "other-reader": 1} {
			if got := uuids(t, clients[persona].Do(t, "GET", "/v1/volume/connectors", nil), "connectors"); len(got) != want {
				t.Errorf("%s lists connectors %v, want %d", persona, got, want)
			}
			if got := uuids(t, clients[persona].Do(t, "GET", "/v1/volume/targets?detail=true", nil), "targets"); len(got) != want {
				t.Errorf("%s lists targets %v, want %d", persona, got, want)
			}
		}
		if got := uuids(t, clients["lessee-member"].Do(t, "GET", "/v1/volume/connectors", nil), "connectors"); got[0] != vcOwned {
			t.Errorf("lessee lists %v", got)
		}
		// A node, connector or marker the caller cannot see reads exactly
		// as one that does not exist.
		other := clients["other-reader"]
		for _, path := range []string{"/v1/volume/connectors?node=" + owned, "/v1/nodes/" + owned + "/volume/connectors", "/v1/volume/connectors/" + vcOwned, "/v1/volume/targets/" + vt} {
			hidden := other.Do(t, "GET", path, nil)
			missing := other.Do(t, "GET", strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(path, owned, "5c9dcd04-2073-49bc-9618-99ae634d8971"), vcOwned, "5c9dcd04-2073-49bc-9618-99ae634d8971"), vt, "5c9dcd04-2073-49bc-9618-99ae634d8971"), nil)
			mustStatus(t, hidden, 404)
			if hidden.Status != missing.Status || strings.Contains(hidden.Fault(t), "own") {
				t.Errorf("%s: hidden %d %q, missing %d %q", path, hidden.Status, hidden.Fault(t), missing.Status, missing.Fault(t))
			}
		}
		mustFault(t, other.Do(t, "GET", "/v1/volume/connectors?marker="+vcOwned, nil), 400, "marker")
		mustStatus(t, clients["other-admin"].Do(t, "DELETE", "/v1/volume/connectors/"+vcOwned, nil), 404)
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/volume/connectors/"+vcForeign, nil), 404)
		// Creating on a hidden node is refused as creating on no node.
		hidden := clients["other-admin"].Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": owned, "type": "ip", "connector_id": "192.0.2.9"})
		missing := clients["other-admin"].Do(t, "POST", "/v1/volume/connectors", map[string]any{"node_uuid": "5c9dcd04-2073-49bc-9618-99ae634d8971", "type": "ip", "connector_id": "192.0.2.9"})
		if hidden.Status != 403 || missing.Status != 403 {
			t.Errorf("create on hidden node %d, on missing node %d", hidden.Status, missing.Status)
		}
		// Moving a connector to a node of another owner is an invalid value.
		mustFault(t, admin.Do(t, "PATCH", "/v1/volume/connectors/"+vcOwned, []map[string]any{{"op": "replace", "path": "/node_uuid", "value": foreign}}), 400, "node_uuid")

		props := func(persona string) map[string]any {
			r := clients[persona].Do(t, "GET", "/v1/volume/targets/"+vt, nil)
			mustStatus(t, r, 200)
			return r.JSON(t)["properties"].(map[string]any)
		}
		if p := props("owner-member"); p["redacted_contents"] != volume.RedactedProperties || p["target_portal"] != nil {
			t.Errorf("owner member sees properties %v", p)
		}
		for _, persona := range []string{"owner-admin", "lessee-admin", "system-reader"} {
			if p := props(persona); p["target_portal"] != "192.0.2.5:3260" || p["auth_password"] != "******" {
				t.Errorf("%s sees properties %v", persona, p)
			}
		}
		mustStatus(t, clients["owner-member"].Do(t, "PATCH", "/v1/volume/targets/"+vt, []map[string]any{{"op": "add", "path": "/properties/x", "value": 1}}), 403)
		mustFault(t, admin.Do(t, "PATCH", "/v1/volume/targets/"+vt, []map[string]any{{"op": "copy", "from": "/properties/auth_password", "path": "/extra/leak"}}), 400, "secret")
	})
}
