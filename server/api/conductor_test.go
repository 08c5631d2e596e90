package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// waitState polls a node until its provision state is want.
func waitState(t *testing.T, c *servertest.Client, id, want string) map[string]any {
	t.Helper()
	return waitStateWithin(t, c, id, want, 30*time.Second)
}

// waitStateWithin is waitState with its own deadline, for a test that
// drives many machines through one simulator at once: the deadline only
// stops a hung test, so it is sized for a busy CI host, not a speed.
func waitStateWithin(t *testing.T, c *servertest.Client, id, want string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := c.Do(t, "GET", "/v1/nodes/"+id, nil)
		mustStatus(t, r, 200)
		n := r.JSON(t)
		// A caller without baremetal:node:get:reservation reads Ironic's
		// redaction sentence there, never the lock.
		unlocked := n["reservation"] == nil || n["reservation"] == nodes.RedactedReservation
		if n["provision_state"] == want && unlocked && n["target_power_state"] == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v (reservation %v, last_error %v), want %s", id, n["provision_state"], n["reservation"], n["last_error"], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func provision(t *testing.T, c *servertest.Client, id string, body map[string]any, want int) *servertest.Response {
	t.Helper()
	r := c.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", body)
	if r.Status != want {
		t.Fatalf("provision %v: status %d, want %d: %s", body, r.Status, want, r.Body)
	}
	return r
}

func steps(s ...map[string]any) []map[string]any { return s }

func step(iface, name string, args map[string]any) map[string]any {
	m := map[string]any{"interface": iface, "step": name}
	if args != nil {
		m["args"] = args
	}
	return m
}

func TestCleaningStateMachine(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sm-1", "driver": "fake", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)

		// Impossible transitions name the current state.
		if f := provision(t, admin, id, map[string]any{"target": "provide"}, 409).Fault(t); !strings.Contains(f, `"enroll"`) {
			t.Errorf("409 fault %q does not name the state", f)
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		// Bad steps are refused when the request arrives.
		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"target": "clean"}, "clean_steps"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("console", "start", nil))}, `clean_steps[0]: interface "console"`},
			{map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create-configuration", nil))}, "not a step name"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "X"}}}))}, "value"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("management", "set_boot_device", nil))}, "needs argument"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("management", "set_boot_device", map[string]any{"device": "floppy"}))}, "device"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "wait", map[string]any{"seconds": -1}))}, "seconds"},
			{map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", map[string]any{"force": true}))}, "no argument"},
			{map[string]any{"target": "clean", "service_steps": steps(step("power", "power_on", nil))}, "service_steps"},
			{map[string]any{"target": "fly"}, "target"},
		} {
			if f := provision(t, admin, id, bad.body, 400).Fault(t); !strings.Contains(f, bad.field) {
				t.Errorf("%v: fault %q does not mention %s", bad.body, f, bad.field)
			}
		}

		// Arbitrary steps are the system's; an owner member may not.
		clean := map[string]any{"target": "clean", "clean_steps": steps(
			step("power", "power_on", nil), step("management", "set_boot_device", map[string]any{"device": "pxe"}),
			step("deploy", "wait", map[string]any{"seconds": 0}), step("power", "reboot", nil), step("power", "power_off", nil))}
		provision(t, clients["owner-member"], id, clean, 403)
		provision(t, clients["other-admin"], id, clean, 404)
		provision(t, admin, id, clean, 202)
		n := waitState(t, admin, id, "manageable")
		if n["power_state"] != "power off" || n["last_error"] != nil {
			t.Errorf("after cleaning: power %v, last_error %v", n["power_state"], n["last_error"])
		}
		hist := admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any)
		var started []string
		for _, e := range hist {
			if msg := e.(map[string]any)["event"].(string); strings.HasPrefix(msg, "Step ") && strings.Contains(msg, "started") {
				started = append(started, strings.Fields(msg)[1])
			}
		}
		if strings.Join(started, ",") != "power.power_on,management.set_boot_device,deploy.wait,power.reboot,power.power_off" {
			t.Errorf("steps ran as %v", started)
		}

		// Hold stops the steps; unhold runs the rest.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "hold", nil), step("power", "power_on", nil))}, 202)
		waitState(t, admin, id, "clean hold")
		provision(t, admin, id, map[string]any{"target": "unhold"}, 202)
		if n := waitState(t, admin, id, "manageable"); n["power_state"] != "power on" {
			t.Errorf("steps after unhold did not run: power %v", n["power_state"])
		}

		// Abort ends a wait; the node is clean failed and unlocked.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "wait", map[string]any{"seconds": 60}), step("power", "power_off", nil))}, 202)
		deadline := time.Now().Add(10 * time.Second)
		for admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"] != "clean wait" {
			if time.Now().After(deadline) {
				t.Fatal("never reached clean wait")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Locked meanwhile: a boot-device change is NodeLocked.
		if r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"}); r.Status != 409 || !strings.Contains(r.Fault(t), "locked") {
			t.Errorf("boot device on a locked node: %d %s", r.Status, r.Body)
		}
		provision(t, admin, id, map[string]any{"target": "abort"}, 202)
		n = waitState(t, admin, id, "clean failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "Aborted") || n["power_state"] != "power on" {
			t.Errorf("after abort: last_error %v, power %v (the step after the wait must not run)", n["last_error"], n["power_state"])
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		// Servicing runs on active nodes: adopt, then service.
		provision(t, admin, id, map[string]any{"target": "adopt"}, 202)
		waitState(t, admin, id, "active")
		provision(t, admin, id, map[string]any{"target": "service", "service_steps": steps(step("power", "reboot", nil))}, 202)
		waitState(t, admin, id, "active")

		// Power: the lessee member may, an unrelated project may not see it.
		if r := clients["lessee-member"].Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power off"}); r.Status != 202 {
			t.Fatalf("lessee power off: %d %s", r.Status, r.Body)
		}
		deadline = time.Now().Add(10 * time.Second)
		for admin.Do(t, "GET", "/v1/nodes/"+id+"/states", nil).JSON(t)["power_state"] != "power off" {
			if time.Now().After(deadline) {
				t.Fatal("power off never landed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		mustStatus(t, clients["other-member"].Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 404)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power sideways"}), 400)

		// Every step event was written once, and each carries the conductor.
		cnt, err := db.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Step power.reboot started")).Count(context.Background())
		if err != nil || cnt != 2 {
			t.Errorf("reboot started %d times, want 2 (%v)", cnt, err)
		}
		mustStatus(t, clients["system-reader"].Do(t, "GET", "/v1/conductors", nil), 200)
		mustStatus(t, clients["owner-admin"].Do(t, "GET", "/v1/conductors", nil), 403)
	})
}

func TestIPMINodeThroughAPI(t *testing.T) {
	sim := bmctest.Start(t)
	// Short BMC timeouts: the dead-port case waits them out.
	_, clients := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{Conductor: conductor.Config{BMC: bmc.Options{Timeout: 3 * time.Second, Retries: 1, PowerPoll: 100 * time.Millisecond}}})
	admin := clients["system-admin"]
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sim-1", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password)})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")

	mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
	waitState(t, admin, id, "manageable")
	if sim.Power() != "1" {
		t.Fatalf("simulator power %s after power on through the API", sim.Power())
	}
	mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"}), 204)
	if sim.Boot() != "pxe" {
		t.Fatalf("simulator boot device %s", sim.Boot())
	}
	mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "rebooting"}), 202)
	waitState(t, admin, id, "manageable")
	// A running machine reboots as Ironic's ipmitool driver reboots it:
	// power off, then on, each confirmed, never a chassis reset.
	if ev := strings.Join(sim.Events(), ","); !strings.HasSuffix(ev, "power 0,power 1") || strings.Contains(ev, "reset") || sim.Power() != "1" {
		t.Fatalf("reboot reached the simulator as %s, power %s", ev, sim.Power())
	}
	// ipmitool reports a refused boot device with exit status 0; it is
	// a failure all the same, and the device stays.
	r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "safe"})
	if r.Status < 400 || !strings.Contains(string(r.Body), "Set Chassis Boot Parameter 5 failed") || sim.Boot() != "pxe" {
		t.Fatalf("boot device safe on ipmi_sim: %d %s, simulator boot %s", r.Status, r.Body, sim.Boot())
	}

	checkPowerVerbs(t, admin, id, func() string {
		if sim.Power() == "1" {
			return bmc.PowerOn
		}
		return bmc.PowerOff
	})
	for _, seq := range [][]map[string]any{
		steps(step("power", "power_off", nil), step("management", "set_boot_device", map[string]any{"device": "disk"}), step("power", "power_on", nil)),
		steps(step("power", "power_on", nil), step("management", "set_boot_device", map[string]any{"device": "pxe"}), step("power", "reboot", nil)),
	} {
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": seq}, 202)
		n := waitState(t, admin, id, "manageable")
		dev := seq[1]["args"].(map[string]any)["device"]
		// ipmi_sim's chassis calls the hard disk "default".
		if n["power_state"] != bmc.PowerOn || sim.Power() != "1" || sim.Boot() != map[any]string{"disk": "default", "pxe": "pxe"}[dev] || n["last_error"] != nil {
			t.Fatalf("after %v: node %v, simulator power %s boot %s, last_error %v", seq, n["power_state"], sim.Power(), sim.Boot(), n["last_error"])
		}
		if b := admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device", nil); b.Status != 200 || b.JSON(t)["boot_device"] != dev {
			t.Fatalf("boot device read back: %d %s", b.Status, b.Body)
		}
	}

	// IPMI has no BIOS settings: the run fails before its first step,
	// naming the step and the driver, and the BMC hears nothing.
	before := len(sim.Events())
	provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_off", nil), step("bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "X", "value": "Y"}}}))}, 202)
	if n := waitState(t, admin, id, "clean failed"); n["last_error"] != "Step bios.apply_configuration is not supported by driver ipmi." || sim.Power() != "1" || len(sim.Events()) != before {
		t.Fatalf("unsupported step on ipmi: last_error %v, simulator power %s, events %v", n["last_error"], sim.Power(), sim.Events()[before:])
	}
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")

	for _, c := range []struct {
		patch, want string
	}{
		{`[{"op":"replace","path":"/driver_info/ipmi_password","value":"not-the-password"}]`, "refused the credentials"},
		// A port change takes the password with it (see TestSecretsFollowTheirAddress).
		{fmt.Sprintf(`[{"op":"replace","path":"/driver_info/ipmi_port","value":1},{"op":"replace","path":"/driver_info/ipmi_password","value":%q}]`, bmctest.Password), "did not answer"},
	} {
		good := fmt.Sprintf(`[{"op":"replace","path":"/driver_info/ipmi_password","value":%q},{"op":"replace","path":"/driver_info/ipmi_port","value":%d}]`, bmctest.Password, sim.Port)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, good), 200)
		// The last case's failed step left the node in maintenance with a
		// fault, in whatever state its checks below left it:
		// the operator clears it and manages the node again.
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] == true {
			mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		}
		if n["provision_state"] != "manageable" {
			provision(t, admin, id, map[string]any{"target": "manage"}, 202)
			waitState(t, admin, id, "manageable")
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, c.patch), 200)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_off", nil))}, 202)
		n = waitState(t, admin, id, "clean failed")
		le, _ := n["last_error"].(string)
		if !strings.Contains(le, c.want) || strings.Contains(le, "not-the-password") || strings.Contains(le, bmctest.Password) {
			t.Errorf("last_error %q, want one saying %q without credentials", le, c.want)
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "enroll")
	}
}

// TestReplicasShareWork runs two replicas on one PostgreSQL database and
// cleans 200 fake nodes through both at once: every step runs exactly once.
func TestReplicasShareWork(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	srvA, clients := startLocal(t, setting)
	srvB := servertest.Start(t, server.Options{Database: setting})
	admin := clients["system-admin"]
	adminB := srvB.Client()
	adminB.Header = admin.Header
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("rep-%03d", i), "driver": "fake"})
		mustStatus(t, r, 201)
		ids[i] = r.JSON(t)["uuid"].(string)
		provision(t, admin, ids[i], map[string]any{"target": "manage"}, 202)
	}
	for _, id := range ids {
		waitState(t, admin, id, "manageable")
	}
	body := map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil), step("management", "set_boot_device", map[string]any{"device": "pxe"}), step("power", "power_off", nil))}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			c := admin
			if i%2 == 1 {
				c = adminB
			}
			provision(t, c, id, body, 202)
		}(i, id)
	}
	wg.Wait()
	for _, id := range ids {
		waitState(t, admin, id, "manageable")
	}
	ctx := context.Background()
	for _, s := range []string{"power.power_on", "management.set_boot_device", "power.power_off"} {
		cnt, err := srvA.DB.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Step " + s + " started")).Count(ctx)
		if err != nil || cnt != n {
			t.Errorf("step %s started %d times over %d nodes (%v)", s, cnt, n, err)
		}
	}
	byConductor := map[string]int{}
	evs, _ := srvA.DB.NodeEvent.Query().Where(nodeevent.EventHasPrefix("All 3 clean steps done")).All(ctx)
	for _, e := range evs {
		byConductor[e.Conductor]++
	}
	if len(byConductor) != 2 {
		t.Errorf("work by conductor: %v, want both replicas", byConductor)
	}
}
