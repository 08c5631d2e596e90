package api_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// fwOpts is bmcOpts with the unresponsive BMC waited out for wait.
func fwOpts(wait time.Duration) server.Options {
	o := bmcOpts
	o.Conductor.FirmwareUnresponsiveBMCWait = wait
	return o
}

// fwClean enrols a redfish node at info, manages it and cleans it with
// firmware.update over settings, returning the node as the clean left it.
func fwClean(t *testing.T, admin *servertest.Client, info map[string]any, want string, settings ...map[string]any) (string, map[string]any) {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "driver_info": info})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	list := make([]any, len(settings))
	for i, s := range settings {
		list[i] = s
	}
	provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": list}))}, 202)
	return id, waitState(t, admin, id, want)
}

// TestFirmwareBMCFlashRidesOutRestart flashes the BMC of redfish-sim
// through a proxy that restarts the simulator's BMC (Manager.Reset, then
// 503 for SIM_BMC_RESET_DOWNTIME) as the task completes, as a real BMC
// restarts after its flash: the step waits it out and succeeds with the
// manager's new version. A failing image then fails the clean naming
// the component.
func TestFirmwareBMCFlashRidesOutRestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1", "SIM_BMC_RESET_DOWNTIME=4")
		proxy := sim.ProxyResettingBMC(t)
		_, clients := startLocal(t, setting, fwOpts(20*time.Second))
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		old := sim.Resource(t, "/redfish/v1/Managers/1")["FirmwareVersion"]
		id, n := fwClean(t, admin, proxy.DriverInfo("1"), "manageable", map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/bmc.bin"})
		if n["last_error"] != nil {
			t.Fatalf("bmc flash: %v", n["last_error"])
		}
		if got := proxy.Resets(); len(got) != 1 || got[0] != "/redfish/v1/Managers/1" {
			t.Fatalf("the proxy reset %v, want the manager once", got)
		}
		// The step met the restarting BMC: the simulator answered it 503.
		var unavailable bool
		for _, r := range sim.Requests(t) {
			unavailable = unavailable || strings.HasSuffix(r, " 503")
		}
		if !unavailable {
			t.Error("no request met the restarting BMC (503)")
		}
		now := sim.Resource(t, "/redfish/v1/Managers/1")["FirmwareVersion"]
		if now == old {
			t.Fatalf("simulator manager version unchanged: %v", now)
		}
		if b := firmwareBy(t, admin, id)["bmc"]; b["current_version"] != now || b["last_version_flashed"] != now || b["initial_version"] != old {
			t.Errorf("bmc firmware: %v, want %v flashed over %v", b, now, old)
		}

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": []any{
			map[string]any{"component": "bios", "url": "http://127.0.0.1:9/fail-bios.bin"}}}))}, 202)
		n = waitState(t, admin, id, "clean failed")
		if e, _ := n["last_error"].(string); !strings.Contains(e, "bios firmware update ended in Exception") {
			t.Errorf("failing image: last_error %q, want the bios update's exception", e)
		}
	})
}

// TestFirmwareUnresponsiveBMCFails: a BMC that stays away after its
// flash (60 s of 503) longer than --firmware-unresponsive-bmc-wait (2 s)
// fails the clean naming the wait.
func TestFirmwareUnresponsiveBMCFails(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1", "SIM_BMC_RESET_DOWNTIME=60")
		proxy := sim.ProxyResettingBMC(t)
		_, clients := startLocal(t, setting, fwOpts(2*time.Second))
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		_, n := fwClean(t, admin, proxy.DriverInfo("1"), "clean failed", map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/bmc.bin"})
		e, _ := n["last_error"].(string)
		if !strings.Contains(e, "did not answer") || !strings.Contains(e, "waited 2s") || !strings.Contains(e, "firmware-unresponsive-bmc-wait") || !strings.Contains(e, "bmc firmware update") {
			t.Errorf("last_error %q, want the bmc update failed naming the 2s wait", e)
		}
		if len(proxy.Resets()) != 1 {
			t.Errorf("the proxy reset %v, want the manager once", proxy.Resets())
		}
	})
}

// TestFirmwareStagedBIOS: a BMC that stages a BIOS image until the next
// POST, reporting it as iDRAC does (task Pending) or as iLO does (task
// Completed at once): the step reboots the machine, the BMC applies the
// image, and the new version is recorded.
func TestFirmwareStagedBIOS(t *testing.T) {
	for _, stage := range []string{"pending", "completed"} {
		t.Run(stage, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				fake := bmctest.StartFirmwareBMC(t, "location", stage)
				_, clients := startLocal(t, setting, fwOpts(10*time.Second))
				admin := atVer(clients["system-admin"], api.VerFirmwareIface)
				id, n := fwClean(t, admin, fake.DriverInfo(), "manageable", map[string]any{"component": "bios", "url": "http://127.0.0.1:9/bios.bin"})
				if n["last_error"] != nil {
					t.Fatalf("bios update: %v", n["last_error"])
				}
				if got := fake.Resets(); !slices.ContainsFunc(got, func(s string) bool { return s == "On" || s == "ForceRestart" }) {
					t.Errorf("resets %v: the machine was never started to apply the BIOS", got)
				}
				if bios, _, _ := fake.Versions(); bios != "1.1.0" {
					t.Errorf("fake BIOS %s after the step, want 1.1.0", bios)
				}
				if b := firmwareBy(t, admin, id)["bios"]; b["initial_version"] != "1.0.0" || b["current_version"] != "1.1.0" || b["last_version_flashed"] != "1.1.0" {
					t.Errorf("bios firmware: %v", b)
				}
			})
		})
	}
}

// TestFirmwareTaskReferencesAndNIC: SimpleUpdate answers with no
// Location, naming its task only by the body's @odata.id or only by a
// TaskMonitor; the step follows either to the end. The settings flash
// the BMC and the NIC: the NIC's update targets its NetworkAdapter, the
// machine reboots after it, and its version is recorded under
// nic:<serial>.
func TestFirmwareTaskReferencesAndNIC(t *testing.T) {
	for reply, followed := range map[string]string{"odata": "GET /redfish/v1/TaskService/Tasks/", "monitor": "GET /redfish/v1/TaskService/TaskMonitors/"} {
		t.Run(reply, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				fake := bmctest.StartFirmwareBMC(t, reply, "pending")
				_, clients := startLocal(t, setting, fwOpts(10*time.Second))
				admin := atVer(clients["system-admin"], api.VerFirmwareIface)
				nic := "nic:" + bmctest.FakeNICSerial
				id, n := fwClean(t, admin, fake.DriverInfo(), "manageable",
					map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/bmc.bin", "wait": 5},
					map[string]any{"component": nic, "url": "http://127.0.0.1:9/nic.bin"})
				if n["last_error"] != nil {
					t.Fatalf("update: %v", n["last_error"])
				}
				var polled int
				for _, r := range fake.Requests() {
					if strings.HasPrefix(r, followed) {
						polled++
					}
				}
				if polled < 2 {
					t.Errorf("%d requests %s…, want the step to follow both tasks there", polled, followed)
				}
				want := fmt.Sprintf(`"Targets":[%q]`, "/redfish/v1/Chassis/1/NetworkAdapters/NIC.Slot.1")
				if !slices.ContainsFunc(fake.Bodies(), func(b string) bool { return strings.Contains(b, "SimpleUpdate") && strings.Contains(b, want) }) {
					t.Errorf("no SimpleUpdate targeted the adapter: %v", fake.Bodies())
				}
				if len(fake.Resets()) == 0 {
					t.Error("no reboot after the NIC update")
				}
				_, bmcV, nicV := fake.Versions()
				if bmcV != "1.01" || nicV != "20.0.2" {
					t.Fatalf("fake versions bmc %s nic %s", bmcV, nicV)
				}
				fw := firmwareBy(t, admin, id)
				if b := fw[nic]; b["initial_version"] != "20.0.1" || b["current_version"] != "20.0.2" || b["last_version_flashed"] != "20.0.2" {
					t.Errorf("%s firmware: %v (all: %v)", nic, b, fw)
				}
				if b := fw["bmc"]; b["current_version"] != "1.01" || b["last_version_flashed"] != "1.01" {
					t.Errorf("bmc firmware: %v", b)
				}
				if api.VerMax >= api.VerFirmwareIdentity {
					if b := firmwareBy(t, atVer(admin, api.VerFirmwareIdentity), id)[nic]; b["vendor"] != "Acme" || b["model"] != "X710" || b["serial_number"] != bmctest.FakeNICSerial {
						t.Errorf("%s identity at 1.114: %v", nic, b)
					}
				}
			})
		})
	}
}

// TestFirmwareUnchangedAndUnknown: a BMC whose version is the same after
// its update is, as in Ironic, an update with nothing to do: the step
// succeeds and the history says so. A nic: component the BMC does not
// have fails the clean naming it, before anything is posted.
func TestFirmwareUnchangedAndUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		fake := bmctest.StartFirmwareBMC(t, "location", "pending")
		_, clients := startLocal(t, setting, fwOpts(10*time.Second))
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		id, n := fwClean(t, admin, fake.DriverInfo(), "manageable", map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/same-bmc.bin", "wait": 1})
		if n["last_error"] != nil {
			t.Fatalf("update to the same version: %v", n["last_error"])
		}
		var noted bool
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			ev, _ := e.(map[string]any)["event"].(string)
			noted = noted || strings.Contains(ev, "bmc 1.00 -> 1.00 (unchanged by its update)")
		}
		if !noted {
			t.Error("no history event noting the unchanged BMC version")
		}
		posts := len(fake.Bodies())
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": []any{
			map[string]any{"component": "nic:NOPE", "url": "http://127.0.0.1:9/nic.bin"}}}))}, 202)
		n = waitState(t, admin, id, "clean failed")
		if e, _ := n["last_error"].(string); !strings.Contains(e, "no network adapter NOPE") {
			t.Errorf("unknown adapter: last_error %q", e)
		}
		for _, b := range fake.Bodies()[posts:] {
			if strings.Contains(b, "SimpleUpdate") {
				t.Errorf("an update was posted for an unknown adapter: %s", b)
			}
		}
	})
}
