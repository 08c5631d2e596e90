package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestUnversionedNodeList: a request without a version is 1.1, where
// Ironic's node list shows uuid, instance_uuid, maintenance, power_state,
// provision_state and links (name came in 1.5), and a node created at 1.1
// starts "available", which 1.1 shows as no state (null).
func TestUnversionedNodeList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = ""
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		want := []string{"instance_uuid", "links", "maintenance", "power_state", "provision_state", "uuid"}
		for _, v := range []string{"", "1.1", "1.4"} {
			c.Version = v
			r = c.Do(t, "GET", "/v1/nodes", nil)
			mustStatus(t, r, 200)
			ns := r.JSON(t)["nodes"].([]any)
			if len(ns) != 1 {
				t.Fatalf("%q: %d nodes: %s", v, len(ns), r.Body)
			}
			n := ns[0].(map[string]any)
			if got := keysOf(n); !slices.Equal(got, want) {
				t.Errorf("%q: list keys %v, want %v", v, got, want)
			}
			if n["uuid"] != id {
				t.Errorf("%q: uuid %v, want %s", v, n["uuid"], id)
			}
			if ps, ok := n["provision_state"]; !ok || (v != "1.4" && ps != nil) || (v == "1.4" && ps != "available") {
				t.Errorf("%q: provision_state %v", v, ps)
			}
		}
		// Under --auth none there is no portal: any client's /nodes is
		// the API's, as in Ironic.
		c.Version = ""
		r = c.Do(t, "GET", "/nodes", nil)
		mustStatus(t, r, 200)
		if ns := r.JSON(t)["nodes"].([]any); len(ns) != 1 || ns[0].(map[string]any)["uuid"] != id {
			t.Errorf("/nodes without /v1: %s", r.Body)
		}
		c.Version = "1.5"
		r = c.Do(t, "GET", "/v1/nodes", nil)
		mustStatus(t, r, 200)
		if got := keysOf(r.JSON(t)["nodes"].([]any)[0].(map[string]any)); !slices.Contains(got, "name") {
			t.Errorf("1.5: list keys %v lack name", got)
		}
	})
}

// TestStatesPerVersion: /states shows the RAID fields from 1.12 and the
// boot mode from 1.75, and "available" as null at 1.1, as Ironic's
// node_states_convert.
func TestStatesPerVersion(t *testing.T) {
	base := []string{"console_enabled", "last_error", "power_state", "provision_state", "provision_updated_at", "target_power_state", "target_provision_state"}
	raid := append(slices.Clone(base), "raid_config", "target_raid_config")
	boot := append(slices.Clone(raid), "boot_mode", "secure_boot")
	slices.Sort(raid)
	slices.Sort(boot)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = "1.1"
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		for _, tc := range []struct {
			v    string
			keys []string
			ps   any
		}{{"", base, nil}, {"1.1", base, nil}, {"1.2", base, "available"}, {"1.11", base, "available"}, {"1.12", raid, "available"}, {"1.74", raid, "available"}, {"1.75", boot, "available"}} {
			c.Version = tc.v
			r := c.Do(t, "GET", "/v1/nodes/"+id+"/states", nil)
			mustStatus(t, r, 200)
			m := r.JSON(t)
			if got := keysOf(m); !slices.Equal(got, tc.keys) {
				t.Errorf("%q: keys %v, want %v", tc.v, got, tc.keys)
			}
			if m["provision_state"] != tc.ps {
				t.Errorf("%q: provision_state %v, want %v", tc.v, m["provision_state"], tc.ps)
			}
		}
	})
}

// TestOldSubresourceAnswers: what Ironic answers, per method, below the
// version of traits (1.37), BIOS (1.40) and virtual media (1.89), from its
// tests (test_node.py *_fails_with_bad_version) and NodesController._lookup.
func TestOldSubresourceAnswers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": "old"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		missing := "00000000-0000-4000-8000-000000000000"
		for _, tc := range []struct {
			v, method, path string
			body            any
			want            int
		}{
			{"1.36", "GET", "/v1/nodes/{n}/traits", nil, 406},
			{"1.1", "GET", "/v1/nodes/{n}/traits", nil, 406},
			{"1.36", "GET", "/v1/nodes/" + missing + "/traits", nil, 404},
			{"1.36", "PUT", "/v1/nodes/{n}/traits", map[string]any{"traits": []string{}}, 405},
			{"1.36", "PUT", "/v1/nodes/{n}/traits/CUSTOM_OLD", nil, 405},
			{"1.36", "DELETE", "/v1/nodes/{n}/traits", nil, 404},
			{"1.36", "DELETE", "/v1/nodes/{n}/traits/CUSTOM_OLD", nil, 404},
			{"1.37", "PUT", "/v1/nodes/{n}/traits/CUSTOM_OLD", nil, 204},
			{"1.37", "DELETE", "/v1/nodes/{n}/traits/CUSTOM_OLD", nil, 204},
			{"1.39", "GET", "/v1/nodes/{n}/bios", nil, 404},
			{"1.39", "GET", "/v1/nodes/{n}/bios/virtualization", nil, 404},
			{"1.39", "PUT", "/v1/nodes/{n}/bios", map[string]any{}, 404},
			{"1.40", "GET", "/v1/nodes/{n}/bios", nil, 200},
			{"1.40", "PUT", "/v1/nodes/{n}/bios", map[string]any{}, 405},
			{"1.88", "POST", "/v1/nodes/{n}/vmedia", map[string]any{"device_type": "cdrom", "image_url": "http://192.0.2.1/x.iso"}, 404},
			{"1.88", "DELETE", "/v1/nodes/{n}/vmedia", nil, 404},
			{"1.88", "PUT", "/v1/nodes/{n}/vmedia", map[string]any{}, 404},
			{"1.88", "GET", "/v1/nodes/{n}/vmedia", nil, 404},
			{"1.77", "PUT", "/v1/nodes/{n}/history", map[string]any{}, 404},
			{"1.78", "PUT", "/v1/nodes/{n}/history", map[string]any{}, 405},
			{"1.80", "POST", "/v1/nodes/{n}/inventory", map[string]any{}, 404},
			{"1.85", "PUT", "/v1/nodes/{n}/firmware", map[string]any{}, 404},
		} {
			c.Version = tc.v
			path := strings.ReplaceAll(tc.path, "{n}", id)
			if r := c.Do(t, tc.method, path, tc.body); r.Status != tc.want {
				t.Errorf("%s %s %s: status %d, want %d: %s", tc.v, tc.method, tc.path, r.Status, tc.want, r.Body)
			}
		}
	})
}

// TestTraitsEmptyList: a node without traits lists [] as Ironic, not
// null, both at /traits and in the node's traits field.
func TestTraitsEmptyList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		r = c.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil)
		mustStatus(t, r, 200)
		if got := strings.TrimSpace(string(r.Body)); got != `{"traits":[]}` {
			t.Errorf("traits: %s, want {\"traits\":[]}", got)
		}
		for _, p := range []string{"/v1/nodes/" + id, "/v1/nodes/detail", "/v1/nodes?fields=uuid,traits"} {
			r = c.Do(t, "GET", p, nil)
			mustStatus(t, r, 200)
			if !strings.Contains(string(r.Body), `"traits":[]`) {
				t.Errorf("%s: no \"traits\":[] in %s", p, r.Body)
			}
		}
	})
}

// TestUnversionedPaths: an API client's /nodes/... is /v1/nodes/..., as
// Ironic's root routes a path without its version (and as its bookmark
// links lead), while a browser's /nodes stays the portal's.
func TestUnversionedPaths(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs := startLocal(t, setting)
		c := cs["system-admin"]
		r := c.Do(t, "POST", "/nodes", map[string]any{"driver": "fake", "name": "unversioned"})
		mustStatus(t, r, 201)
		n := r.JSON(t)
		id := n["uuid"].(string)
		var bookmark string
		for _, l := range n["links"].([]any) {
			if l := l.(map[string]any); l["rel"] == "bookmark" {
				bookmark = l["href"].(string)
			}
		}
		path := strings.TrimPrefix(bookmark, c.Base)
		if path != "/nodes/"+id {
			t.Fatalf("bookmark %q", bookmark)
		}
		r = c.Do(t, "GET", path, nil)
		mustStatus(t, r, 200)
		if r.JSON(t)["name"] != "unversioned" {
			t.Errorf("bookmark: %s", r.Body)
		}
		mustStatus(t, c.Do(t, "PUT", "/nodes/"+id+"/traits/CUSTOM_U", nil), 204)
		r = c.Do(t, "GET", "/nodes/"+id+"/traits", nil)
		mustStatus(t, r, 200)
		if !strings.Contains(string(r.Body), "CUSTOM_U") {
			t.Errorf("traits: %s", r.Body)
		}
		mustStatus(t, c.Do(t, "GET", "/drivers", nil), 200)
		mustStatus(t, c.Do(t, "GET", "/chassis", nil), 200)
		mustStatus(t, c.Do(t, "GET", "/ports", nil), 200)

		// No version but JSON accepted: 1.1, as at /v1/nodes.
		jc := *c
		jc.Version = ""
		jc.Header = c.Header.Clone()
		jc.Header.Set("Accept", "application/json")
		r = jc.Do(t, "GET", "/nodes", nil)
		mustStatus(t, r, 200)
		if r.Header.Get("X-OpenStack-Ironic-API-Version") != "1.1" {
			t.Errorf("version %q", r.Header.Get("X-OpenStack-Ironic-API-Version"))
		}
		if ns := r.JSON(t)["nodes"].([]any); len(ns) != 1 || ns[0].(map[string]any)["uuid"] != id {
			t.Errorf("unversioned list: %s", r.Body)
		}
		// An unknown resource is Ironic's JSON 404 to an API client.
		r = c.Do(t, "GET", "/nodes/"+id+"/nonesuch", nil)
		mustStatus(t, r, 404)
		r.Fault(t)

		// Browsers keep the portal: a navigation, and htmx's */*.
		for _, accept := range []string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "*/*"} {
			b := *c
			b.Version = ""
			b.Header = c.Header.Clone()
			b.Header.Set("Accept", accept)
			if accept == "*/*" {
				b.Header.Set("HX-Request", "true")
			}
			r = b.Do(t, "GET", "/nodes", nil)
			if ct := r.Header.Get("Content-Type"); strings.Contains(ct, "json") || r.Status >= 500 {
				t.Errorf("browser (%s): %d %s: %.200s", accept, r.Status, ct, r.Body)
			}
		}
	})
}

// TestAllocationOwnerBefore160: Ironic hides an allocation's owner below
// 1.60 and refuses it there in ?fields= and in a new allocation (406).
func TestAllocationOwnerBefore160(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "owner-none", "owner": "proj"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		c.Version = "1.59"
		r = c.Do(t, "GET", "/v1/allocations/"+id, nil)
		mustStatus(t, r, 200)
		if _, ok := r.JSON(t)["owner"]; ok {
			t.Errorf("1.59 shows owner: %s", r.Body)
		}
		mustStatus(t, c.Do(t, "GET", "/v1/allocations/"+id+"?fields=uuid,owner", nil), 406)
		mustStatus(t, c.Do(t, "GET", "/v1/allocations?fields=owner", nil), 406)
		mustStatus(t, c.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "owner-none", "owner": "proj"}), 406)
		c.Version = "1.60"
		r = c.Do(t, "GET", "/v1/allocations/"+id+"?fields=uuid,owner", nil)
		mustStatus(t, r, 200)
		if r.JSON(t)["owner"] != "proj" {
			t.Errorf("1.60: %s", r.Body)
		}
	})
}

// TestV1DocumentPerVersion: GET /v1 is Ironic's document at each version
// (test_root.py TestV1Root): media_types an object, and links to chassis,
// nodes, ports and drivers plus each collection from its version.
func TestV1DocumentPerVersion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		added := map[string]api.Version{"lookup": 22, "heartbeat": 22, "portgroups": 23, "volume": 32, "conductors": 49,
			"allocations": 52, "events": 54, "deploy_templates": 55, "shards": 82, "continue_inspection": 84, "runbooks": 92, "inspection_rules": 96}
		for v := api.VerMin; v <= api.VerMax; v++ {
			c.Version = v.String()
			r := c.Do(t, "GET", "/v1/", nil)
			mustStatus(t, r, 200)
			m := r.JSON(t)
			// anvil_version is Anvil's key beside Ironic's (TestVersionDiscovery).
			want := []string{"anvil_version", "chassis", "drivers", "id", "links", "media_types", "nodes", "ports", "version"}
			for k, s := range added {
				if s <= v {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			if got := keysOf(m); !slices.Equal(got, want) {
				t.Errorf("%s: keys\n got %v\nwant %v", v, got, want)
			}
			if mt, ok := m["media_types"].(map[string]any); !ok || mt["base"] != "application/json" || mt["type"] != "application/vnd.openstack.ironic.v1+json" {
				t.Errorf("%s: media_types %v", v, m["media_types"])
			}
			ls := m["nodes"].([]any)
			if len(ls) != 2 || !strings.HasSuffix(ls[1].(map[string]any)["href"].(string), "/nodes/") {
				t.Errorf("%s: nodes links %v", v, ls)
			}
		}
	})
}
