package api_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBmclibRPC drives a node through bmclib's rpc provider against a
// webhook that verifies bmclib's signatures: power on and off, the boot
// device, power-state reads; the step list offers only what rpc can do
// and anything else is refused before a run starts; a wrong secret is a
// classified credential refusal, and three of them put the node into
// maintenance as any BMC's would.
func TestBmclibRPC(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		hook := bmctest.NewRPCWebhook("rpc-s3cret-value", "off")
		ts := httptest.NewServer(hook)
		defer ts.Close()
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		info := map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node7", "bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": hook.Secret}
		id := enrolBmclib(t, admin, "rpc-1", info, hook.Secret)

		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != bmc.PowerOn || n["last_error"] != nil {
			t.Fatalf("power on: %v, last_error %v", n["power_state"], n["last_error"])
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe", "persistent": true}), 204)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power off"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != bmc.PowerOff {
			t.Fatalf("power off: %v, last_error %v", n["power_state"], n["last_error"])
		}
		power, boot, bad, calls := hook.State()
		if power != "off" || boot != "pxe" || bad != 0 || !strings.Contains(strings.Join(calls, ","), "getPowerState") {
			t.Fatalf("webhook: power %s boot %s, %d refused signatures, calls %v", power, boot, bad, calls)
		}
		// A soft power off is asked of the webhook as such.
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		waitPower(t, admin, id)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": bmc.SoftPowerOff}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != bmc.PowerOff || n["last_error"] != nil {
			t.Fatalf("soft power off: %v, last_error %v", n["power_state"], n["last_error"])
		}
		_, _, _, calls = hook.State()
		sets := slices.DeleteFunc(slices.Clone(calls), func(c string) bool { return !strings.HasPrefix(c, "setPowerState") })
		if len(sets) == 0 || sets[len(sets)-1] != "setPowerState soft" {
			t.Errorf("webhook calls after a soft power off: %v", calls)
		}

		// Steps: power and the boot device, nothing rpc cannot do.
		r := admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil)
		mustStatus(t, r, 200)
		if b := string(r.Body); !strings.Contains(b, `"set_boot_device"`) || strings.Contains(b, `"get_sel"`) || strings.Contains(b, `"clear_sel"`) || strings.Contains(b, `"reset_bmc"`) {
			t.Errorf("rpc step list: %s", b)
		}
		before := len(calls)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil), step("management", "get_sel", nil))}, 202)
		if n := waitState(t, admin, id, "clean failed"); n["last_error"] != "Step management.get_sel is not supported by driver bmclib with bmclib provider rpc." {
			t.Errorf("get_sel on rpc: %v", n["last_error"])
		}
		if _, _, _, calls := hook.State(); len(calls) != before {
			t.Errorf("a refused run reached the webhook: %v", calls[before:])
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		// The driver catalogue and validate say what each provider offers.
		r = admin.Do(t, "GET", "/v1/drivers/bmclib/properties", nil)
		mustStatus(t, r, 200)
		if d, _ := r.JSON(t)["bmclib_provider"].(string); !strings.Contains(d, "rpc: management.set_boot_device;") || !strings.Contains(d, "ipmitool: management.clear_event_log, management.clear_sel, management.get_sel, management.reset_bmc, management.set_boot_device") {
			t.Errorf("bmclib_provider description: %s", d)
		}
		r = admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil)
		mustStatus(t, r, 200)
		if m, _ := r.JSON(t)["management"].(map[string]any); m["result"] != true || m["reason"] != "bmclib provider rpc; steps beyond power: management.set_boot_device" {
			t.Errorf("validate management: %v", m)
		}

		// A wrong secret: the webhook refuses the signature, Anvil says
		// the credentials were refused, and the third refusal in a row
		// puts the node into maintenance.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/driver_info/bmclib_rpc_secret","value":"not-the-secret"}]`), 200)
		for i := range 3 {
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
			n := waitPower(t, admin, id)
			if e := fmt.Sprint(n["last_error"]); !strings.Contains(e, bmc.ErrAuth.Error()) || strings.Contains(e, "not-the-secret") {
				t.Fatalf("wrong secret, try %d: last_error %q", i+1, e)
			}
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] != true || n["fault"] != "power failure" {
			t.Errorf("after three refused signatures: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		if power, _, bad, _ := hook.State(); power != "off" || bad < 3 {
			t.Errorf("webhook after the wrong secret: power %s, %d refused", power, bad)
		}
	})
}

// enrolBmclib enrols a bmclib node of project "own" named name with
// driver_info info, checks the answer does not show secret, and manages
// it; it returns the node's UUID.
func enrolBmclib(t *testing.T, admin *servertest.Client, name string, info map[string]any, secret string) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "bmclib", "owner": "own", "driver_info": info})
	mustStatus(t, r, 201)
	if strings.Contains(string(r.Body), secret) {
		t.Fatalf("the enrolment answer shows the secret: %s", r.Body)
	}
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	return id
}

// bmclibIPMIInfo is driver_info for the bmclib type's ipmitool provider
// against sim.
func bmclibIPMIInfo(sim *bmctest.Sim) map[string]any {
	return map[string]any{"bmclib_provider": "ipmitool", "bmclib_address": "127.0.0.1", "bmclib_port": float64(sim.Port),
		"bmclib_username": bmctest.User, "bmclib_password": bmctest.Password}
}

// TestBmclibIPMItool drives ipmi_sim through bmclib's ipmitool provider
// (lanplus, as bmclib always speaks it): power on and off, the boot
// device, and the SEL read into history and cleared by clean steps.
func TestBmclibIPMItool(t *testing.T) {
	bmctest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.Start(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bl-ipmi", "driver": "bmclib", "driver_info": bmclibIPMIInfo(sim), "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != bmc.PowerOn || sim.Power() != "1" {
			t.Fatalf("power on: node %v (last_error %v), simulator %s", n["power_state"], n["last_error"], sim.Power())
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"}), 204)
		if sim.Boot() != "pxe" {
			t.Fatalf("simulator boot device %s", sim.Boot())
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power off"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != bmc.PowerOff || sim.Power() != "0" {
			t.Fatalf("power off: node %v (last_error %v), simulator %s", n["power_state"], n["last_error"], sim.Power())
		}

		// One SEL entry to read, added raw (Add SEL Entry; ipmi_sim has
		// no Platform Event Message): temperature sensor 0x30, upper
		// critical going high, as a sensor would log it.
		add := strings.Fields("raw 0x0a 0x44 0x00 0x00 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x01 0x30 0x01 0x09 0xff 0xff")
		if out, err := exec.Command("ipmitool", append([]string{"-I", "lanplus", "-H", "127.0.0.1", "-p", fmt.Sprint(sim.Port), "-U", bmctest.User,
			"-P", bmctest.Password, "-C", "3"}, add...)...).CombinedOutput(); err != nil {
			t.Fatalf("ipmitool sel add: %v: %s", err, out)
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "get_sel", nil), step("management", "clear_sel", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("get_sel, clear_sel: %v", n["last_error"])
		}
		if d := selDeleted(t, sim); d == "Not Available" {
			t.Errorf("clear_sel left the SEL uncleared")
		}
		// History: the count for the node's readers, the entries for
		// system scope only.
		sel := func(c *servertest.Client) map[string]any {
			r := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
			mustStatus(t, r, 200)
			for _, e := range r.JSON(t)["history"].([]any) {
				if ev := e.(map[string]any); strings.HasPrefix(fmt.Sprint(ev["event"]), "System event log read") {
					return ev
				}
			}
			t.Fatalf("no SEL event in history: %s", r.Body)
			return nil
		}
		if ev := fmt.Sprint(sel(admin)["event"]); !strings.HasPrefix(ev, "System event log read: 1 entries. (detail: ") || !strings.Contains(ev, "Temperature") {
			t.Errorf("SEL event for system scope: %s", ev)
		}
		if ev := sel(atVer(clients["owner-reader"], api.VerMax))["event"]; ev != "System event log read: 1 entries." {
			t.Errorf("a project reader's SEL event: %v", ev)
		}
	})
}

// TestBmclibRedfish sets the boot device of a redfish-sim machine and
// powers it on and off through bmclib's redfish (gofish) provider, the system picked by Name (the
// only way bmclib picks one) and the certificate verified against the
// simulator's CA.
func TestBmclibRedfish(t *testing.T) {
	bmctest.NeedRedfish(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		sys := sim.Systems[0]
		info := map[string]any{"bmclib_provider": "redfish", "bmclib_address": "127.0.0.1", "bmclib_port": float64(sim.Port),
			"bmclib_username": bmctest.RedfishUser, "bmclib_password": bmctest.RedfishPassword, "bmclib_verify_ca": sim.CAPEM, "bmclib_system_name": sys.Name}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bl-rf", "driver": "bmclib", "driver_info": info})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		// bmclib writes the boot mode with every boot device; the
		// machine's (UEFI) is kept.
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"}), 204)
		if target, mode, _ := sim.Boot(t, sys.ID); target != "Pxe" || mode != "UEFI" {
			t.Errorf("boot device at the simulator: %s %s", target, mode)
		}
		// The simulator reports every override as Continuous, so the
		// one-time request is read from what bmclib sent.
		once := false
		for _, b := range sim.Bodies(t) {
			once = once || strings.Contains(b, `"BootSourceOverrideTarget":"Pxe"`) && strings.Contains(b, `"Once"`)
		}
		if !once {
			t.Error("no one-time boot from Pxe was sent")
		}
		for _, tc := range []struct{ target, sim string }{{bmc.PowerOn, "On"}, {bmc.PowerOff, "Off"}, {bmc.PowerOn, "On"}} {
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": tc.target}), 202)
			if n := waitPower(t, admin, id); n["power_state"] != tc.target || sim.Power(t, sys.ID) != tc.sim {
				t.Fatalf("%s: node %v (last_error %v), simulator %s", tc.target, n["power_state"], n["last_error"], sim.Power(t, sys.ID))
			}
		}
	})
}

// TestBmclibHostileDriverInfo: a bmclib address or webhook outside
// --bmc-networks is refused naming the field, each provider's required
// keys are demanded, and neither the password nor the rpc secret is
// ever shown.
func TestBmclibHostileDriverInfo(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		o := bmcOpts
		o.Conductor.BMCNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		_, clients := startLocal(t, setting, o)
		t.Cleanup(func() { bmc.SetNetworks(nil) })
		admin := atVer(clients["system-admin"], api.VerMax)
		for _, tc := range []struct {
			info  map[string]any
			field string
		}{
			{map[string]any{"bmclib_provider": "redfish", "bmclib_address": "169.254.169.254"}, "bmclib_address"},
			{map[string]any{"bmclib_provider": "ipmitool", "bmclib_address": "10.1.2.3"}, "bmclib_address"},
			{map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://169.254.169.254/latest", "bmclib_rpc_secret": "x"}, "bmclib_rpc_url"},
			{map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "file:///etc/shadow", "bmclib_rpc_secret": "x"}, "bmclib_rpc_url"},
			{map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.1:9/"}, "bmclib_rpc_secret"},
			{map[string]any{"bmclib_provider": "gofish", "bmclib_address": "127.0.0.1"}, "bmclib_provider"},
			{map[string]any{"bmclib_address": "127.0.0.1"}, "bmclib_provider"},
			{map[string]any{"bmclib_provider": "dell"}, "bmclib_address"},
			{map[string]any{"bmclib_provider": "dell", "bmclib_address": "127.0.0.1", "bmclib_port": float64(8443)}, "bmclib_port"},
			{map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1"}, "bmclib_homeassistant_switch"},
		} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": tc.info})
			mustFaultNaming(t, fmt.Sprint(tc.info), r, tc.field)
		}

		secret, pass := "hmac-secret-do-not-show", "bmc-password-do-not-show"
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bl-secret", "driver": "bmclib", "owner": "own", "driver_info": map[string]any{
			"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.1:9/hook", "bmclib_rpc_secret": secret, "bmclib_password": pass}})
		mustStatus(t, r, 201)
		for _, who := range []string{"system-admin", "owner-admin", "owner-reader"} {
			for _, path := range []string{"/v1/nodes/bl-secret", "/v1/nodes/detail", "/v1/nodes/bl-secret/validate"} {
				r := atVer(clients[who], api.VerMax).Do(t, "GET", path, nil)
				if strings.Contains(string(r.Body), secret) || strings.Contains(string(r.Body), pass) {
					t.Errorf("%s GET %s shows a bmclib secret: %s", who, path, r.Body)
				}
			}
		}
		// Pointing the webhook elsewhere takes the secret along only when
		// it is given again: the URL binds it.
		p := admin.Do(t, "PATCH", "/v1/nodes/bl-secret", `[{"op":"replace","path":"/driver_info/bmclib_rpc_url","value":"http://127.0.0.2:9/hook"}]`)
		if p.Status != 400 || !strings.Contains(p.Fault(t), "bmclib_rpc_secret") {
			t.Errorf("moving the webhook without its secret: %d %s", p.Status, p.Body)
		}
	})
}
