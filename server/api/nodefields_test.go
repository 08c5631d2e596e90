package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func patch(t *testing.T, c *servertest.Client, id string, ops ...string) *servertest.Response {
	t.Helper()
	return c.Do(t, "PATCH", "/v1/nodes/"+id, "["+strings.Join(ops, ",")+"]")
}

func wantFault(t *testing.T, r *servertest.Response, status int, words ...string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d: %s", r.Status, status, r.Body)
		return
	}
	for _, w := range words {
		if f := r.Fault(t); !strings.Contains(f, w) {
			t.Errorf("fault %q does not say %q", f, w)
		}
	}
}

// TestNodeFieldsPerVersion: a node carries Ironic's fields with Ironic's
// defaults, each from the microversion that introduced it; fields newer
// than the newest version are stored but not shown.
func TestNodeFieldsPerVersion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "f1", "driver": "ipmi", "boot_interface": "ipxe", "raid_interface": "agent",
			"driver_info": map[string]any{"ipmi_address": "192.0.2.1"}})
		mustStatus(t, r, 201)
		n := r.JSON(t)
		for k, want := range map[string]any{
			"boot_interface": "ipxe", "raid_interface": "agent", "deploy_interface": "direct", "power_interface": "ipmitool",
			"management_interface": "ipmitool", "network_interface": "noop", "storage_interface": "noop", "vendor_interface": "ipmitool",
			"bios_interface": "no-bios", "console_interface": "no-console", "inspect_interface": "no-inspect", "rescue_interface": "no-rescue",
			"protected": false, "protected_reason": nil, "retired": false, "retired_reason": nil, "automated_clean": nil,
			"console_enabled": false, "boot_mode": nil, "secure_boot": nil, "inspection_started_at": nil, "inspection_finished_at": nil,
			"maintenance_reason": nil, "power_state": nil,
		} {
			if got, ok := n[k]; !ok || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
			}
		}
		for _, k := range []string{"raid_config", "target_raid_config", "deploy_step", "network_data", "clean_step"} {
			if m, ok := n[k].(map[string]any); !ok || len(m) != 0 {
				t.Errorf("%s = %v, want {}", k, n[k])
			}
		}
		// The newest fields are there at the newest version, and not
		// below their own.
		for k, below := range map[string]string{"instance_name": "1.103", "health": "1.108"} {
			if _, ok := n[k]; !ok {
				t.Errorf("%s missing at %s", k, c.Version)
			}
			if _, ok := at(c, below).Do(t, "GET", "/v1/nodes/"+n["uuid"].(string), nil).JSON(t)[k]; ok {
				t.Errorf("%s shown at %s", k, below)
			}
		}
		for v, fields := range map[string][2][]string{
			"1.30": {{"network_interface", "resource_class", "console_enabled", "raid_config"}, {"boot_interface", "storage_interface", "protected"}},
			"1.47": {{"automated_clean", "bios_interface", "deploy_step", "rescue_interface"}, {"protected", "owner"}},
			"1.61": {{"retired", "retired_reason", "protected"}, {"network_data", "boot_mode"}},
			"1.1":  {{"uuid", "console_enabled", "driver_info"}, {"name", "inspection_started_at", "network_interface"}},
		} {
			got := at(c, v).Do(t, "GET", "/v1/nodes/"+n["uuid"].(string), nil).JSON(t)
			for _, k := range fields[0] {
				if _, ok := got[k]; !ok {
					t.Errorf("%s missing at %s", k, v)
				}
			}
			for _, k := range fields[1] {
				if _, ok := got[k]; ok {
					t.Errorf("%s shown at %s", k, v)
				}
			}
		}

		// fake-hardware takes Ironic's fake implementations, as
		// gophercloud's CreateFakeNode sends them.
		r = c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "f2", "driver": "fake-hardware", "boot_interface": "fake", "deploy_interface": "fake"})
		mustStatus(t, r, 201)
		if n := r.JSON(t); n["boot_interface"] != "fake" || n["power_interface"] != "fake" || n["storage_interface"] != "noop" {
			t.Errorf("fake-hardware node: %v", n)
		}
		v := c.Do(t, "GET", "/v1/nodes/f2/validate", nil).JSON(t)
		for _, iface := range []string{"boot", "deploy", "management", "power"} {
			if x := v[iface].(map[string]any); x["result"] != true || x["reason"] != nil {
				t.Errorf("validate %s: %v", iface, x)
			}
		}

		// ?fields= names the interfaces; a node shows its driver's
		// default for one it never chose.
		r = c.Do(t, "GET", "/v1/nodes?fields=uuid,deploy_interface", nil)
		mustStatus(t, r, 200)
		for _, x := range r.JSON(t)["nodes"].([]any) {
			x := x.(map[string]any)
			if x["deploy_interface"] == nil || x["deploy_interface"] == "" || x["boot_interface"] != nil || x["name"] != nil {
				t.Errorf("fields=uuid,deploy_interface gives %v", x)
			}
		}
		if r := at(c, "1.30").Do(t, "GET", "/v1/nodes?fields=deploy_interface", nil); r.Status != 400 {
			t.Errorf("deploy_interface at 1.30: %d", r.Status)
		}
		// Creating with a field newer than the request's version is 406.
		wantFault(t, at(c, "1.30").Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "boot_interface": "fake"}), 406, "boot_interface")
		wantFault(t, at(c, "1.103").Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "instance_name": "i1"}), 406, "instance_name")
	})
}

// TestNodeInterfaces: an interface the driver does not offer is a 400
// naming the field and what the driver offers, on create and on patch;
// changing interfaces needs a state that allows it or maintenance;
// changing the driver checks the interfaces against the new one unless
// reset_interfaces puts them back to its defaults.
func TestNodeInterfaces(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		wantFault(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "ipmi", "boot_interface": "fake", "driver_info": map[string]any{"ipmi_address": "192.0.2.1"}}),
			400, "boot_interface", "ipxe, pxe")
		wantFault(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "power_interface": "ipmitool", "driver_info": map[string]any{"redfish_address": "https://192.0.2.1"}}),
			400, "power_interface", "redfish")
		r := c.Do(t, "POST", "/v1/nodes", ipmiNode("i1"))
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		wantFault(t, patch(t, c, id, `{"op":"replace","path":"/deploy_interface","value":"fake"}`), 400, "deploy_interface", "direct, ramdisk")
		r = patch(t, c, id, `{"op":"replace","path":"/deploy_interface","value":"ramdisk"}`, `{"op":"replace","path":"/raid_interface","value":"agent"}`)
		mustStatus(t, r, 200)
		if n := r.JSON(t); n["deploy_interface"] != "ramdisk" || n["raid_interface"] != "agent" {
			t.Errorf("patched interfaces: %v %v", n["deploy_interface"], n["raid_interface"])
		}
		// Removing an interface restores the driver's default.
		if n := patch(t, c, id, `{"op":"remove","path":"/deploy_interface"}`).JSON(t); n["deploy_interface"] != "direct" {
			t.Errorf("after remove: %v", n["deploy_interface"])
		}

		// ipmi → redfish: ipmitool power does not fit redfish.
		to := `{"op":"replace","path":"/driver","value":"redfish"}`
		info := `{"op":"replace","path":"/driver_info","value":{"redfish_address":"https://192.0.2.9"}}`
		wantFault(t, patch(t, c, id, to, info), 400, "_interface", "hardware type redfish")
		wantFault(t, c.Do(t, "PATCH", "/v1/nodes/"+id+"?reset_interfaces=true", `[{"op":"add","path":"/extra/x","value":1}]`), 400, "reset_interfaces")
		r = c.Do(t, "PATCH", "/v1/nodes/"+id+"?reset_interfaces=true", "["+to+","+info+"]")
		mustStatus(t, r, 200)
		if n := r.JSON(t); n["driver"] != "redfish" || n["power_interface"] != "redfish" || n["raid_interface"] != "redfish" || n["boot_interface"] != "ipxe" {
			t.Errorf("reset interfaces: %v", n)
		}
		if r := at(c, "1.44").Do(t, "PATCH", "/v1/nodes/"+id+"?reset_interfaces=true", "["+to+"]"); r.Status != 406 {
			t.Errorf("reset_interfaces at 1.44: %d", r.Status)
		}

		// Interfaces are fixed while the node is active, unless in
		// maintenance.
		r = c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "act", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		act := r.JSON(t)["uuid"].(string)
		toActive(t, c, act)
		wantFault(t, patch(t, c, act, `{"op":"replace","path":"/boot_interface","value":"ipxe"}`), 409, "boot_interface", "maintenance")
		mustStatus(t, patch(t, c, act, `{"op":"replace","path":"/maintenance","value":"true"}`), 200)
		mustStatus(t, patch(t, c, act, `{"op":"replace","path":"/boot_interface","value":"ipxe"}`), 200)
	})
}

// toActive takes a fake node from enroll to active by adoption.
func toActive(t *testing.T, c *servertest.Client, id string) {
	t.Helper()
	provision(t, c, id, map[string]any{"target": "manage"}, 202)
	waitState(t, c, id, "manageable")
	provision(t, c, id, map[string]any{"target": "adopt"}, 202)
	waitState(t, c, id, "active")
}

// TestNodeProtectedRetired: Ironic's rules for protected, retired and
// maintenance set by patch.
func TestNodeProtectedRetired(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "p1", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)

		// maintenance by patch, as gophercloud sends it (a string).
		n := patch(t, c, id, `{"op":"replace","path":"/maintenance","value":"true"}`).JSON(t)
		if n["maintenance"] != true || n["maintenance_reason"] != nil {
			t.Errorf("maintenance by patch: %v %v", n["maintenance"], n["maintenance_reason"])
		}
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/p1/maintenance", map[string]any{"reason": "disk"}), 202)
		n = patch(t, c, id, `{"op":"replace","path":"/maintenance","value":false}`).JSON(t)
		if n["maintenance"] != false || n["maintenance_reason"] != nil {
			t.Errorf("maintenance off by patch: %v %v", n["maintenance"], n["maintenance_reason"])
		}
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/p1/maintenance", nil), 202)
		if n := c.Do(t, "GET", "/v1/nodes/p1", nil).JSON(t); n["maintenance_reason"] != nil {
			t.Errorf("maintenance without a reason: %q", n["maintenance_reason"])
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/p1/maintenance", nil), 202)
		wantFault(t, patch(t, c, id, `{"op":"replace","path":"/maintenance","value":"perhaps"}`), 400, "maintenance")

		// protected: only active nodes; a reason needs the flag.
		wantFault(t, patch(t, c, id, `{"op":"replace","path":"/protected","value":true}`), 409, "can only be made protected", "enroll")
		toActive(t, c, id)
		wantFault(t, patch(t, c, id, `{"op":"replace","path":"/protected_reason","value":"db"}`), 400, "protected_reason")
		n = patch(t, c, id, `{"op":"replace","path":"/protected","value":true}`, `{"op":"replace","path":"/protected_reason","value":"prod db"}`).JSON(t)
		if n["protected"] != true || n["protected_reason"] != "prod db" {
			t.Errorf("protected: %v %v", n["protected"], n["protected_reason"])
		}
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/p1/maintenance", map[string]any{"reason": "retire"}), 202)
		wantFault(t, c.Do(t, "DELETE", "/v1/nodes/p1", nil), 403, "is protected and cannot be undeployed, rebuilt or deleted")
		n = patch(t, c, id, `{"op":"replace","path":"/protected","value":false}`).JSON(t)
		if n["protected"] != false || n["protected_reason"] != nil {
			t.Errorf("unprotected: %v %v", n["protected"], n["protected_reason"])
		}

		// retired: never on an available node; provide refuses a retired
		// one; unsetting clears the reason.
		r = c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "r1", "driver": "fake-hardware", "resource_class": "rc"})
		mustStatus(t, r, 201)
		rid := r.JSON(t)["uuid"].(string)
		provision(t, c, rid, map[string]any{"target": "manage"}, 202)
		waitState(t, c, rid, "manageable")
		wantFault(t, patch(t, c, rid, `{"op":"replace","path":"/retired_reason","value":"old"}`), 400, "retired_reason")
		n = patch(t, c, rid, `{"op":"replace","path":"/retired","value":true}`).JSON(t)
		if n["retired"] != true || n["retired_reason"] != nil {
			t.Errorf("retired: %v %v", n["retired"], n["retired_reason"])
		}
		mustStatus(t, patch(t, c, rid, `{"op":"add","path":"/retired_reason","value":"EOL"}`), 200)
		wantFault(t, c.Do(t, "PUT", "/v1/nodes/r1/states/provision", map[string]any{"target": "provide"}), 400, "because it is retired")
		if got := c.Do(t, "GET", "/v1/nodes?retired=true", nil).JSON(t)["nodes"].([]any); len(got) != 1 || got[0].(map[string]any)["uuid"] != rid {
			t.Errorf("retired=true lists %v", got)
		}
		n = patch(t, c, rid, `{"op":"replace","path":"/retired","value":false}`).JSON(t)
		if n["retired"] != false || n["retired_reason"] != nil {
			t.Errorf("unretired: %v %v", n["retired"], n["retired_reason"])
		}
		provision(t, c, rid, map[string]any{"target": "provide"}, 202)
		waitState(t, c, rid, "available")
		wantFault(t, patch(t, c, rid, `{"op":"replace","path":"/retired","value":true}`), 409, "'available'")

		// automated_clean, network_data: stored as given, checked.
		n = patch(t, c, rid, `{"op":"replace","path":"/automated_clean","value":false}`, `{"op":"add","path":"/network_data","value":{"links":[{"id":"eth0"}]}}`).JSON(t)
		if n["automated_clean"] != false || len(n["network_data"].(map[string]any)) != 1 {
			t.Errorf("automated_clean %v network_data %v", n["automated_clean"], n["network_data"])
		}
		wantFault(t, patch(t, c, rid, `{"op":"add","path":"/network_data","value":{"routes":[]}}`), 400, "network_data")
		wantFault(t, patch(t, c, rid, `{"op":"replace","path":"/console_enabled","value":true}`), 400, "console_enabled")
		// A field newer than the request's version cannot be patched
		// either; from its version it can.
		wantFault(t, patch(t, at(c, "1.103"), rid, `{"op":"add","path":"/instance_name","value":"i1"}`), 406, "instance_name")
		if n := patch(t, c, rid, `{"op":"add","path":"/instance_name","value":"i1"}`).JSON(t); n["instance_name"] != "i1" {
			t.Errorf("instance_name after patch: %v", n["instance_name"])
		}
	})
}

// TestNodeRAIDConfig: PUT /v1/nodes/{node}/states/raid records the target
// configuration after checking it against Ironic's RAID schema; a node
// whose raid interface is no-raid refuses it.
func TestNodeRAIDConfig(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		body := ipmiNode("raid1")
		body["raid_interface"] = "agent"
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", body), 201)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", ipmiNode("noraid")), 201)
		cfg := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 100, "raid_level": "5", "is_root_volume": true,
			"controller": "software", "physical_disks": []any{map[string]any{"size": "> 100"}}}}}
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/raid1/states/raid", cfg), 204)
		n := c.Do(t, "GET", "/v1/nodes/raid1", nil).JSON(t)
		if d := n["target_raid_config"].(map[string]any)["logical_disks"].([]any); len(d) != 1 || d[0].(map[string]any)["raid_level"] != "5" {
			t.Errorf("target_raid_config %v", n["target_raid_config"])
		}
		if s := c.Do(t, "GET", "/v1/nodes/raid1/states", nil).JSON(t); len(s["target_raid_config"].(map[string]any)) != 1 {
			t.Errorf("states show %v", s["target_raid_config"])
		}
		wantFault(t, c.Do(t, "PUT", "/v1/nodes/noraid/states/raid", cfg), 400, "does not support raid")
		for _, bad := range []map[string]any{
			{"logical_disks": []any{map[string]any{"size_gb": 100}}},
			{"logical_disks": []any{map[string]any{"size_gb": 100, "raid_level": "7"}}},
			{"logical_disks": []any{map[string]any{"size_gb": "lots", "raid_level": "1"}}},
			{"logical_disks": []any{map[string]any{"size_gb": 10, "raid_level": "1", "colour": "red"}}},
			{"disks": []any{}},
		} {
			r := c.Do(t, "PUT", "/v1/nodes/raid1/states/raid", bad)
			if r.Status != 400 || r.Fault(t) == "" {
				t.Errorf("%v: %d %s", bad, r.Status, r.Body)
			}
		}
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/raid1/states/raid", map[string]any{}), 204)
		if n := c.Do(t, "GET", "/v1/nodes/raid1", nil).JSON(t); len(n["target_raid_config"].(map[string]any)) != 0 {
			t.Errorf("cleared target_raid_config %v", n["target_raid_config"])
		}
		if r := at(c, "1.11").Do(t, "PUT", "/v1/nodes/raid1/states/raid", cfg); r.Status != 406 {
			t.Errorf("RAID at 1.11: %d", r.Status)
		}
	})
}

// TestAllocationStates: an allocation is created allocating and settled
// by the conductor, with Ironic's error texts; ?state= filters; candidate
// nodes are checked at request time.
func TestAllocationStates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		n1 := availableNode(t, admin, map[string]any{"name": "s1", "owner": "own"})
		availableNode(t, admin, map[string]any{"name": "s2", "owner": "oth"})
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/s1/traits/CUSTOM_GPU", nil), 204)

		a := allocate(t, member, map[string]any{"resource_class": "baremetal", "traits": []string{"CUSTOM_GPU"}})
		if a["state"] != "active" || a["node_uuid"] != n1 {
			t.Errorf("allocation %v", a)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/s1", nil).JSON(t); n["allocation_uuid"] != a["uuid"] {
			t.Errorf("node allocation_uuid %v", n["allocation_uuid"])
		}
		for _, tc := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"resource_class": "gpu"}, "no available nodes match the resource class gpu"},
			{map[string]any{"resource_class": "baremetal", "traits": []string{"CUSTOM_NONE"}}, "no suitable nodes have the requested traits CUSTOM_NONE"},
			{map[string]any{"resource_class": "baremetal", "candidate_nodes": []string{"s1"}}, "none of the requested nodes are available and match the resource class baremetal"},
		} {
			x := allocate(t, admin, tc.body)
			if want := "Failed to process allocation " + x["uuid"].(string) + ": " + tc.want + "."; x["state"] != "error" || x["last_error"] != want || x["node_uuid"] != nil {
				t.Errorf("%v: %v %q, want error %q", tc.body, x["state"], x["last_error"], want)
			}
		}
		// A candidate the caller cannot see is refused at once, exactly as
		// one that does not exist.
		for _, cand := range []string{"s2", "no-such-node"} {
			wantFault(t, member.Do(t, "POST", "/v1/allocations", map[string]any{"resource_class": "baremetal", "candidate_nodes": []string{cand}}),
				400, "Node "+cand+" could not be found")
		}
		if got := allocUUIDs(t, admin.Do(t, "GET", "/v1/allocations?state=active", nil)); got != a["uuid"] {
			t.Errorf("state=active lists %s", got)
		}
		if got := strings.Count(allocUUIDs(t, admin.Do(t, "GET", "/v1/allocations?state=error", nil)), ","); got != 2 {
			t.Errorf("state=error lists %d+1", got)
		}
		wantFault(t, admin.Do(t, "GET", "/v1/allocations?state=done", nil), 400, "state")
		// An unnamed allocation's name can be replaced, as openstacksdk does.
		r := admin.Do(t, "PATCH", "/v1/allocations/"+a["uuid"].(string), `[{"op":"replace","path":"/name","value":"named"}]`)
		mustStatus(t, r, 200)
		if r.JSON(t)["name"] != "named" {
			t.Errorf("renamed: %s", r.Body)
		}
	})
}
