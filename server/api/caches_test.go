package api_test

import (
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestCachesRefreshedAroundCleaning: a BIOS setting and a BIOS update
// made at the BMC itself, outside Anvil, show in /bios and /firmware
// after the next clean, which re-reads both at its start and end as
// Ironic's node_update_cache does; before it, they show what manage read.
func TestCachesRefreshedAroundCleaning(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1")
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "cache-1", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		turbo := func() any {
			return admin.Do(t, "GET", "/v1/nodes/"+id+"/bios/ProcTurboMode", nil).JSON(t)["ProcTurboMode"].(map[string]any)["value"]
		}
		before := firmwareBy(t, admin, id)["bios"]["current_version"]
		if turbo() != "Enabled" || before == nil {
			t.Fatalf("after manage: ProcTurboMode %v, bios version %v", turbo(), before)
		}

		// At the BMC: a setting staged and applied by a reset, and a BIOS
		// image flashed.
		if st := sim.Send(t, "PATCH", sim.SystemPath("1")+"/BIOS/Settings", map[string]any{"Attributes": map[string]any{"ProcTurboMode": "Disabled"}}); st/100 != 2 {
			t.Fatalf("staging a BIOS setting on the simulator: %d", st)
		}
		if st := sim.Send(t, "POST", sim.SystemPath("1")+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "On"}); st/100 != 2 {
			t.Fatalf("power on at the simulator: %d", st)
		}
		if st := sim.Send(t, "POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
			map[string]any{"ImageURI": "http://192.0.2.1/bios.bin", "Targets": []string{sim.SystemPath("1")}}); st != 202 {
			t.Fatalf("SimpleUpdate on the simulator: %d", st)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			cur, _ := sim.BIOS(t, "1")
			if cur["ProcTurboMode"] == "Disabled" && sim.Resource(t, sim.SystemPath("1"))["BiosVersion"] != before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the simulator never applied the setting and the update: %v", cur["ProcTurboMode"])
			}
			time.Sleep(200 * time.Millisecond)
		}
		if turbo() != "Enabled" || firmwareBy(t, admin, id)["bios"]["current_version"] != before {
			t.Fatal("the caches changed before any clean: nothing should have read the BMC")
		}

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil))}, 202)
		waitState(t, admin, id, "manageable")
		want := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]
		if got := turbo(); got != "Disabled" {
			t.Errorf("after clean: ProcTurboMode %v, want the BMC's Disabled", got)
		}
		if got := firmwareBy(t, admin, id)["bios"]; got["current_version"] != want || got["initial_version"] != before {
			t.Errorf("after clean: bios firmware %v, want current %v (the BMC's) and initial %v", got, want, before)
		}
	})
}
