package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func mkNode(t *testing.T, c *servertest.Client, name string, extra ...string) string {
	t.Helper()
	body := map[string]any{"name": name, "driver": "fake"}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = extra[i+1]
	}
	r := c.Do(t, "POST", "/v1/nodes", body)
	mustStatus(t, r, 201)
	return r.JSON(t)["uuid"].(string)
}

func mkPort(t *testing.T, c *servertest.Client, node, mac string, extra ...any) map[string]any {
	t.Helper()
	body := map[string]any{"node_uuid": node, "address": mac}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	r := c.Do(t, "POST", "/v1/ports", body)
	mustStatus(t, r, 201)
	return r.JSON(t)
}

// flatVIFs makes every node's network interface flat, so VIFs are
// recorded on ports whatever the server's wiring picks by default.
func flatVIFs(srv *servertest.Server) {
	srv.Ports.NetworkInterface = func(*ent.Node) string { return "flat" }
}

func listOf(t *testing.T, c *servertest.Client, path, key, field string) []string {
	t.Helper()
	r := c.Do(t, "GET", path, nil)
	mustStatus(t, r, 200)
	var out []string
	for _, x := range r.JSON(t)[key].([]any) {
		out = append(out, fmt.Sprint(x.(map[string]any)[field]))
	}
	return out
}

// TestPortsCRUD: create, show, list with every filter, patch and delete
// ports, with Ironic's field set for the version and its error wording.
func TestPortsCRUD(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		n1 := mkNode(t, c, "p-n1")
		n2 := mkNode(t, c, "p-n2")
		p := mkPort(t, c, n1, "52:54:00:AA:BB:01", "extra", map[string]any{"k": "v"},
			"local_link_connection", map[string]any{"port_id": "Gig0/1", "switch_id": "0A:1B:2C:3D:4E:5F"})
		if p["address"] != "52:54:00:aa:bb:01" || p["node_uuid"] != n1 || p["pxe_enabled"] != true || p["portgroup_uuid"] != nil {
			t.Fatalf("created port %v", p)
		}
		if llc := p["local_link_connection"].(map[string]any); llc["switch_id"] != "0a:1b:2c:3d:4e:5f" {
			t.Errorf("switch_id not normalised: %v", llc)
		}
		id := p["uuid"].(string)
		// At 1.78 the newer fields are neither shown nor accepted, and the
		// shard filter (1.82) is refused.
		at78 := *c
		at78.Version = "1.78"
		p78 := at78.Do(t, "GET", "/v1/ports/"+id, nil).JSON(t)
		for _, f := range []string{"name", "description", "vendor", "category"} {
			if _, ok := p78[f]; ok {
				t.Errorf("field %s newer than 1.78 shown", f)
			}
		}
		if r := at78.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "name": "eth0"}); r.Status != 406 || !strings.Contains(r.Fault(t), "name requires API version 1.88") {
			t.Errorf("name at 1.78: %d %q", r.Status, r.Fault(t))
		}
		if r := at78.Do(t, "GET", "/v1/ports?shard=s1", nil); r.Status != 406 || !strings.Contains(r.Fault(t), "requires API version 1.82") {
			t.Errorf("shard at 1.78: %d %q", r.Status, r.Fault(t))
		}
		mkPort(t, c, n1, "52:54:00:aa:bb:02", "pxe_enabled", false)
		mkPort(t, c, n2, "52:54:00:aa:bb:03")

		// Version gating: internal_info appeared in 1.18, pxe_enabled in 1.19.
		old := *c
		old.Version = "1.17"
		got := old.Do(t, "GET", "/v1/ports/"+id, nil).JSON(t)
		if _, ok := got["internal_info"]; ok {
			t.Errorf("internal_info at 1.17: %v", got)
		}
		mustStatus(t, old.Do(t, "GET", "/v1/ports?fields=pxe_enabled", nil), 406)

		if got := listOf(t, c, "/v1/ports?sort_key=address", "ports", "address"); strings.Join(got, ",") != "52:54:00:aa:bb:01,52:54:00:aa:bb:02,52:54:00:aa:bb:03" {
			t.Errorf("list: %v", got)
		}
		short := c.Do(t, "GET", "/v1/ports", nil).JSON(t)["ports"].([]any)[0].(map[string]any)
		if len(short) != 3 || short["links"] == nil {
			t.Errorf("short list item %v, want uuid, address, links", short)
		}
		for q, want := range map[string]string{
			"/v1/ports?node=p-n1&sort_key=address":                          "52:54:00:aa:bb:01,52:54:00:aa:bb:02",
			"/v1/ports?node_uuid=" + n2:                                     "52:54:00:aa:bb:03",
			"/v1/ports?address=52:54:00:AA:BB:02":                           "52:54:00:aa:bb:02",
			"/v1/ports?node=p-n1&address=52:54:00:aa:bb:03":                 "",
			"/v1/nodes/p-n1/ports?sort_key=address&sort_dir=desc":           "52:54:00:aa:bb:02,52:54:00:aa:bb:01",
			"/v1/ports/detail?sort_key=pxe_enabled&node=p-n1":               "52:54:00:aa:bb:02,52:54:00:aa:bb:01",
			"/v1/ports?fields=address,pxe_enabled&sort_key=address&limit=1": "52:54:00:aa:bb:01",
		} {
			if got := listOf(t, c, q, "ports", "address"); strings.Join(got, ",") != want {
				t.Errorf("%s: %v, want %s", q, got, want)
			}
		}
		// Paging follows next links to the end without repeats.
		var seen []string
		next := "/v1/ports?limit=1&sort_key=address&sort_dir=desc"
		for next != "" && len(seen) < 10 {
			r := c.Do(t, "GET", next, nil)
			mustStatus(t, r, 200)
			m := r.JSON(t)
			for _, x := range m["ports"].([]any) {
				seen = append(seen, x.(map[string]any)["address"].(string))
			}
			next, _ = m["next"].(string)
			next = strings.TrimPrefix(next, c.Base)
		}
		if strings.Join(seen, ",") != "52:54:00:aa:bb:03,52:54:00:aa:bb:02,52:54:00:aa:bb:01" {
			t.Errorf("paged: %v", seen)
		}

		// Bad input is a 400 naming the field, in Ironic's words.
		for _, tc := range []struct {
			method, path string
			body         any
			status       int
			fault        string
		}{
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "not-a-mac"}, 400, "Expected a MAC address but received not-a-mac."},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:01"}, 409, "A port with MAC address 52:54:00:aa:bb:01 already exists."},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1}, 400, "address is required"},
			{"POST", "/v1/ports", map[string]any{"address": "52:54:00:aa:bb:09"}, 400, "node_uuid is required"},
			{"POST", "/v1/ports", map[string]any{"node_uuid": "7d1b0ae4-7d4d-4b0e-a8f0-000000000000", "address": "52:54:00:aa:bb:09"}, 400, "Node 7d1b0ae4-7d4d-4b0e-a8f0-000000000000 could not be found."},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "bogus": 1}, 400, `unknown attribute "bogus"`},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "physical_network": ""}, 400, "A non-empty value is required when setting physical_network"},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "local_link_connection": map[string]any{"port_id": "x"}}, 400, "local_link_connection needs port_id"},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "local_link_connection": map[string]any{"port_id": "x", "switch_id": "zz"}}, 400, "Expected a MAC address or OpenFlow datapath ID but received zz."},
			{"POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:aa:bb:09", "pxe_enabled": "maybe"}, 400, "pxe_enabled must be a boolean"},
			{"GET", "/v1/ports?foo=1", nil, 400, "Unexpected arguments: foo"},
			{"GET", "/v1/nodes/p-n1/ports?node=x", nil, 400, "Unexpected arguments: node"},
			{"GET", "/v1/ports?address=zz", nil, 400, "Expected a MAC address but received zz."},
			{"GET", "/v1/ports?sort_key=extra", nil, 400, "The sort_key value extra is an invalid field for sorting"},
			{"GET", "/v1/ports?sort_dir=up", nil, 400, "Invalid sort direction: up"},
			{"GET", "/v1/ports?fields=bogus", nil, 400, `Field(s) "bogus" are not valid`},
			{"GET", "/v1/ports?node=nope", nil, 404, "Node nope could not be found."},
			{"GET", "/v1/ports?marker=nope", nil, 400, "marker nope does not name a port"},
			{"GET", "/v1/ports/7d1b0ae4-7d4d-4b0e-a8f0-000000000000", nil, 404, "Port 7d1b0ae4-7d4d-4b0e-a8f0-000000000000 could not be found."},
			{"PATCH", "/v1/ports/" + id, []map[string]any{{"op": "replace", "path": "/internal_info", "value": map[string]any{}}}, 400, "Cannot patch /internal_info"},
			{"PATCH", "/v1/ports/" + id, []map[string]any{{"op": "replace", "path": "/address", "value": "52:54:00:aa:bb:03"}}, 409, "A port with MAC address 52:54:00:aa:bb:03 already exists."},
			{"PATCH", "/v1/ports/" + id, []map[string]any{{"op": "replace", "path": "/pxe_enabled", "value": "maybe"}}, 400, "pxe_enabled must be true or false"},
			{"PATCH", "/v1/ports/" + id, []map[string]any{{"op": "replace", "path": "/node_uuid", "value": "7d1b0ae4-7d4d-4b0e-a8f0-000000000000"}}, 400, "Unable to apply the requested node_uuid '7d1b0ae4-7d4d-4b0e-a8f0-000000000000'. Requested value was invalid."},
			{"PATCH", "/v1/ports/" + id, `[{"op":"replace"`, 400, ""},
		} {
			r := c.Do(t, tc.method, tc.path, tc.body)
			if r.Status != tc.status || !strings.Contains(r.Fault(t), tc.fault) {
				t.Errorf("%s %s %v: %d %q, want %d %q", tc.method, tc.path, tc.body, r.Status, r.Fault(t), tc.status, tc.fault)
			}
		}

		r := c.Do(t, "PATCH", "/v1/ports/"+id, []map[string]any{
			{"op": "replace", "path": "/address", "value": "52:54:00:AA:BB:11"},
			{"op": "add", "path": "/extra/rack", "value": "r7"},
			{"op": "replace", "path": "/physical_network", "value": "physnet1"},
			{"op": "replace", "path": "/node_uuid", "value": n2},
		})
		mustStatus(t, r, 200)
		got = r.JSON(t)
		if got["address"] != "52:54:00:aa:bb:11" || got["node_uuid"] != n2 || got["physical_network"] != "physnet1" || got["extra"].(map[string]any)["rack"] != "r7" {
			t.Errorf("patched: %v", got)
		}
		// A port is named by UUID or name, as Ironic validates the path:
		// a MAC address or a malformed id is a 400, not a 404, and a
		// delete takes a UUID only.
		for _, bad := range []string{"52:54:00:aa:bb:11", "malformed:uuid"} {
			mustFault(t, c.Do(t, "GET", "/v1/ports/"+bad, nil), 400, "Expected UUID or name for port_ident: "+bad)
			mustFault(t, c.Do(t, "PATCH", "/v1/ports/"+bad, []map[string]any{{"op": "add", "path": "/extra/x", "value": "y"}}), 400, "port_ident")
			mustFault(t, c.Do(t, "DELETE", "/v1/ports/"+bad, nil), 400, "Expected UUID for port_uuid: "+bad)
		}
		mustFault(t, c.Do(t, "DELETE", "/v1/ports/no-such-name", nil), 400, "Expected UUID for port_uuid")
		mustStatus(t, c.Do(t, "GET", "/v1/ports/no-such-name", nil), 404)
		mustStatus(t, c.Do(t, "DELETE", "/v1/ports/"+id, nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/ports/"+id, nil), 404)

		// Deleting a node takes its ports and portgroups with it.
		mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n2, "name": "bond0"}), 201)
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+n2, nil), 204)
		if got := listOf(t, c, "/v1/ports", "ports", "address"); strings.Join(got, ",") != "52:54:00:aa:bb:02" {
			t.Errorf("after node delete: %v", got)
		}
		if got := listOf(t, c, "/v1/portgroups", "portgroups", "name"); len(got) != 0 {
			t.Errorf("portgroups after node delete: %v", got)
		}
	})
}

// TestPortgroupsAndVIFs: portgroups with member ports, and VIFs attached
// as Ironic's flat interface attaches them: portgroups first, then PXE
// ports, duplicates refused, none free refused, detach clears.
func TestPortgroupsAndVIFs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		flatVIFs(srv)
		n := mkNode(t, c, "v-n1")
		r := c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n, "name": "bond0", "address": "52:54:00:CC:00:01", "mode": "802.3ad", "properties": map[string]any{"miimon": "100"}})
		mustStatus(t, r, 201)
		pg := r.JSON(t)
		if pg["mode"] != "802.3ad" || pg["standalone_ports_supported"] != true || pg["address"] != "52:54:00:cc:00:01" || pg["ports"] == nil {
			t.Fatalf("portgroup %v", pg)
		}
		pgID := pg["uuid"].(string)
		mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n, "name": "bond1"}), 201)
		r = c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n, "name": "bond0"})
		if r.Status != 409 || r.Fault(t) != "A portgroup with name bond0 already exists." {
			t.Errorf("duplicate name: %d %s", r.Status, r.Fault(t))
		}
		mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n, "name": "bad name"}), 400)
		old := *c
		old.Version = "1.22"
		mustStatus(t, old.Do(t, "GET", "/v1/portgroups", nil), 404)

		m1 := mkPort(t, c, n, "52:54:00:cc:00:11", "portgroup_uuid", "bond0")
		mkPort(t, c, n, "52:54:00:cc:00:12", "portgroup_uuid", pgID, "pxe_enabled", false)
		mkPort(t, c, n, "52:54:00:cc:00:13", "pxe_enabled", false)
		mkPort(t, c, n, "52:54:00:cc:00:14")
		if m1["portgroup_uuid"] != pgID {
			t.Errorf("member port %v", m1)
		}
		if got := listOf(t, c, "/v1/portgroups/bond0/ports?sort_key=address", "ports", "address"); strings.Join(got, ",") != "52:54:00:cc:00:11,52:54:00:cc:00:12" {
			t.Errorf("portgroup's ports %v", got)
		}
		if got := listOf(t, c, "/v1/ports?portgroup="+pgID+"&sort_key=address", "ports", "address"); len(got) != 2 {
			t.Errorf("?portgroup= %v", got)
		}
		if got := listOf(t, c, "/v1/nodes/v-n1/portgroups?sort_key=name", "portgroups", "name"); strings.Join(got, ",") != "bond0,bond1" {
			t.Errorf("node's portgroups %v", got)
		}
		if got := listOf(t, c, "/v1/portgroups?address=52:54:00:cc:00:01", "portgroups", "name"); strings.Join(got, ",") != "bond0" {
			t.Errorf("?address= %v", got)
		}
		r = c.Do(t, "DELETE", "/v1/portgroups/bond0", nil)
		if r.Status != 400 || !strings.Contains(r.Fault(t), "contains ports") {
			t.Errorf("delete non-empty portgroup: %d %s", r.Status, r.Body)
		}
		r = c.Do(t, "PATCH", "/v1/portgroups/bond1", []map[string]any{{"op": "remove", "path": "/mode"}})
		if r.Status != 400 || r.Fault(t) != "'mode' is a mandatory attribute and can not be removed" {
			t.Errorf("remove mode: %d %s", r.Status, r.Body)
		}
		r = c.Do(t, "PATCH", "/v1/portgroups/bond1", []map[string]any{{"op": "replace", "path": "/standalone_ports_supported", "value": false}, {"op": "add", "path": "/extra/a", "value": 1}})
		mustStatus(t, r, 200)
		if g := r.JSON(t); g["standalone_ports_supported"] != false {
			t.Errorf("patched portgroup %v", g)
		}
		r = c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": n, "address": "52:54:00:cc:00:19", "portgroup_uuid": "bond1"})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "doesn't support standalone ports") {
			t.Errorf("pxe port in a no-standalone portgroup: %d %s", r.Status, r.Body)
		}

		// VIFs: the portgroup with members first, then the PXE port, then
		// the other one; the empty bond1 never.
		for _, vif := range []string{"vif-a", "vif-b", "vif-c"} {
			mustStatus(t, c.Do(t, "POST", "/v1/nodes/v-n1/vifs", map[string]any{"id": vif}), 204)
		}
		if got := listOf(t, c, "/v1/nodes/v-n1/vifs", "vifs", "id"); strings.Join(got, ",") != "vif-c,vif-b,vif-a" {
			t.Errorf("vifs (ports in id order, then portgroups) %v", got)
		}
		g := c.Do(t, "GET", "/v1/portgroups/bond0", nil).JSON(t)
		if g["internal_info"].(map[string]any)["tenant_vif_port_id"] != "vif-a" {
			t.Errorf("vif-a not on the portgroup: %v", g["internal_info"])
		}
		p14 := listOf(t, c, "/v1/ports?address=52:54:00:cc:00:14&fields=internal_info", "ports", "internal_info")
		if !strings.Contains(p14[0], "vif-b") {
			t.Errorf("vif-b not on the PXE port: %v", p14)
		}
		r = c.Do(t, "POST", "/v1/nodes/v-n1/vifs", map[string]any{"id": "vif-a"})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "VIF vif-a is already attached to Ironic Portgroup "+pgID) {
			t.Errorf("duplicate vif: %d %s", r.Status, r.Body)
		}
		r = c.Do(t, "POST", "/v1/nodes/v-n1/vifs", map[string]any{"id": "vif-d"})
		if r.Status != 400 || r.Fault(t) != "Unable to attach VIF vif-d, not enough free physical ports." {
			t.Errorf("no free port: %d %s", r.Status, r.Body)
		}
		mustStatus(t, c.Do(t, "POST", "/v1/nodes/v-n1/vifs", map[string]any{"id": "vif-e", "port_uuid": "x", "portgroup_uuid": "y"}), 400)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes/v-n1/vifs", map[string]any{"name": "no id"}), 400)
		// A port bound to a VIF stays while the node is not in maintenance.
		p13 := listOf(t, c, "/v1/ports?address=52:54:00:cc:00:13", "ports", "uuid")[0]
		r = c.Do(t, "DELETE", "/v1/ports/"+p13, nil)
		if r.Status != 409 || !strings.Contains(r.Fault(t), "bound to VIF vif-c") {
			t.Errorf("delete bound port: %d %s", r.Status, r.Body)
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/v-n1/vifs/vif-c", nil), 204)
		r = c.Do(t, "DELETE", "/v1/nodes/v-n1/vifs/vif-c", nil)
		if r.Status != 400 || !strings.Contains(r.Fault(t), "Unable to detach VIF vif-c from node") {
			t.Errorf("detach twice: %d %s", r.Status, r.Body)
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/ports/"+p13, nil), 204)
		old.Version = "1.27"
		mustStatus(t, old.Do(t, "GET", "/v1/nodes/v-n1/vifs", nil), 404)
		if got := listOf(t, c, "/v1/nodes/v-n1/vifs", "vifs", "id"); strings.Join(got, ",") != "vif-b,vif-a" {
			t.Errorf("vifs after detach %v", got)
		}
	})
}

// TestPortsHidden: a project never learns of another project's ports,
// through the port, its node, a filter, a marker or a POST: its POST on
// another project's node is the 403 it gets for a missing one.
func TestPortsHidden(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mine := mkNode(t, admin, "h-mine", "owner", "own")
		theirs := mkNode(t, admin, "h-theirs", "owner", "oth")
		mp := mkPort(t, admin, mine, "52:54:00:dd:00:01")["uuid"].(string)
		tp := mkPort(t, admin, theirs, "52:54:00:dd:00:02")["uuid"].(string)
		r := admin.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": theirs, "name": "their-bond"})
		mustStatus(t, r, 201)
		tg := r.JSON(t)["uuid"].(string)
		own := clients["owner-admin"]

		if got := listOf(t, own, "/v1/ports", "ports", "uuid"); strings.Join(got, ",") != mp {
			t.Errorf("owner lists %v", got)
		}
		if got := listOf(t, own, "/v1/ports?address=52:54:00:dd:00:02", "ports", "uuid"); len(got) != 0 {
			t.Errorf("address filter shows another project's port: %v", got)
		}
		for _, tc := range []struct{ method, path string }{
			{"GET", "/v1/ports/" + tp}, {"PATCH", "/v1/ports/" + tp}, {"DELETE", "/v1/ports/" + tp},
			{"GET", "/v1/nodes/h-theirs/ports"}, {"GET", "/v1/ports?node=" + theirs},
			{"GET", "/v1/portgroups/" + tg}, {"GET", "/v1/portgroups/" + tg + "/ports"},
			{"GET", "/v1/nodes/h-theirs/vifs"}, {"POST", "/v1/nodes/h-theirs/vifs"},
		} {
			var body any
			if tc.method == "PATCH" {
				body = []map[string]any{{"op": "add", "path": "/extra/x", "value": 1}}
			} else if tc.method == "POST" {
				body = map[string]any{"id": "v"}
			}
			if r := own.Do(t, tc.method, tc.path, body); r.Status != 404 {
				t.Errorf("%s %s as another project: %d %s", tc.method, tc.path, r.Status, r.Body)
			}
		}
		// A POST checks the create rule on the node it names before saying
		// it is missing, as Ironic's does: to a project caller a hidden node
		// and a missing one are the same 403; to the system a missing node
		// is a 400.
		const nowhere = "7d1b0ae4-7d4d-4b0e-a8f0-000000000000"
		for _, path := range []string{"/v1/ports", "/v1/portgroups"} {
			hidden := own.Do(t, "POST", path, map[string]any{"node_uuid": theirs, "address": "52:54:00:dd:00:09"})
			missing := own.Do(t, "POST", path, map[string]any{"node_uuid": nowhere, "address": "52:54:00:dd:00:09"})
			if hidden.Status != 403 || missing.Status != 403 || string(hidden.Body) != string(missing.Body) {
				t.Errorf("%s: hidden node %d %s; missing %d %s", path, hidden.Status, hidden.Body, missing.Status, missing.Body)
			}
			if r := admin.Do(t, "POST", path, map[string]any{"node_uuid": nowhere, "address": "52:54:00:dd:00:09"}); r.Status != 400 || !strings.Contains(r.Fault(t), "could not be found") {
				t.Errorf("%s: a missing node from the system: %d %s", path, r.Status, r.Body)
			}
		}
		// Joining another project's portgroup, or moving a port to another
		// project's node, is refused with the words used for a missing one.
		r = own.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": mine, "address": "52:54:00:dd:00:09", "portgroup_uuid": tg})
		if r.Status != 400 || r.Fault(t) != "Portgroup "+tg+" could not be found." {
			t.Errorf("foreign portgroup: %d %s", r.Status, r.Body)
		}
		r = own.Do(t, "PATCH", "/v1/ports/"+mp, []map[string]any{{"op": "replace", "path": "/node_uuid", "value": theirs}})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "Requested value was invalid.") {
			t.Errorf("move to a foreign node: %d %s", r.Status, r.Body)
		}
		// The MAC is unique everywhere, as in Ironic; the conflict names
		// the address only, never the port or node holding it.
		r = own.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": mine, "address": "52:54:00:dd:00:02"})
		if r.Status != 409 || r.Fault(t) != "A port with MAC address 52:54:00:dd:00:02 already exists." || strings.Contains(string(r.Body), tp) {
			t.Errorf("MAC conflict: %d %s", r.Status, r.Body)
		}
		// The refusals and mutations are in the audit log.
		r = clients["system-reader"].Do(t, "GET", "/v1/events?rule=baremetal:port:create", nil)
		mustStatus(t, r, 200)
		if n := len(r.JSON(t)["events"].([]any)); n < 3 {
			t.Errorf("%d audit events for port creation", n)
		}
	})
}

// TestEnsurePort: the call inspection makes for each NIC it finds creates
// the port once, keeps it on a second call, and refuses a MAC another
// node has.
func TestEnsurePort(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		n1 := mkNode(t, c, "e-n1")
		n2 := mkNode(t, c, "e-n2")
		ctx := context.Background()
		p, created, err := srv.Ports.EnsurePort(ctx, n1, "52:54:00:EE:00:01")
		if err != nil || !created || p.Address != "52:54:00:ee:00:01" || p.PxeEnabled {
			t.Fatalf("first: %v %v %v", p, created, err)
		}
		// Inspection calls it under the conductor's reservation.
		if err := srv.DB.Node.Update().Where(node.UUID(n1)).SetReservation("cond-1").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		again, created, err := srv.Ports.EnsurePort(ctx, n1, "52:54:00:ee:00:01")
		if err != nil || created || again.UUID != p.UUID {
			t.Fatalf("second: %v %v %v", again, created, err)
		}
		if _, _, err := srv.Ports.EnsurePort(ctx, n2, "52:54:00:ee:00:01"); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Errorf("MAC of another node: %v", err)
		}
		if _, _, err := srv.Ports.EnsurePort(ctx, n2, "bogus"); err == nil {
			t.Error("bogus MAC accepted")
		}
		if p2, created, err := srv.Ports.EnsurePort(ctx, n1, "52:54:00:ee:00:02"); err != nil || !created || p2.NodeID != p.NodeID {
			t.Errorf("second NIC under the reservation: %v %v %v", p2, created, err)
		}
		// API callers meet the reservation as Ironic's locked node.
		r := c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": n1, "address": "52:54:00:ee:00:03"})
		if r.Status != 409 || !strings.Contains(r.Fault(t), "is locked by host cond-1") {
			t.Errorf("port on a held node: %d %s", r.Status, r.Body)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(n1)).ClearReservation().Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if got := listOf(t, c, "/v1/nodes/e-n1/ports", "ports", "address"); strings.Join(got, ",") != "52:54:00:ee:00:01,52:54:00:ee:00:02" {
			t.Errorf("ports of e-n1: %v", got)
		}
		if got := listOf(t, c, "/v1/nodes/e-n2/ports", "ports", "address"); len(got) != 0 {
			t.Errorf("ports of e-n2: %v", got)
		}
	})
}

// TestNoopVIFs: on a node whose network interface is noop, VIF calls
// succeed and record nothing, as Ironic's noop interface.
func TestNoopVIFs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		srv.Ports.NetworkInterface = func(n *ent.Node) string {
			if n.Name != nil && *n.Name == "noop-n" {
				return "noop"
			}
			return "flat"
		}
		n := mkNode(t, c, "noop-n")
		mkPort(t, c, n, "52:54:00:ff:00:01")
		mustStatus(t, c.Do(t, "POST", "/v1/nodes/noop-n/vifs", map[string]any{"id": "200712fc-fdfb-47da-89a6-2d19f76c7618"}), 204)
		if got := listOf(t, c, "/v1/nodes/noop-n/vifs", "vifs", "id"); len(got) != 0 {
			t.Errorf("noop lists %v", got)
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/noop-n/vifs/200712fc-fdfb-47da-89a6-2d19f76c7618", nil), 204)
		mkNode(t, c, "flat-n")
		r := c.Do(t, "POST", "/v1/nodes/flat-n/vifs", map[string]any{"id": "v1"})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "not enough free physical ports") {
			t.Errorf("flat node without ports: %d %s", r.Status, r.Body)
		}
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/7d1b0ae4-7d4d-4b0e-a8f0-000000000000/vifs", nil), 404)
	})
}

// TestPortsUnknownQuery walks every port and portgroup list with a
// parameter it does not define: each answers 400 naming it.
func TestPortsUnknownQuery(t *testing.T) {
	_, c := start(t, storetest.Setting(t, "sqlite"))
	n := mkNode(t, c, "uq")
	p := mkPort(t, c, n, "52:54:00:10:00:01")["uuid"].(string)
	mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": n, "name": "uqb"}), 201)
	for _, path := range []string{
		"/v1/ports", "/v1/ports/detail", "/v1/ports/" + p, "/v1/nodes/uq/ports", "/v1/nodes/uq/ports/detail",
		"/v1/portgroups", "/v1/portgroups/detail", "/v1/portgroups/uqb", "/v1/portgroups/uqb/ports",
		"/v1/portgroups/uqb/ports/detail", "/v1/nodes/uq/portgroups", "/v1/nodes/uq/portgroups/detail",
		"/v1/nodes/uq/vifs",
	} {
		r := c.Do(t, "GET", path+"?zzz=1&foo=bar", nil)
		if r.Status != 400 || !strings.Contains(r.Fault(t), "Unexpected arguments: foo, zzz") {
			t.Errorf("GET %s?foo=bar: %d %s", path, r.Status, r.Body)
		}
	}
}

// TestConcurrentVIFAttach: attaches race for two free ports; the node's
// row serialises them, so exactly two win and no port gets two VIFs.
func TestConcurrentVIFAttach(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		flatVIFs(srv)
		n := mkNode(t, c, "race")
		mkPort(t, c, n, "52:54:00:20:00:01")
		mkPort(t, c, n, "52:54:00:20:00:02")
		statuses := make(chan int, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses <- c.Do(t, "POST", "/v1/nodes/race/vifs", map[string]any{"id": fmt.Sprintf("vif-%d", i)}).Status
			}()
		}
		wg.Wait()
		close(statuses)
		count := map[int]int{}
		for s := range statuses {
			count[s]++
		}
		if count[204] != 2 || count[400] != 6 {
			t.Errorf("statuses %v, want two 204 and six 400", count)
		}
		if got := listOf(t, c, "/v1/nodes/race/vifs", "vifs", "id"); len(got) != 2 || got[0] == got[1] {
			t.Errorf("vifs %v", got)
		}
	})
}
