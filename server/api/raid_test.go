package api_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// simVolumes lists the volume paths the simulator's Storage/1 holds,
// read from the simulator itself.
func simVolumes(t *testing.T, sim *bmctest.Redfish) []string {
	t.Helper()
	var out []string
	for _, m := range sim.Resource(t, "/redfish/v1/Systems/1/Storage/1/Volumes")["Members"].([]any) {
		out = append(out, m.(map[string]any)["@odata.id"].(string))
	}
	return out
}

// volumePosts are the bodies Anvil POSTed to the simulator's volumes.
func volumePosts(t *testing.T, sim *bmctest.Redfish) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, b := range sim.Bodies(t) {
		rest, ok := strings.CutPrefix(b, "POST /redfish/v1/Systems/1/Storage/1/Volumes ")
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(rest), &m); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRAIDOverRedfish: a project member sets the target RAID, a manual
// clean's raid.create_configuration builds it on the simulator's storage
// controller and raid_config lists what the BMC then reports; the
// simulator refuses DELETE on volumes, so delete_configuration fails
// naming the step and the BMC's answer and leaves raid_config as it
// was; an empty target fails with its reason before any volume is sent.
func TestRAIDOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin, member := clients["system-admin"], clients["owner-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "raid-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		target := map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": 100, "volume_name": "root", "is_root_volume": true}}}
		mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", target), 204)
		mustStatus(t, clients["other-admin"].Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", target), 404)
		before := simVolumes(t, sim)
		if len(before) != 1 {
			t.Fatalf("simulator starts with volumes %v, want its one", before)
		}

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create_configuration", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("create_configuration: %v", n["last_error"])
		}
		after := simVolumes(t, sim)
		if len(after) != 2 || after[0] != before[0] {
			t.Fatalf("simulator volumes after create: %v", after)
		}
		newVol := sim.Resource(t, after[1])
		if newVol["Name"] != "root" || newVol["CapacityBytes"] != float64(100<<30) {
			t.Errorf("simulator's new volume %v, want root of 100 GiB", newVol)
		}
		// The simulator keeps no RAIDType, so what Anvil asked for is read
		// from its log of bodies: Ironic's payload, with two of the
		// controller's drives for a mirror.
		posts := volumePosts(t, sim)
		drives := sim.Resource(t, "/redfish/v1/Systems/1/Storage/1")["Drives"].([]any)
		if len(posts) != 1 || posts[0]["RAIDType"] != "RAID1" || posts[0]["CapacityBytes"] != float64(100<<30) || posts[0]["Name"] != "root" ||
			!reflect.DeepEqual(posts[0]["Links"], map[string]any{"Drives": drives[:2]}) {
			t.Errorf("volume POSTs %v, drives %v", posts, drives)
		}

		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		raid := n["raid_config"].(map[string]any)
		newID := after[1][strings.LastIndex(after[1], "/")+1:]
		disks := raid["logical_disks"].([]any)
		want := []any{
			// The simulator's own volume reports only VolumeType Mirrored.
			map[string]any{"id": "1", "name": "Virtual Disk 0", "controller": "1", "raid_level": "1", "size_gb": float64(446)},
			map[string]any{"id": newID, "name": "root", "controller": "1", "raid_level": "1", "size_gb": float64(100), "is_root_volume": true},
		}
		if !reflect.DeepEqual(disks, want) || raid["last_updated"] == nil {
			t.Errorf("raid_config %v, want logical_disks %v", raid, want)
		}
		if p := n["properties"].(map[string]any); p["local_gb"] != float64(100) || p["capabilities"] != "raid_level:1" {
			t.Errorf("properties after create %v, want the root volume's local_gb and raid_level", p)
		}
		if ev := eventsOf(t, admin, id); !strings.Contains(ev, "raid: RAID configuration: Virtual Disk 0 (RAID 1, 446 GiB), root (RAID 1, 100 GiB)") {
			t.Errorf("history %v", ev)
		}

		// The simulator has no DELETE on volumes.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "delete_configuration", nil))}, 202)
		n = waitState(t, admin, id, "clean failed")
		if want := "Step raid.delete_configuration failed: the operation is not supported by this BMC (HTTP 405 from the BMC)"; n["last_error"] != want {
			t.Errorf("delete_configuration last_error %q, want %q", n["last_error"], want)
		}
		if !reflect.DeepEqual(n["raid_config"], raid) {
			t.Errorf("raid_config after the refused delete %v, want %v", n["raid_config"], raid)
		}
		if got := simVolumes(t, sim); !slices.Equal(got, after) {
			t.Errorf("simulator volumes after the refused delete %v", got)
		}

		// No target: the step fails saying so, and sends nothing.
		mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", map[string]any{}), 204)
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}), 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create_configuration", nil))}, 202)
		n = waitState(t, admin, id, "clean failed")
		if want := "Step raid.create_configuration failed: node " + id + " has no target RAID configuration. Its owner or an operator must set one (API: PUT /v1/nodes/" + id + "/states/raid)"; n["last_error"] != want {
			t.Errorf("empty target last_error %q, want %q", n["last_error"], want)
		}
		if got := len(volumePosts(t, sim)); got != 1 {
			t.Errorf("%d volume POSTs after the empty target, want the first only", got)
		}
	})
}

// TestRAIDOnIPMINeedsTheAgent: an ipmi node's RAID (raid interface
// agent) is the agent's software RAID; a node that cannot boot the agent
// has the run refused before any step, naming the step and what the
// node lacks, and nothing is done to the machine.
func TestRAIDOnIPMINeedsTheAgent(t *testing.T) {
	ipmi := bmctest.Start(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin, member := clients["system-admin"], clients["owner-member"]
		target := map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": 100}}}
		body := map[string]any{"name": "raid-ipmi", "driver": "ipmi", "driver_info": ipmi.DriverInfo(bmctest.Password), "raid_interface": "agent", "owner": "own"}
		r := admin.Do(t, "POST", "/v1/nodes", body)
		mustStatus(t, r, 201)
		ipmiID := r.JSON(t)["uuid"].(string)
		provision(t, admin, ipmiID, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, ipmiID, "manageable")
		mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+ipmiID+"/states/raid", target), 204)
		provision(t, admin, ipmiID, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create_configuration", nil))}, 202)
		n := waitState(t, admin, ipmiID, "clean failed")
		if e, _ := n["last_error"].(string); !strings.HasPrefix(e, "Step raid.create_configuration runs in the ramdisk agent, which node "+ipmiID+" cannot boot") || !strings.Contains(e, "deploy_kernel") {
			t.Errorf("ipmi last_error %q", n["last_error"])
		}
		// Nothing was done to the machine.
		if got := ipmi.Events(); len(got) != 0 {
			t.Errorf("ipmi simulator saw %v", got)
		}
	})
}
