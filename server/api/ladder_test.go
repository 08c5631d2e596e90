package api_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// below is the version just under v, for asserting Ironic's refusal.
func below(v api.Version) string { return (v - 1).String() }

// TestShards: from 1.82 /v1/shards counts nodes by shard, most first,
// nodes without a shard under "None" as Ironic's str(None); only system
// readers may read it; below 1.82 it is not there.
func TestShards(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs := startLocal(t, setting)
		admin := cs["system-admin"]
		for i, s := range []string{"a", "b", "b", ""} {
			body := map[string]any{"name": fmt.Sprint("s", i), "driver": "fake-hardware"}
			if s != "" {
				body["shard"] = s
			}
			mustStatus(t, admin.Do(t, "POST", "/v1/nodes", body), 201)
		}
		r := admin.Do(t, "GET", "/v1/shards?anything=1", nil)
		mustStatus(t, r, 200)
		got := fmt.Sprint(r.JSON(t)["shards"])
		if want := "[map[count:2 name:b] map[count:1 name:None] map[count:1 name:a]]"; got != want {
			t.Errorf("shards %s, want %s", got, want)
		}
		mustStatus(t, at(admin, below(api.VerShard)).Do(t, "GET", "/v1/shards", nil), 404)
		mustStatus(t, admin.Do(t, "GET", "/v1/shards/b", nil), 404)
		mustStatus(t, cs["system-reader"].Do(t, "GET", "/v1/shards", nil), 200)
		for _, p := range []string{"owner-admin", "other-reader"} {
			mustStatus(t, cs[p].Do(t, "GET", "/v1/shards", nil), 403)
		}
		// The node filters of 1.82.
		names := func(q string) []string {
			var out []string
			for _, n := range admin.Do(t, "GET", "/v1/nodes?sort_key=name&"+q, nil).JSON(t)["nodes"].([]any) {
				out = append(out, n.(map[string]any)["name"].(string))
			}
			return out
		}
		if got := names("shard=b,a"); !slices.Equal(got, []string{"s0", "s1", "s2"}) {
			t.Errorf("shard=b,a: %v", got)
		}
		if got := names("sharded=false"); !slices.Equal(got, []string{"s3"}) {
			t.Errorf("sharded=false: %v", got)
		}
		wantFault(t, at(admin, below(api.VerShard)).Do(t, "GET", "/v1/nodes?shard=a", nil), 406)
	})
}

// TestChildren: from 1.83 /v1/nodes/{node}/children lists the UUIDs of
// the node's children the caller may list, with a link to the filtered
// node list; node lists leave children out unless asked; below 1.83 the
// sub-resource is not there.
func TestChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs := startLocal(t, setting)
		admin := cs["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "p", "driver": "fake-hardware", "owner": "own"})
		mustStatus(t, r, 201)
		parent := r.JSON(t)["uuid"].(string)
		var kids []string
		for _, k := range []struct{ name, owner string }{{"k1", "own"}, {"k2", "oth"}} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": k.name, "driver": "fake-hardware", "parent_node": "p", "owner": k.owner})
			mustStatus(t, r, 201)
			kids = append(kids, r.JSON(t)["uuid"].(string))
		}
		children := func(c *servertest.Client) []any {
			r := c.Do(t, "GET", "/v1/nodes/p/children", nil)
			mustStatus(t, r, 200)
			return r.JSON(t)["children"].([]any)
		}
		if got := fmt.Sprint(children(admin)); got != fmt.Sprint(kids) {
			t.Errorf("children %s, want %v", got, kids)
		}
		l := admin.Do(t, "GET", "/v1/nodes/"+parent+"/children", nil).JSON(t)["links"].(map[string]any)
		if l["rel"] != "children" || l["href"] != admin.Base+"/v1/nodes?parent_node="+parent {
			t.Errorf("links %v", l)
		}
		if got := fmt.Sprint(children(cs["owner-reader"])); got != fmt.Sprint(kids[:1]) {
			t.Errorf("owner sees children %s, want %v", got, kids[:1])
		}
		mustStatus(t, cs["other-reader"].Do(t, "GET", "/v1/nodes/p/children", nil), 404)
		mustStatus(t, at(admin, below(api.VerParentNode)).Do(t, "GET", "/v1/nodes/p/children", nil), 404)
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/p/children?x=1", nil), 400)
		// Lists hide children unless include_children or parent_node, which
		// is matched against the UUID as stored, as Ironic does.
		count := func(q string) int { return len(admin.Do(t, "GET", "/v1/nodes?"+q, nil).JSON(t)["nodes"].([]any)) }
		if a, b, c := count(""), count("include_children=true"), count("parent_node="+parent); a != 1 || b != 3 || c != 2 {
			t.Errorf("nodes %d, with children %d, of p %d; want 1, 3, 2", a, b, c)
		}
	})
}

// TestDotJSONSuffix: below 1.91, asked for explicitly, a trailing ".json"
// is stripped from the path, and a name really ending in ".json" is still
// found; from 1.91, or with no version header, the path is taken as is.
func TestDotJSONSuffix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "n1", "driver": "fake-hardware"}), 201)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "n2.json", "driver": "fake-hardware"}), 201)
		old := at(c, below(api.VerDotJSON))
		if r := old.Do(t, "GET", "/v1/nodes/n1.json", nil); r.Status != 200 || r.JSON(t)["name"] != "n1" {
			t.Errorf("n1.json below 1.91: %d %s", r.Status, r.Body)
		}
		if r := old.Do(t, "GET", "/v1/nodes/n2.json", nil); r.Status != 200 || r.JSON(t)["name"] != "n2.json" {
			t.Errorf("n2.json below 1.91: %d %s", r.Status, r.Body)
		}
		mustStatus(t, old.Do(t, "GET", "/v1/nodes.json", nil), 200)
		mustStatus(t, old.Do(t, "PATCH", "/v1/nodes/n1.json", `[{"op":"add","path":"/extra/a","value":"b"}]`), 200)
		mustStatus(t, at(c, "").Do(t, "GET", "/v1/nodes/n1.json", nil), 404)
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/n1.json", nil), 404)
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/n2.json", nil), 200)
	})
}

// TestPortNodeIdentAndVTEP: from 1.94 a port is created with node_ident,
// a UUID or name, but not beside node_uuid; below it node_ident is 406.
// The OVN VTEP keys of local_link_connection are accepted from 1.90 to
// 1.104 and otherwise refused with 406 and shown as an empty object.
func TestPortNodeIdentAndVTEP(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "pn", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		uuid := r.JSON(t)["uuid"].(string)
		wantFault(t, at(c, below(api.VerPortNodeIdent)).Do(t, "POST", "/v1/ports",
			map[string]any{"node_ident": "pn", "address": "52:54:00:00:00:01"}), 406, "node_ident")
		vtep := map[string]any{"port_id": "p1", "vtep-logical-switch": "ls", "vtep-physical-switch": "ps"}
		wantFault(t, at(c, below(api.VerOVNVTEP)).Do(t, "POST", "/v1/ports",
			map[string]any{"node_uuid": uuid, "address": "52:54:00:00:00:02", "local_link_connection": vtep}), 406, "vtep-")
		r = c.Do(t, "POST", "/v1/ports", map[string]any{"node_ident": "pn", "address": "52:54:00:00:00:01"})
		mustStatus(t, r, 201)
		if got := r.JSON(t)["node_uuid"]; got != uuid {
			t.Errorf("node_ident pn made a port of %v", got)
		}
		wantFault(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_ident": "pn", "node_uuid": uuid, "address": "52:54:00:00:00:03"}), 400, "node_ident")
		mid := at(c, api.VerOVNVTEP.String())
		r = mid.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": uuid, "address": "52:54:00:00:00:02", "local_link_connection": vtep})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		if got := fmt.Sprint(mid.Do(t, "GET", "/v1/ports/"+id, nil).JSON(t)["local_link_connection"]); got != fmt.Sprint(vtep) {
			t.Errorf("at 1.90 local_link_connection %s", got)
		}
		wantFault(t, mid.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": uuid, "address": "52:54:00:00:00:04",
			"local_link_connection": map[string]any{"port_id": "p1", "vtep-logical-switch": "ls"}}), 400, "vtep-physical-switch")
		for _, v := range []string{below(api.VerOVNVTEP), api.VerNoOVNVTEP.String()} {
			if got := at(c, v).Do(t, "GET", "/v1/ports/"+id+"?fields=local_link_connection", nil).JSON(t)["local_link_connection"]; fmt.Sprint(got) != "map[]" {
				t.Errorf("at %s local_link_connection %v", v, got)
			}
		}
		wantFault(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": uuid, "address": "52:54:00:00:00:05", "local_link_connection": vtep}), 406, "vtep-")
	})
}

// TestShardFilterOnPortsAndPortgroups: ?shard= keeps the ports (1.82) and
// portgroups (1.106) of nodes in those shards, refused with 406 below its
// version and with 400 beside a parent node.
func TestShardFilterOnPortsAndPortgroups(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		wantFault(t, at(c, below(api.VerPortgroupShard)).Do(t, "GET", "/v1/portgroups?shard=a", nil), 406, "shard")
		for i, sh := range []string{"a", "b"} {
			r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sn" + sh, "driver": "fake-hardware", "shard": sh})
			mustStatus(t, r, 201)
			uuid := r.JSON(t)["uuid"].(string)
			mustStatus(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": uuid, "address": fmt.Sprintf("52:54:00:00:01:0%d", i)}), 201)
			mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": uuid, "address": fmt.Sprintf("52:54:00:00:02:0%d", i), "name": "pg" + sh}), 201)
		}
		count := func(path string) int {
			r := c.Do(t, "GET", path, nil)
			mustStatus(t, r, 200)
			for _, v := range r.JSON(t) {
				if l, ok := v.([]any); ok {
					return len(l)
				}
			}
			return -1
		}
		if a, ab, none := count("/v1/ports?shard=a"), count("/v1/ports?shard=a,b"), count("/v1/ports?shard=z"); a != 1 || ab != 2 || none != 0 {
			t.Errorf("ports in a %d, a,b %d, z %d; want 1, 2, 0", a, ab, none)
		}
		wantFault(t, c.Do(t, "GET", "/v1/ports?shard=a&node=sna", nil), 400, "shard")
		wantFault(t, c.Do(t, "GET", "/v1/nodes/sna/ports?shard=a", nil), 400, "shard")
		if a, ab := count("/v1/portgroups?shard=a"), count("/v1/portgroups/detail?shard=b,a"); a != 1 || ab != 2 {
			t.Errorf("portgroups in a %d, a,b %d; want 1, 2", a, ab)
		}
		wantFault(t, c.Do(t, "GET", "/v1/portgroups?shard=a&address=52:54:00:00:02:00", nil), 400, "shard")
	})
}

// TestContinueInspection: the ramdisk callback needs no credentials, is
// there at 1.1 and from 1.84 (node_uuid only from 1.84), checks its body
// as Ironic's DATA_VALIDATOR, and answers a lookup of a node that does
// not await an inventory (TestAgentInspect has one that does) with
// Ironic's generic 404.
func TestContinueInspection(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs := startLocal(t, setting)
		anon, admin := cs["anonymous"], cs["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "ci", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		uuid := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": uuid, "address": "52:54:00:00:03:01"}), 201)
		data := map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": "52:54:00:00:03:01"}}, "bmc_address": "192.0.2.9"}, "plugin": 1}
		wantFault(t, at(anon, "1.1").Do(t, "POST", "/v1/continue_inspection", data), 404, "could not be found")
		wantFault(t, at(anon, "1.2").Do(t, "POST", "/v1/continue_inspection", data), 404, "1.84")
		wantFault(t, at(anon, "1.1").Do(t, "POST", "/v1/continue_inspection?node_uuid="+uuid, data), 404, "1.84")
		for _, c := range []*servertest.Client{anon, admin} {
			wantFault(t, c.Do(t, "POST", "/v1/continue_inspection", data), 404, "could not be found")
			wantFault(t, c.Do(t, "POST", "/v1/continue_inspection?node_uuid="+uuid, data), 404, "could not be found")
		}
		for _, bad := range []any{
			map[string]any{},
			map[string]any{"inventory": map[string]any{"interfaces": []any{}}},
			map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"name": "eth0"}}}},
			map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": "junk"}}}},
			map[string]any{"inventory": map[string]any{"interfaces": "eth0"}},
		} {
			wantFault(t, anon.Do(t, "POST", "/v1/continue_inspection", bad), 400, "inventory")
		}
		wantFault(t, anon.Do(t, "POST", "/v1/continue_inspection?node_uuid=ci", data), 400, "node_uuid")
		mustStatus(t, anon.Do(t, "POST", "/v1/continue_inspection?x=1", data), 400)
	})
}

// TestRunbookTraitsHidden: a runbook's traits are shown, and may be asked
// for in ?fields=, from 1.112 (or from the newest version while that is
// lower), as Ironic's convert_with_links.
func TestRunbookTraitsHidden(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/runbooks", `{"name":"CUSTOM_RB","steps":[{"interface":"power","step":"reboot","order":1}]}`)
		mustStatus(t, r, 201)
		if _, ok := r.JSON(t)["traits"]; !ok {
			t.Errorf("traits not shown at the newest version: %s", r.Body)
		}
		old := at(c, below(api.VerRunbookTraits))
		if _, ok := old.Do(t, "GET", "/v1/runbooks/CUSTOM_RB", nil).JSON(t)["traits"]; ok {
			t.Errorf("traits shown below 1.112")
		}
		wantFault(t, old.Do(t, "GET", "/v1/runbooks/CUSTOM_RB?fields=traits", nil), 400, "traits")
		mustStatus(t, old.Do(t, "GET", "/v1/runbooks/CUSTOM_RB/traits", nil), 404)
	})
}
