package api_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/ramdisk"
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

// TestAgentInspectTimeout: a machine whose agent heartbeats but never
// posts an inventory (a stand-in agent on the API) leaves its node in
// inspect wait until --inspect-wait-timeout, which ends it in inspect
// failed naming the timeout, with the machine off and the agent's keys
// forgotten. The agent boot timeout is far longer: the inspection's own
// timeout is the one that counts, and heartbeats do not extend it.
func TestAgentInspectTimeout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting, server.Options{Conductor: conductor.Config{Agent: conductor.AgentConfig{
			BootTimeout: time.Hour, InspectWaitTimeout: 15 * time.Second}}})
		admin := cs["system-admin"]
		rack := agenttest.NewRack(t, srv.URL)
		sim := bmctest.StartRedfish(t, rack.Env()...)
		id := agentInspectNode(t, admin, sim)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/driver_info/deploy_iso", "value": servertest.ServeISO(t)}}), 200)

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		var n map[string]any
		beats := 0
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			n = admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			if n["provision_state"] == "inspect wait" {
				if standInHeartbeat(t, srv, id) {
					beats++
				}
			} else if n["provision_state"] != "inspecting" {
				break
			}
		}
		if beats < 2 {
			t.Errorf("the stand-in agent heartbeated %d times in inspect wait, want at least 2", beats)
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
		dii := internal(t, admin, id)
		for _, k := range []string{"lookup_bmc_addresses", "agent_secret_token", "agent_url"} {
			if dii[k] != nil {
				t.Errorf("driver_internal_info keeps %s after the timeout: %v", k, dii[k])
			}
		}
	})
}

// standInHeartbeat heartbeats for node id as its agent would, with the
// token the node holds (from its boot medium) or, when it has none yet,
// one a lookup issues; it reports whether the heartbeat was accepted.
func standInHeartbeat(t *testing.T, srv *servertest.Server, id string) bool {
	t.Helper()
	cur, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ag := srv.Client()
	tok, _ := cur.DriverInternalInfo[ramdisk.KeyToken].(string)
	if tok == "" {
		r := ag.Do(t, "GET", "/v1/lookup?node_uuid="+id, nil)
		if r.Status != 200 {
			return false
		}
		tok, _ = lookupToken(t, r).(string)
	}
	r := ag.Do(t, "POST", "/v1/heartbeat/"+id, beat("http://127.0.0.1:9999", tok))
	return r.Status == 202
}

// TestAgentInspectAbort: abort from inspect wait works from 1.41 as in
// Ironic (406 before): the node ends in inspect failed saying so, the
// machine off, its virtual CD ejected and the agent's keys forgotten,
// the abort audited; abort in any other inspection state is a 409.
func TestAgentInspectAbort(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting, server.Options{Conductor: conductor.Config{Agent: conductor.AgentConfig{InspectWaitTimeout: time.Hour}}})
		admin := cs["system-admin"]
		rack := agenttest.NewRack(t, srv.URL)
		sim := bmctest.StartRedfish(t, rack.Env()...)
		id := agentInspectNode(t, admin, sim)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/driver_info/deploy_iso", "value": servertest.ServeISO(t)}}), 200)
		abort := map[string]any{"target": "abort"}
		// Not in an inspection: nothing to abort.
		wantFault(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", abort), 409, "manageable")

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			if n["provision_state"] == "inspect wait" {
				break
			}
			if n["provision_state"] != "inspecting" || time.Now().After(deadline) {
				t.Fatalf("node is %v, want inspect wait", n["provision_state"])
			}
		}
		// The node waits before the machine boots (an agent may post at
		// once): the CD goes in a moment later.
		for deadline := time.Now().Add(30 * time.Second); sim.Resource(t, sim.SystemPath("1")+"/VirtualMedia/Cd")["Inserted"] != true; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the agent's CD is not inserted while the node waits")
			}
		}
		standInHeartbeat(t, srv, id)
		wantFault(t, at(admin, "1.40").Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", abort), 406, "1.41")
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "inspect wait" {
			t.Fatalf("a refused abort moved the node to %v", n["provision_state"])
		}
		mustStatus(t, at(admin, "1.41").Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", abort), 202)
		n := waitState(t, admin, id, "inspect failed")
		if e, _ := n["last_error"].(string); !strings.Contains(e, "aborted") {
			t.Errorf("last_error %q does not say the inspection was aborted", e)
		}
		if n["power_state"] != "power off" || sim.Power(t, "1") != "Off" {
			t.Errorf("after the abort power is %v (BMC %s)", n["power_state"], sim.Power(t, "1"))
		}
		if cd := sim.Resource(t, sim.SystemPath("1")+"/VirtualMedia/Cd"); cd["Inserted"] == true {
			t.Errorf("the agent's CD is still inserted after the abort: %v", cd)
		}
		dii := internal(t, admin, id)
		for _, k := range []string{"agent_secret_token", "agent_url", "lookup_bmc_addresses", "abort_requested"} {
			if dii[k] != nil {
				t.Errorf("driver_internal_info keeps %s after the abort: %v", k, dii[k])
			}
		}
		var aborted bool
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			ev := e.(map[string]any)
			if strings.Contains(fmt.Sprint(ev["event"]), "aborted by request") && ev["severity"] == "ERROR" {
				aborted = true
			}
		}
		if !aborted {
			t.Error("the node's history does not record the abort")
		}
		// From inspect failed there is nothing left to abort; inspect
		// again works.
		wantFault(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", abort), 409, "inspect failed")
	})
}
