package api_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBmclibHomeAssistant powers a machine on a Home Assistant switch
// through bmclib's homeassistant provider, against a fake of Home
// Assistant's REST API over verified TLS: power on, reboot (off, then
// on, each confirmed by the switch's state) and off; no boot device (the
// provider's is a no-op, so Anvil offers none); a switch Home Assistant
// does not have is named as such; a wrong token is a credential refusal
// that the third time puts the node into maintenance, and the token is
// never shown.
func TestBmclibHomeAssistant(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		const token = "ha-long-lived-token-do-not-show"
		ha := bmctest.StartHomeAssistant(t, token, "switch.rack1_node3", "off")
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		info := map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_port": float64(ha.Port),
			"bmclib_password": token, "bmclib_homeassistant_switch": ha.Switch, "bmclib_verify_ca": ha.CAPEM}
		id := enrolBmclib(t, admin, "ha-1", info, token)
		for _, who := range []string{"system-admin", "owner-reader"} {
			if b := string(atVer(clients[who], api.VerMax).Do(t, "GET", "/v1/nodes/"+id, nil).Body); strings.Contains(b, token) {
				t.Errorf("%s sees the Home Assistant token: %s", who, b)
			}
		}

		power := func(target, want string) {
			t.Helper()
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target}), 202)
			if n := waitPower(t, admin, id); n["power_state"] != want || n["last_error"] != nil || ha.State().Power != strings.TrimPrefix(want, "power ") {
				t.Fatalf("%s: node %v (last_error %v), switch %s", target, n["power_state"], n["last_error"], ha.State().Power)
			}
		}
		power(bmc.PowerOn, bmc.PowerOn)
		before := len(ha.State().Calls)
		power(bmc.Rebooting, bmc.PowerOn)
		var services []string
		for _, c := range ha.State().Calls[before:] {
			if c != "GET state" {
				services = append(services, c)
			}
		}
		if !slices.Equal(services, []string{"turn_off", "turn_on"}) {
			t.Errorf("a reboot called %v, want turn_off then turn_on", services)
		}
		power(bmc.PowerOff, bmc.PowerOff)
		if st := ha.State(); len(st.Unknown) > 0 || slices.ContainsFunc(st.Entities, func(e string) bool { return e != ha.Switch }) {
			t.Errorf("requests outside the switch's API: %v, entities %v", st.Unknown, st.Entities)
		}

		// No boot device: refused, and nothing is sent.
		before = len(ha.State().Calls)
		r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"})
		if mustFaultNaming(t, "boot device on homeassistant", r, "boot_device"); !strings.Contains(r.Fault(t), "driver bmclib with bmclib provider homeassistant cannot set a boot device") {
			t.Errorf("boot device on homeassistant: %s", r.Fault(t))
		}
		if got := fmt.Sprint(admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device/supported", nil).JSON(t)["supported_boot_devices"]); got != "[]" {
			t.Errorf("homeassistant's supported boot devices: %s", got)
		}
		if b := string(admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil).Body); strings.Contains(b, `"set_boot_device"`) {
			t.Errorf("the homeassistant step list offers a boot device: %s", b)
		}
		r = admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil)
		if m, _ := r.JSON(t)["management"].(map[string]any); m["reason"] != "bmclib provider homeassistant; steps beyond power: none" {
			t.Errorf("validate management: %v", m)
		}
		if c := ha.State().Calls[before:]; slices.Contains(c, "turn_on") || slices.Contains(c, "turn_off") {
			t.Errorf("the refused boot device switched power: %v", c)
		}

		// A switch Home Assistant does not have is named as the problem.
		patch := func(path string, v string) {
			t.Helper()
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, fmt.Sprintf(`[{"op":"replace","path":"/driver_info/%s","value":%q}]`, path, v)), 200)
		}
		// The switch binds the token: it moves only with it.
		switchTo := func(sw string) {
			t.Helper()
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, fmt.Sprintf(`[{"op":"replace","path":"/driver_info/bmclib_homeassistant_switch","value":%q},
				{"op":"replace","path":"/driver_info/bmclib_password","value":%q}]`, sw, token)), 200)
		}
		switchTo("switch.rack1_node4")
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": bmc.PowerOn}), 202)
		if e := fmt.Sprint(waitPower(t, admin, id)["last_error"]); !strings.Contains(e, "no entity switch.rack1_node4") || !strings.Contains(e, "bmclib_homeassistant_switch") {
			t.Errorf("an unknown switch: last_error %q", e)
		}
		if st := ha.State(); st.Power != "off" || slices.Contains(st.Entities, "switch.rack1_node4") {
			t.Errorf("an unknown switch was switched: power %s, entities %v", st.Power, st.Entities)
		}
		switchTo(ha.Switch)

		// A wrong token: refused credentials, never shown, and the third
		// refusal in a row puts the node into maintenance.
		patch("bmclib_password", "not-the-token")
		for i := range 3 {
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": bmc.PowerOn}), 202)
			if e := fmt.Sprint(waitPower(t, admin, id)["last_error"]); !strings.Contains(e, bmc.ErrAuth.Error()) || strings.Contains(e, "not-the-token") {
				t.Fatalf("wrong token, try %d: last_error %q", i+1, e)
			}
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] != true || n["fault"] != "power failure" {
			t.Errorf("after three refused tokens: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		if st := ha.State(); st.Power != "off" || st.Refused < 3 {
			t.Errorf("Home Assistant after the wrong token: power %s, %d refused", st.Power, st.Refused)
		}
	})
}
