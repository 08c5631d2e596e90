package api_test

import (
	"context"
	"fmt"
	"github.com/anvilproject/anvil/ent"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func settings(kv ...any) map[string]any {
	var list []any
	for i := 0; i < len(kv); i += 2 {
		list = append(list, map[string]any{"name": kv[i], "value": kv[i+1]})
	}
	return map[string]any{"settings": list}
}

// startedSteps lists the steps a node's history says started, oldest first.
func startedSteps(t *testing.T, c *servertest.Client, id string) []string {
	t.Helper()
	var out []string
	for _, e := range c.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
		if msg := e.(map[string]any)["event"].(string); strings.HasPrefix(msg, "Step ") && strings.Contains(msg, "started") {
			out = append(out, strings.Fields(msg)[1])
		}
	}
	return out
}

// TestStepsAsIronic: any step of Ironic's step interfaces may be stored
// in a runbook or asked for; a step the node's driver does not run fails
// the run before its first step, naming the step and the driver.
func TestStepsAsIronic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		ironic := []map[string]any{
			{"interface": "raid", "step": "create_configuration", "order": 1, "args": map[string]any{"create_nonroot_volumes": true}},
			{"interface": "deploy", "step": "erase_devices_metadata", "order": 2},
			{"interface": "firmware", "step": "update", "order": 3, "args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "http://x/bios.bin"}}}},
			{"interface": "bios", "step": "apply_configuration", "order": 4, "args": settings("ProcTurboMode", "Disabled")},
			{"interface": "vendor", "step": "anything_at_all", "order": 5},
		}
		r := admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_FROM_IRONIC", "steps": ironic})
		mustStatus(t, r, 201)
		if got := len(admin.Do(t, "GET", "/v1/runbooks/CUSTOM_FROM_IRONIC", nil).JSON(t)["steps"].([]any)); got != len(ironic) {
			t.Fatalf("stored %d of %d steps", got, len(ironic))
		}

		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "ironic-1", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		for _, c := range []struct {
			step map[string]any
			want string
		}{
			{step("management", "clear_job_queue", nil), "Step management.clear_job_queue is not supported by driver fake-hardware."},
			{step("deploy", "erase_devices_metadata", nil), "Step deploy.erase_devices_metadata runs in the ramdisk agent, and driver fake-hardware has no machine to boot one on."},
		} {
			provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil), c.step)}, 202)
			n := waitState(t, admin, id, "clean failed")
			if n["last_error"] != c.want || n["power_state"] != "power off" {
				t.Errorf("last_error %q power %v; want %q with power untouched", n["last_error"], n["power_state"], c.want)
			}
			if s := startedSteps(t, admin, id); len(s) != 0 {
				t.Errorf("steps ran before the refusal: %v", s)
			}
			provision(t, admin, id, map[string]any{"target": "manage"}, 202)
			waitState(t, admin, id, "manageable")
		}

		// The fake driver runs the BIOS steps against its in-memory BIOS.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("bios", "apply_configuration", settings("ProcTurboMode", "Disabled", "PowerOnDelaySec", 30)))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil || n["power_state"] != "power on" {
			t.Fatalf("BIOS on the fake: last_error %v power %v", n["last_error"], n["power_state"])
		}
		if s := admin.Do(t, "GET", "/v1/nodes/"+id+"/bios/PowerOnDelaySec", nil).JSON(t)["PowerOnDelaySec"].(map[string]any); s["value"] != "30" {
			t.Errorf("cached PowerOnDelaySec %v", s)
		}

		// The fake driver is inspected out of band too.
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		if p := waitState(t, admin, id, "manageable")["properties"].(map[string]any); p["cpus"] != float64(32) || p["capabilities"] != "boot_mode:uefi" {
			t.Errorf("fake inspection: properties %v", p)
		}

		// Every catalogued step runs on the fake driver, so demos and
		// benchmarks can use any of them.
		samples := map[string]map[string]any{
			"management.set_boot_device":      {"device": "pxe"},
			"deploy.wait":                     {"seconds": 0},
			"bios.apply_configuration":        settings("MemTest", "Enabled"),
			"firmware.update":                 {"settings": []any{map[string]any{"component": "bios", "url": "http://example.com/bios.bin"}}},
			"management.attach_virtual_media": {"image_url": "http://example.com/boot.iso"},
			"management.set_boot_mode":        {"mode": "uefi"},
			"management.set_secure_boot":      {"enabled": true},
			"raid.apply_configuration":        {"raid_config": map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": 100}}}},
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": 100}}}), 204)
		var all []map[string]any
		var want []string
		for _, s := range conductor.StepsFor(&ent.Node{Driver: "fake-hardware"}) {
			if s.Name() == "deploy.hold" {
				continue
			}
			all = append(all, step(s.Interface, s.Step, samples[s.Name()]))
			want = append(want, s.Name())
		}
		all = append(all, step("deploy", "hold", nil))
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": all}, 202)
		waitState(t, admin, id, "clean hold")
		provision(t, admin, id, map[string]any{"target": "unhold"}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("every step on the fake: %v", n["last_error"])
		}
		ran := startedSteps(t, admin, id)
		if got := strings.Join(ran[len(ran)-len(want)-1:], ","); got != strings.Join(append(want, "deploy.hold"), ",") {
			t.Errorf("fake ran %s", got)
		}

		// The catalogue per driver, with arguments.
		cat := admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil).JSON(t)
		var names []string
		for _, s := range cat["steps"].([]any) {
			m := s.(map[string]any)
			names = append(names, fmt.Sprint(m["interface"], ".", m["step"]))
			if m["interface"] == "bios" && m["step"] == "apply_configuration" {
				a := m["args"].([]any)[0].(map[string]any)
				if a["name"] != "settings" || a["required"] != true || a["type"] != "list of {name, value}" {
					t.Errorf("apply_configuration's argument: %v", a)
				}
			}
		}
		if !strings.Contains(strings.Join(names, ","), "bios.apply_configuration") {
			t.Errorf("fake-hardware steps %v", names)
		}
	})
}

// TestBIOSOverRedfish applies, refuses and resets BIOS settings on the
// Redfish simulator through the API, and asks the simulator each time
// what its BIOS holds.
func TestBIOSOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin, member := clients["system-admin"], clients["lessee-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bios-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("bios", "apply_configuration", settings("ProcTurboMode", "Disabled", "PowerOnDelaySec", 30, "QuietBoot", false, "SysProfile", "PerfPerWattOptimizedDapc")))}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil || n["power_state"] != "power on" {
			t.Fatalf("apply: last_error %v power %v", n["last_error"], n["power_state"])
		}
		cur, pending := sim.BIOS(t, "1")
		if cur["ProcTurboMode"] != "Disabled" || cur["PowerOnDelaySec"] != float64(30) || cur["QuietBoot"] != false || len(pending) != 0 {
			t.Fatalf("simulator BIOS after apply: current %v pending %v", cur, pending)
		}
		if sim.Power(t, "1") != "On" {
			t.Errorf("simulator power %s after apply", sim.Power(t, "1"))
		}
		// The lessee reads the cache, refreshed after the step.
		list := member.Do(t, "GET", "/v1/nodes/"+id+"/bios", nil).JSON(t)["bios"].([]any)
		if len(list) != len(cur) {
			t.Errorf("cached %d settings, the BMC has %d", len(list), len(cur))
		}
		one := member.Do(t, "GET", "/v1/nodes/"+id+"/bios/ProcTurboMode", nil).JSON(t)["ProcTurboMode"].(map[string]any)
		if one["value"] != "Disabled" || one["created_at"] == nil {
			t.Errorf("cached ProcTurboMode %v", one)
		}
		mustStatus(t, member.Do(t, "GET", "/v1/nodes/"+id+"/bios/NoSuchThing", nil), 404)
		mustStatus(t, clients["other-admin"].Do(t, "GET", "/v1/nodes/"+id+"/bios", nil), 404)
		old := admin
		old.Version = "1.39"
		// Ironic's node lookup: 404 below 1.40 (test_get_all_bios_fails_with_bad_version).
		mustStatus(t, old.Do(t, "GET", "/v1/nodes/"+id+"/bios", nil), 404)
		old.Version = "latest"
		if f := admin.Do(t, "GET", "/v1/nodes/"+id+"/bios?fields=value,nope", nil).Fault(t); !strings.Contains(f, "nope") {
			t.Errorf("bad fields: %q", f)
		}

		// A value the BMC refuses fails the step and changes nothing.
		// last_error carries the failure's class; the BMC's own words
		// (which a tenant's address could make any host's) reach only
		// system readers, through the history event's detail.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("bios", "apply_configuration", settings("ProcTurboMode", "Sideways")))}, 202)
		n = waitState(t, admin, id, "clean failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "Step bios.apply_configuration failed") || !strings.Contains(le, "HTTP 400 from the BMC") || strings.Contains(le, "ProcTurboMode") {
			t.Errorf("refused setting: last_error %q", le)
		}
		for who, c := range map[string]*servertest.Client{"system-admin": admin, "lessee-member": member} {
			h := string(c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil).Body)
			if says := strings.Contains(h, "not valid for BIOS attribute ProcTurboMode"); says != (who == "system-admin") {
				t.Errorf("%s's history quotes the BMC: %v, want %v:\n%s", who, says, who == "system-admin", h)
			}
		}
		if cur, pending := sim.BIOS(t, "1"); cur["ProcTurboMode"] != "Disabled" || len(pending) != 0 {
			t.Errorf("after a refused setting: current %v pending %v", cur, pending)
		}
		// A step the BMC refused is a failed step: maintenance with
		// Ironic's fault, which refuses another clean until recovered.
		if n["maintenance"] != true || n["fault"] != "clean failure" {
			t.Errorf("after a refused setting: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("bios", "factory_reset", nil))}, 400)
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}), 202)
		if n := waitState(t, admin, id, "manageable"); n["maintenance"] != false || n["fault"] != nil {
			t.Errorf("after return: maintenance %v fault %v", n["maintenance"], n["fault"])
		}

		// Factory reset brings the defaults back, and the cache follows.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("bios", "factory_reset", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("factory_reset: %v", n["last_error"])
		}
		if cur, _ := sim.BIOS(t, "1"); cur["ProcTurboMode"] != "Enabled" || cur["PowerOnDelaySec"] != float64(0) {
			t.Errorf("simulator BIOS after factory_reset: %v", cur)
		}
		if s := admin.Do(t, "GET", "/v1/nodes/"+id+"/bios/ProcTurboMode", nil).JSON(t)["ProcTurboMode"].(map[string]any); s["value"] != "Enabled" || s["updated_at"] == nil {
			t.Errorf("cache after factory_reset: %v", s)
		}
	})
}

// TestInspectOverRedfish inspects a node out of band on the simulator:
// properties and inventory match what the simulator reports.
func TestInspectOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "insp-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"),
			"properties": map[string]any{"capabilities": "disk_label:gpt,boot_mode:bios", "vendor": "kept"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "inspect"}, 409)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		// Ironic's no-inspect refuses the request itself, changing nothing.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/inspect_interface","value":"no-inspect"}]`), 200)
		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "inspect"})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "does not support inspect") {
			t.Errorf("inspect with no-inspect: %d %s", r.Status, r.Body)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "manageable" || n["inspection_started_at"] != nil {
			t.Errorf("a refused inspect changed the node: %v, started %v", n["provision_state"], n["inspection_started_at"])
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/inspect_interface","value":"redfish"}]`), 200)

		before := time.Now().UTC().Add(-time.Second)
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil {
			t.Fatalf("inspection: %v", n["last_error"])
		}
		// The timestamps as Ironic's node update keeps them: finished
		// set, started cleared once inspection succeeds.
		if fin, _ := time.Parse(time.RFC3339, fmt.Sprint(n["inspection_finished_at"])); fin.Before(before) || n["inspection_started_at"] != nil {
			t.Errorf("after inspection: started %v finished %v", n["inspection_started_at"], n["inspection_finished_at"])
		}
		sys := sim.Resource(t, sim.SystemPath("1"))
		mem := sys["MemorySummary"].(map[string]any)["TotalSystemMemoryGiB"].(float64)
		threads := 0.0
		for _, m := range sim.Resource(t, sim.SystemPath("1")+"/Processors")["Members"].([]any) {
			threads += sim.Resource(t, m.(map[string]any)["@odata.id"].(string))["TotalThreads"].(float64)
		}
		var largest float64
		for _, m := range sim.Resource(t, sim.SystemPath("1")+"/Storage/1")["Drives"].([]any) {
			largest = max(largest, sim.Resource(t, m.(map[string]any)["@odata.id"].(string))["CapacityBytes"].(float64))
		}
		props := n["properties"].(map[string]any)
		want := map[string]any{"cpus": threads, "memory_mb": mem * 1024, "local_gb": float64(int64(largest)>>30 - 1), "cpu_arch": "x86_64", "vendor": "kept"}
		for k, v := range want {
			if props[k] != v {
				t.Errorf("properties[%s] = %v, want %v (all: %v)", k, props[k], v, props)
			}
		}
		if caps, _ := props["capabilities"].(string); !strings.HasPrefix(caps, "disk_label:gpt,boot_mode:") || strings.Count(caps, "boot_mode") != 1 {
			t.Errorf("capabilities %q", caps)
		}

		// The inventory records every NIC's MAC the simulator has.
		inv, err := db.NodeInventory.Query().Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var macs []string
		for _, x := range inv.Inventory["interfaces"].([]any) {
			macs = append(macs, x.(map[string]any)["mac_address"].(string))
		}
		var simMACs []string
		for _, m := range sim.Resource(t, sim.SystemPath("1")+"/EthernetInterfaces")["Members"].([]any) {
			simMACs = append(simMACs, strings.ToLower(sim.Resource(t, m.(map[string]any)["@odata.id"].(string))["MACAddress"].(string)))
		}
		slices.Sort(macs)
		slices.Sort(simMACs)
		if len(macs) == 0 || !slices.Equal(macs, simMACs) {
			t.Errorf("inventory MACs %v, simulator %v", macs, simMACs)
		}
		// The BIOS cache is filled by inspection too.
		if list := admin.Do(t, "GET", "/v1/nodes/"+id+"/bios", nil).JSON(t)["bios"].([]any); len(list) == 0 {
			t.Errorf("no BIOS settings cached by inspection")
		}
		// GET /inventory (1.81) serves what was stored; below 1.81 it is
		// not there, as Ironic's node controller answers.
		r = admin.Do(t, "GET", "/v1/nodes/"+id+"/inventory", nil)
		mustStatus(t, r, 200)
		var served []string
		for _, x := range r.JSON(t)["inventory"].(map[string]any)["interfaces"].([]any) {
			served = append(served, x.(map[string]any)["mac_address"].(string))
		}
		slices.Sort(served)
		if !slices.Equal(served, simMACs) {
			t.Errorf("served inventory MACs %v, simulator %v", served, simMACs)
		}
		old := admin.Version
		admin.Version = "1.80"
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/"+id+"/inventory", nil), 404)
		admin.Version = old

		// A BMC refusing the credentials fails inspection, saying so.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/driver_info/redfish_password","value":"wrong"}]`), 200)
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n = waitState(t, admin, id, "inspect failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "Inspection failed") || !strings.Contains(le, "credentials") {
			t.Errorf("last_error %q", le)
		}
		// Starting cleared finished and a failure clears started, as
		// Ironic's node update does.
		if n["inspection_started_at"] != nil || n["inspection_finished_at"] != nil {
			t.Errorf("after a failed inspection: started %v finished %v", n["inspection_started_at"], n["inspection_finished_at"])
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, fmt.Sprintf(`[{"op":"replace","path":"/driver_info/redfish_password","value":%q}]`, bmctest.RedfishPassword)), 200)
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		waitState(t, admin, id, "manageable")
	})
}

// TestVirtualMediaAndBootMode inserts and ejects an ISO and round-trips
// boot mode and secure boot through steps, checking each at the
// simulator.
func TestVirtualMediaAndBootMode(t *testing.T) {
	iso := servertest.ServeISO(t)
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vm-1", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		cd := func() map[string]any { return sim.Resource(t, sim.SystemPath("1")+"/VirtualMedia/Cd") }
		secure := func() any { return sim.Resource(t, sim.SystemPath("1")+"/SecureBoot")["SecureBootEnable"] }

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("management", "set_boot_mode", map[string]any{"mode": "uefi"}),
			step("management", "set_secure_boot", map[string]any{"enabled": true}),
			step("management", "attach_virtual_media", map[string]any{"image_url": iso}))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("attach: %v", n["last_error"])
		}
		if m := cd(); m["Inserted"] != true || m["Image"] != iso {
			t.Errorf("simulator Cd after attach: inserted %v image %v", m["Inserted"], m["Image"])
		}
		if _, mode, _ := sim.Boot(t, "1"); mode != "UEFI" || secure() != true {
			t.Errorf("simulator boot mode %s secure boot %v", mode, secure())
		}

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("management", "detach_virtual_media", nil),
			step("management", "set_secure_boot", map[string]any{"enabled": false}),
			step("management", "set_boot_mode", map[string]any{"mode": "bios"}))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("detach: %v", n["last_error"])
		}
		if m := cd(); m["Inserted"] != false {
			t.Errorf("simulator Cd after detach: inserted %v image %v", m["Inserted"], m["Image"])
		}
		if _, mode, _ := sim.Boot(t, "1"); mode != "Legacy" || secure() != false {
			t.Errorf("simulator boot mode %s secure boot %v", mode, secure())
		}

		// An image the BMC cannot fetch fails the step with its reason.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("management", "attach_virtual_media", map[string]any{"image_url": strings.TrimSuffix(iso, "boot.iso") + "missing.iso"}))}, 202)
		n := waitState(t, admin, id, "clean failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "Step management.attach_virtual_media failed") {
			t.Errorf("missing image: last_error %q", le)
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("management", "attach_virtual_media", map[string]any{"image_url": "ftp://x/y.iso"}))}, 400)
	})
}

// TestFirmwareOverRedfish updates BIOS and BMC firmware through
// SimpleUpdate, following the simulator's tasks, and checks the
// simulator's versions.
func TestFirmwareOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1")
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "fw-1", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		fwSettings := func(url string) map[string]any {
			return map[string]any{"settings": []any{
				map[string]any{"component": "bios", "url": url + "/bios.bin", "wait": 1},
				map[string]any{"component": "bmc", "url": url + "/bmc.bin"},
			}}
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", fwSettings("http://127.0.0.1:9")))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("firmware update: %v", n["last_error"])
		}
		bios := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]
		bmcVer := sim.Resource(t, "/redfish/v1/Managers/1")["FirmwareVersion"]
		if bios != "1.1.0" || bmcVer != "1.01" {
			t.Errorf("simulator versions after update: BIOS %v BMC %v", bios, bmcVer)
		}
		var found bool
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			if e.(map[string]any)["event"] == "Firmware versions: bios 1.0.0 -> 1.1.0, bmc 1.00 -> 1.01" {
				found = true
			}
		}
		if !found {
			t.Errorf("no history event with the old and new versions")
		}
		// The BIOS update rebooted the machine after it was posted, as
		// Ironic does: BMCs apply BIOS images at the next POST.
		var posted, reset bool
		for _, b := range sim.Bodies(t) {
			posted = posted || (strings.Contains(b, "SimpleUpdate") && strings.Contains(b, sim.SystemPath("1")))
			reset = reset || (posted && strings.Contains(b, "ComputerSystem.Reset"))
		}
		if !reset {
			t.Errorf("no ComputerSystem.Reset after the BIOS update: %v", sim.Bodies(t))
		}

		// A task ending in an exception fails the step; the BMC's own
		// message goes to the history detail, for operators.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": []any{
			map[string]any{"component": "bios", "url": "http://127.0.0.1:9/fail.bin"}}}))}, 202)
		n := waitState(t, admin, id, "clean failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "Step firmware.update failed: the BMC answered with an error: the bios firmware update ended in Exception") {
			t.Errorf("failed update: last_error %q", le)
		}
		if v := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]; v != "1.1.0" {
			t.Errorf("BIOS version %v after a failed update", v)
		}
	})
}

// TestInspectCreatesPorts: inspection over Redfish gives the node a port
// for each of the simulator's NICs, pxe_enabled false as Ironic's ports
// hook creates them; a second inspection adds none and keeps the ports,
// and a MAC another node's port has is skipped, not moved.
func TestInspectCreatesPorts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		var macs []string
		for _, m := range sim.Resource(t, sim.SystemPath("1")+"/EthernetInterfaces")["Members"].([]any) {
			macs = append(macs, strings.ToLower(sim.Resource(t, m.(map[string]any)["@odata.id"].(string))["MACAddress"].(string)))
		}
		slices.Sort(macs)
		if len(macs) < 2 {
			t.Fatalf("the simulator has %d NICs", len(macs))
		}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "insp-ports", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		ports := func() map[string]string {
			r := admin.Do(t, "GET", "/v1/nodes/"+id+"/ports?detail=true", nil)
			mustStatus(t, r, 200)
			out := map[string]string{}
			for _, x := range r.JSON(t)["ports"].([]any) {
				p := x.(map[string]any)
				if p["pxe_enabled"] != false {
					t.Errorf("port %v: pxe_enabled %v", p["address"], p["pxe_enabled"])
				}
				out[p["address"].(string)] = p["uuid"].(string)
			}
			return out
		}
		inspect := func() {
			t.Helper()
			provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
			if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
				t.Fatalf("inspection: %v", n["last_error"])
			}
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		inspect()
		first := ports()
		if got := slices.Sorted(maps.Keys(first)); !slices.Equal(got, macs) {
			t.Fatalf("ports after inspection %v, simulator NICs %v", got, macs)
		}
		inspect()
		if again := ports(); !maps.Equal(again, first) {
			t.Errorf("re-inspection changed the ports: %v, was %v", again, first)
		}

		// The first NIC's MAC moves to another node's port meanwhile.
		mustStatus(t, admin.Do(t, "DELETE", "/v1/ports/"+first[macs[0]], nil), 204)
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "other", "driver": "fake"})
		mustStatus(t, r, 201)
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": r.JSON(t)["uuid"], "address": macs[0]}), 201)
		inspect()
		if got := slices.Sorted(maps.Keys(ports())); !slices.Equal(got, macs[1:]) {
			t.Errorf("ports after the MAC moved: %v, want %v", got, macs[1:])
		}
		h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil)
		if !strings.Contains(string(h.Body), "another node has a port for "+macs[0]) {
			t.Errorf("history does not note the taken MAC: %s", h.Body)
		}
		auditedRule(t, clients["system-reader"], "baremetal:port:create")
	})
}
