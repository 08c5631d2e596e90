package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestResetBMCWaitsForTheBMC: reset_bmc ends only once the restarted BMC
// answers again, so the next step finds it. The Redfish simulator answers
// 503 for 6 s after its manager's Reset; the power_on after it must reach
// the BMC after those 503s and succeed. ipmi_sim refuses a warm reset
// ("Invalid command"); the step falls back to a cold one and succeeds.
func TestResetBMCWaitsForTheBMC(t *testing.T) {
	ipmi := bmctest.Start(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_BMC_RESET_DOWNTIME=6")
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]

		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "reset-rf", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		before := len(sim.Requests(t))
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "reset_bmc", nil), step("power", "power_on", nil))}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil || sim.Power(t, "1") != "On" {
			t.Fatalf("after reset_bmc and power_on: last_error %v, simulator power %s", n["last_error"], sim.Power(t, "1"))
		}
		// At the simulator: the manager's reset, the 503s while it was
		// down, then the power action, answered.
		reqs := sim.Requests(t)[before:]
		reset := slices.IndexFunc(reqs, func(s string) bool { return strings.Contains(s, "/Managers/") && strings.Contains(s, "Reset") })
		down := slices.IndexFunc(reqs, func(s string) bool { return strings.HasSuffix(s, " 503") })
		power := slices.IndexFunc(reqs, func(s string) bool {
			return strings.HasPrefix(s, "POST ") && strings.Contains(s, "/Systems/1/Actions/ComputerSystem.Reset") && !strings.HasSuffix(s, " 503")
		})
		if reset < 0 || down < reset || power < down {
			t.Errorf("simulator saw reset at %d, first 503 at %d, power on at %d: %v", reset, down, power, reqs)
		}

		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "reset-ipmi", "driver": "ipmi", "driver_info": ipmi.DriverInfo(bmctest.Password)})
		mustStatus(t, r, 201)
		ipmiID := r.JSON(t)["uuid"].(string)
		provision(t, admin, ipmiID, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, ipmiID, "manageable")
		provision(t, admin, ipmiID, map[string]any{"target": "clean", "clean_steps": steps(step("management", "reset_bmc", nil))}, 202)
		if n := waitState(t, admin, ipmiID, "manageable"); n["last_error"] != nil {
			t.Errorf("ipmi reset_bmc: %v", n["last_error"])
		}
	})
}
