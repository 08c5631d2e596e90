package api_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// agentInspectNode enrols a redfish node of sim's first system with the
// agent inspect interface and boots from virtual media, without its
// deploy_iso, and makes it manageable.
func agentInspectNode(t *testing.T, admin *servertest.Client, sim *bmctest.Redfish) string {
	t.Helper()
	sys := sim.Systems[0]
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "inspected", "driver": "redfish",
		"boot_interface": "redfish-virtual-media", "inspect_interface": "agent",
		"driver_info": map[string]any{"redfish_address": sim.URL, "redfish_system_id": sim.SystemPath(sys.ID),
			"redfish_username": "admin", "redfish_password": "password", "redfish_verify_ca": sim.CAPEM}})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	return id
}

// TestAgentInspect is in-band inspection with the real agent: the
// machine boots the agent from virtual media, the agent posts its
// inventory to /v1/continue_inspection, which finds the node by its BMC
// address (it has no ports yet), and the node ends manageable with the
// inventory stored, ports for its NICs, properties filled, the machine
// off and the agent gone.
func TestAgentInspect(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		// An operator's deploy_iso carries no token for the inventory's
		// call-back: its inventory is taken only with discovery on.
		srv, cs := startLocal(t, setting, server.Options{Conductor: conductor.Config{Agent: conductor.AgentConfig{Discovery: true}}})
		admin := cs["system-admin"]
		rack := agenttest.NewRack(t, srv.URL)
		rack.InspectionURL(t, srv.URL+"/v1/continue_inspection")
		sim := bmctest.StartRedfish(t, rack.Env()...)
		sys := sim.Systems[0]
		disk := rack.Machine(t, sys.ID)
		id := agentInspectNode(t, admin, sim)

		// Without deploy_iso the agent cannot boot: refused at once,
		// naming what is missing, and validate says the same.
		wantFault(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "inspect"}), 400, "deploy_iso")
		v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)
		if ins := v["inspect"].(map[string]any); ins["result"] != false || !strings.Contains(ins["reason"].(string), "deploy_iso") {
			t.Errorf("validate inspect without deploy_iso: %v", ins)
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/driver_info/deploy_iso", "value": servertest.ServeISO(t)}}), 200)
		v = admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)
		for _, iface := range []string{"boot", "inspect"} {
			if v[iface].(map[string]any)["result"] != true {
				t.Errorf("validate %s with deploy_iso: %v", iface, v[iface])
			}
		}

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n := waitFor(t, admin, id, "manageable", rack)
		if n["power_state"] != "power off" {
			t.Errorf("after inspection power is %v", n["power_state"])
		}
		if !rack.Stopped(sys.ID, 20*time.Second) {
			t.Error("the agent still runs after inspection")
		}
		props, _ := n["properties"].(map[string]any)
		// simhw's defaults: 8 CPUs, 16384 MiB.
		if props["cpus"] != float64(8) || props["memory_mb"] != float64(16384) || props["cpu_arch"] != "x86_64" {
			t.Errorf("properties %v", props)
		}
		// As Ironic's node update: finished set, started cleared.
		if n["inspection_started_at"] != nil || n["inspection_finished_at"] == nil {
			t.Errorf("inspection times %v %v", n["inspection_started_at"], n["inspection_finished_at"])
		}
		dii := internal(t, admin, id)
		for _, k := range []string{"agent_url", "agent_secret_token", "lookup_bmc_addresses", "inspection_data_received"} {
			if dii[k] != nil {
				t.Errorf("driver_internal_info keeps %s after inspection: %v", k, dii[k])
			}
		}

		// The inventory is the agent's: the loop disk and the system's
		// MACs.
		inv := admin.Do(t, "GET", "/v1/nodes/"+id+"/inventory", nil)
		mustStatus(t, inv, 200)
		doc := inv.JSON(t)["inventory"].(map[string]any)
		var disks []string
		for _, d := range doc["disks"].([]any) {
			disks = append(disks, d.(map[string]any)["name"].(string))
		}
		if !slices.Contains(disks, disk) {
			t.Errorf("inventory disks %v, want %s", disks, disk)
		}
		var macs []string
		for _, x := range doc["interfaces"].([]any) {
			macs = append(macs, x.(map[string]any)["mac_address"].(string))
		}
		want := slices.Clone(sys.MACs)
		for i := range want {
			want[i] = strings.ToLower(want[i])
		}
		slices.Sort(macs)
		slices.Sort(want)
		if len(want) == 0 || !slices.Equal(macs, want) {
			t.Errorf("inventory MACs %v, system's %v", macs, want)
		}
		// A port for each MAC.
		var ports []string
		for _, p := range admin.Do(t, "GET", "/v1/ports?node_uuid="+id, nil).JSON(t)["ports"].([]any) {
			ports = append(ports, p.(map[string]any)["address"].(string))
		}
		slices.Sort(ports)
		if !slices.Equal(ports, want) {
			t.Errorf("ports %v, want %v", ports, want)
		}

		// The node no longer waits: the same inventory again finds
		// nothing.
		again := map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": want[0]}}, "bmc_address": "127.0.0.1"}}
		wantFault(t, cs["anonymous"].Do(t, "POST", "/v1/continue_inspection", again), 404, "could not be found")
	})
}

// TestAgentInspectTimeout: a machine that never boots an agent (the
// rack has no machine for its system) leaves its node in inspect wait
// until BootTimeout, which ends it in inspect failed naming the timeout,
// with the machine off.
func TestAgentInspectTimeout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting, server.Options{Conductor: conductor.Config{Agent: conductor.AgentConfig{BootTimeout: 15 * time.Second}}})
		admin := cs["system-admin"]
		rack := agenttest.NewRack(t, srv.URL)
		sim := bmctest.StartRedfish(t, rack.Env()...)
		id := agentInspectNode(t, admin, sim)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/driver_info/deploy_iso", "value": servertest.ServeISO(t)}}), 200)

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		var n map[string]any
		waited := false
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			n = admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			if n["provision_state"] == "inspect wait" {
				waited = true
			} else if n["provision_state"] != "inspecting" {
				break
			}
		}
		if !waited {
			t.Error("the node never waited in inspect wait")
		}
		if n["provision_state"] != "inspect failed" || n["target_provision_state"] != nil {
			t.Fatalf("node is %v (target %v), want inspect failed", n["provision_state"], n["target_provision_state"])
		}
		if e, _ := n["last_error"].(string); !strings.Contains(e, "15s") || !strings.Contains(e, "continue_inspection") {
			t.Errorf("last_error %q does not name the timeout", e)
		}
		if n["power_state"] != "power off" {
			t.Errorf("after the timeout power is %v", n["power_state"])
		}
		if dii := internal(t, admin, id); dii["lookup_bmc_addresses"] != nil {
			t.Errorf("driver_internal_info keeps the lookup addresses: %v", dii)
		}
	})
}
