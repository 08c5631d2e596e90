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

// listed is the sorted values of key in a list answer's items.
func listed(t *testing.T, c *servertest.Client, path, list, key string) []string {
	t.Helper()
	r := c.Do(t, "GET", path, nil)
	mustStatus(t, r, 200)
	var out []string
	for _, it := range r.JSON(t)[list].([]any) {
		out = append(out, fmt.Sprint(it.(map[string]any)[key]))
	}
	slices.Sort(out)
	return out
}

// TestPortDescriptionAndConductorGroupFilters: 1.97's ?description_contains=
// keeps the ports whose description holds the words, whatever their case
// (as Ironic's LIKE on MySQL); 1.99's ?conductor_groups= keeps the ports
// and portgroups of nodes in any of the groups, named in any case. As
// Ironic, neither is gated by version, and conductor_groups is refused
// beside a node, portgroup or address on ports, and beside a node,
// address or shard on portgroups.
func TestPortDescriptionAndConductorGroupFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c0 := start(t, setting)
		c := at(c0, api.VerMax.String())
		for i, g := range []string{"Rack1", "rack2", ""} {
			r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprint("cg", i), "driver": "fake-hardware", "conductor_group": g})
			mustStatus(t, r, 201)
			node := r.JSON(t)["uuid"].(string)
			mustStatus(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": fmt.Sprintf("52:54:00:00:03:0%d", i),
				"name": fmt.Sprint("p", i), "description": []string{"Uplink to ToR-A", "uplink to tor-b", "BMC side"}[i]}), 201)
			mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": node, "address": fmt.Sprintf("52:54:00:00:04:0%d", i),
				"name": fmt.Sprint("g", i)}), 201)
		}
		for q, want := range map[string][]string{
			"description_contains=UPLINK":                      {"p0", "p1"},
			"description_contains=tor-a":                       {"p0"},
			"description_contains=nothing":                     nil,
			"conductor_groups=RACK1":                           {"p0"},
			"conductor_groups=rack1,rack2":                     {"p0", "p1"},
			"conductor_groups=rack2":                           {"p1"},
			"description_contains=link&conductor_groups=rack2": {"p1"},
		} {
			if got := listed(t, c, "/v1/ports?fields=name&"+q, "ports", "name"); !slices.Equal(got, want) {
				t.Errorf("ports?%s: %v, want %v", q, got, want)
			}
		}
		if got := listed(t, c, "/v1/ports/detail?description_contains=bmc", "ports", "name"); !slices.Equal(got, []string{"p2"}) {
			t.Errorf("ports/detail?description_contains=bmc: %v", got)
		}
		// At 1.1 (no names, no descriptions shown) the filter still applies.
		if got := listed(t, at(c0, "1.1"), "/v1/ports?description_contains=uplink", "ports", "address"); !slices.Equal(got, []string{"52:54:00:00:03:00", "52:54:00:00:03:01"}) {
			t.Errorf("1.1 ports?description_contains=uplink: %v", got)
		}
		if got := listed(t, c, "/v1/portgroups?conductor_groups=Rack2,rack1", "portgroups", "name"); !slices.Equal(got, []string{"g0", "g1"}) {
			t.Errorf("portgroups?conductor_groups=Rack2,rack1: %v", got)
		}
		if got := listed(t, c, "/v1/portgroups/detail?conductor_groups=none", "portgroups", "name"); got != nil {
			t.Errorf("portgroups?conductor_groups=none: %v", got)
		}
		wantFault(t, c.Do(t, "GET", "/v1/ports?conductor_groups=rack1&node=cg0", nil), 400, "conductor_groups")
		wantFault(t, c.Do(t, "GET", "/v1/ports?conductor_groups=rack1&address=52:54:00:00:03:00", nil), 400, "conductor_groups")
		wantFault(t, c.Do(t, "GET", "/v1/nodes/cg0/ports?conductor_groups=rack1", nil), 400, "conductor_groups")
		// On portgroups Ironic counts it among its exclusive filters.
		wantFault(t, c.Do(t, "GET", "/v1/portgroups?conductor_groups=rack1&shard=a", nil), 400, "simultaneously")
		wantFault(t, c.Do(t, "GET", "/v1/portgroups?conductor_groups=rack1&address=52:54:00:00:04:00", nil), 400, "simultaneously")
		wantFault(t, c.Do(t, "GET", "/v1/nodes/cg0/portgroups?conductor_groups=rack1", nil), 400, "simultaneously")
	})
}

// TestPortgroupPhysicalNetworkPropagates: from 1.102 a portgroup's
// physical network is its ports', as Ironic's
// update_portgroup_physical_network: patching the portgroup's sets every
// member's, a member's own is refused (400), and, as Ironic's
// validate_port_physnet, a port joins a portgroup only on the network of
// its members or, without members, of the portgroup (409).
func TestPortgroupPhysicalNetworkPropagates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c0 := start(t, setting)
		c := at(c0, api.VerMax.String())
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "pn", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		node := r.JSON(t)["uuid"].(string)
		mustStatus(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": node, "name": "bond0", "physical_network": "physA",
			"standalone_ports_supported": true}), 201)
		// No members yet: the portgroup's network decides.
		wantFault(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:05:00", "portgroup_uuid": "bond0",
			"physical_network": "physB"}), 409, "physB", "physA")
		for i := range 2 {
			mustStatus(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": fmt.Sprintf("52:54:00:00:05:0%d", i),
				"name": fmt.Sprint("m", i), "portgroup_uuid": "bond0", "physical_network": "physA"}), 201)
		}
		mustStatus(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:05:09", "name": "loose",
			"physical_network": "physC"}), 201)
		// A loose port on another network cannot join.
		wantFault(t, c.Do(t, "PATCH", "/v1/ports/loose", []map[string]any{{"op": "add", "path": "/portgroup_uuid", "value": "bond0"}}), 409, "physC")

		mustStatus(t, c.Do(t, "PATCH", "/v1/portgroups/bond0", []map[string]any{{"op": "replace", "path": "/physical_network", "value": "physZ"}}), 200)
		for _, p := range []string{"m0", "m1"} {
			if got := c.Do(t, "GET", "/v1/ports/"+p, nil).JSON(t)["physical_network"]; got != "physZ" {
				t.Errorf("%s physical_network %v after the portgroup's became physZ", p, got)
			}
		}
		if got := c.Do(t, "GET", "/v1/ports/loose", nil).JSON(t)["physical_network"]; got != "physC" {
			t.Errorf("a port outside the portgroup changed: %v", got)
		}
		wantFault(t, c.Do(t, "PATCH", "/v1/ports/m0", []map[string]any{{"op": "replace", "path": "/physical_network", "value": "physY"}}), 400, "physical_network")
		// Below 1.102 Ironic's API does not refuse it; its conductor
		// refuses a member leaving its portgroup's network.
		wantFault(t, at(c0, below(api.VerPortgroupPhysnet)).Do(t, "PATCH", "/v1/ports/m0",
			[]map[string]any{{"op": "replace", "path": "/physical_network", "value": "physY"}}), 409, "physY")
		// Leaving the portgroup while changing network is allowed.
		mustStatus(t, c.Do(t, "PATCH", "/v1/ports/m1", []map[string]any{{"op": "remove", "path": "/portgroup_uuid"},
			{"op": "replace", "path": "/physical_network", "value": "physY"}}), 200)
		mustStatus(t, c.Do(t, "PATCH", "/v1/portgroups/bond0", []map[string]any{{"op": "remove", "path": "/physical_network"}}), 200)
		if got := c.Do(t, "GET", "/v1/ports/m0", nil).JSON(t)["physical_network"]; got != nil {
			t.Errorf("m0 physical_network %v after the portgroup's was removed", got)
		}
	})
}

// TestDynamicPortgroupFields: 1.111's port available_for_dynamic_portgroup
// (true unless given, a JSON boolean, set on create and by PATCH) and
// portgroup dynamic_portgroup (false: only networking sets it, and
// Ironic's create and patch schemas refuse it); both hidden and refused
// below 1.111.
func TestDynamicPortgroupFields(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c0 := start(t, setting)
		c := at(c0, api.VerDynamicPortgroup.String())
		old := at(c0, below(api.VerDynamicPortgroup))
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "dyn", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		node := r.JSON(t)["uuid"].(string)
		r = c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:06:00", "name": "d0"})
		mustStatus(t, r, 201)
		if got := r.JSON(t)["available_for_dynamic_portgroup"]; got != true {
			t.Errorf("default available_for_dynamic_portgroup %v, want true", got)
		}
		r = c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:06:01", "name": "d1",
			"available_for_dynamic_portgroup": false})
		mustStatus(t, r, 201)
		if got := r.JSON(t)["available_for_dynamic_portgroup"]; got != false {
			t.Errorf("available_for_dynamic_portgroup %v, want false", got)
		}
		wantFault(t, c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:06:02",
			"available_for_dynamic_portgroup": "yes"}), 400)
		wantFault(t, old.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:00:06:02",
			"available_for_dynamic_portgroup": false}), 406, "available_for_dynamic_portgroup")
		r = c.Do(t, "PATCH", "/v1/ports/d1", []map[string]any{{"op": "replace", "path": "/available_for_dynamic_portgroup", "value": true}})
		mustStatus(t, r, 200)
		if got := r.JSON(t)["available_for_dynamic_portgroup"]; got != true {
			t.Errorf("patched available_for_dynamic_portgroup %v, want true", got)
		}
		wantFault(t, c.Do(t, "PATCH", "/v1/ports/d1", []map[string]any{{"op": "remove", "path": "/available_for_dynamic_portgroup"}}), 400, "available_for_dynamic_portgroup")
		wantFault(t, old.Do(t, "PATCH", "/v1/ports/d1", []map[string]any{{"op": "replace", "path": "/available_for_dynamic_portgroup", "value": false}}), 406)
		if _, ok := old.Do(t, "GET", "/v1/ports/d1", nil).JSON(t)["available_for_dynamic_portgroup"]; ok {
			t.Errorf("available_for_dynamic_portgroup shown below %s", api.VerDynamicPortgroup)
		}
		mustStatus(t, old.Do(t, "GET", "/v1/ports?fields=available_for_dynamic_portgroup", nil), 406)

		r = c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": node, "name": "pg-dyn"})
		mustStatus(t, r, 201)
		if got, ok := r.JSON(t)["dynamic_portgroup"]; !ok || got != false {
			t.Errorf("dynamic_portgroup %v (shown %v), want false", got, ok)
		}
		wantFault(t, c.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": node, "name": "pg-dyn2", "dynamic_portgroup": true}), 400)
		wantFault(t, c.Do(t, "PATCH", "/v1/portgroups/pg-dyn", []map[string]any{{"op": "replace", "path": "/dynamic_portgroup", "value": true}}), 400, "dynamic_portgroup")
		if _, ok := old.Do(t, "GET", "/v1/portgroups/pg-dyn", nil).JSON(t)["dynamic_portgroup"]; ok {
			t.Errorf("dynamic_portgroup shown below %s", api.VerDynamicPortgroup)
		}
		mustStatus(t, old.Do(t, "GET", "/v1/portgroups/pg-dyn?fields=dynamic_portgroup", nil), 406)
		if got := listed(t, c, "/v1/portgroups?fields=name,dynamic_portgroup", "portgroups", "dynamic_portgroup"); !slices.Equal(got, []string{"false"}) {
			t.Errorf("listed dynamic_portgroup %v", got)
		}
	})
}
