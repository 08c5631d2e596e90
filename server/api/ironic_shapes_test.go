package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// ironicNoIPMIAddress is Ironic's word for an ipmi node without its
// address, at validate and at power time alike.
const ironicNoIPMIAddress = "Missing the following IPMI credentials in node's driver_info: ['ipmi_address']."

// TestIPMIAddressCheckedAtUse: as Ironic, an ipmi node without
// ipmi_address is accepted at create and at a PATCH to the ipmi driver;
// validate's power and management verdicts refuse it, and so does a
// power request, with Ironic's message, recording nothing.
func TestIPMIAddressCheckedAtUse(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "no-addr", "driver": "ipmi"})
		mustStatus(t, r, 201)
		if di := r.JSON(t)["driver_info"]; di != nil && len(di.(map[string]any)) != 0 {
			t.Errorf("driver_info %v", di)
		}
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "was-fake", "driver": "fake-hardware"}), 201)
		r = c.Do(t, "PATCH", "/v1/nodes/was-fake?reset_interfaces=true", []map[string]any{{"op": "replace", "path": "/driver", "value": "ipmi"}})
		mustStatus(t, r, 200)
		if d := r.JSON(t)["driver"]; d != "ipmi" {
			t.Errorf("driver after PATCH %v", d)
		}
		// A bad value is still refused when given.
		mustFault(t, c.Do(t, "PATCH", "/v1/nodes/was-fake", []map[string]any{{"op": "add", "path": "/driver_info/ipmi_address", "value": "a b"}}), 400, "ipmi_address")

		for _, name := range []string{"no-addr", "was-fake"} {
			v := c.Do(t, "GET", "/v1/nodes/"+name+"/validate", nil).JSON(t)
			for _, iface := range []string{"power", "management"} {
				got, _ := v[iface].(map[string]any)
				if got["result"] != false || got["reason"] != ironicNoIPMIAddress {
					t.Errorf("%s: validate %s %v, want false with %q", name, iface, got, ironicNoIPMIAddress)
				}
			}
			mustFault(t, c.Do(t, "PUT", "/v1/nodes/"+name+"/states/power", map[string]any{"target": "power on"}), 400, ironicNoIPMIAddress)
			n := c.Do(t, "GET", "/v1/nodes/"+name, nil).JSON(t)
			if n["power_state"] != nil || n["target_power_state"] != nil || n["last_error"] != nil || n["reservation"] != nil {
				t.Errorf("%s: a refused power request left power %v target %v last_error %v reservation %v",
					name, n["power_state"], n["target_power_state"], n["last_error"], n["reservation"])
			}
		}
	})
}

// TestSetTraitsDropsDuplicates: PUT /v1/nodes/{node}/traits sets the
// list's distinct traits, as Ironic does, rather than refusing a repeat.
func TestSetTraitsDropsDuplicates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "tr", "driver": "fake-hardware"}), 201)
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/tr/traits", map[string]any{"traits": []string{"CUSTOM_B", "CUSTOM_A", "CUSTOM_B", "CUSTOM_A"}}), 204)
		got := c.Do(t, "GET", "/v1/nodes/tr/traits", nil).JSON(t)["traits"].([]any)
		var names []string
		for _, x := range got {
			names = append(names, x.(string))
		}
		if len(names) != 2 || !strings.Contains(strings.Join(names, ","), "CUSTOM_A") || !strings.Contains(strings.Join(names, ","), "CUSTOM_B") {
			t.Errorf("traits %v, want CUSTOM_A and CUSTOM_B once each", names)
		}
		// An invalid trait among repeats is still refused, and the
		// traits stay as they were.
		mustFault(t, c.Do(t, "PUT", "/v1/nodes/tr/traits", map[string]any{"traits": []string{"CUSTOM_C", "CUSTOM_C", "nope"}}), 400, "nope")
		if got := c.Do(t, "GET", "/v1/nodes/tr/traits", nil).JSON(t)["traits"].([]any); len(got) != 2 {
			t.Errorf("a refused PUT changed the traits to %v", got)
		}
	})
}

// TestTempestRBACOrder: the answers ironic-tempest-plugin's RBAC tests
// expect, in Ironic's order of checks. An empty node patch and a boot
// mode or secure boot change below 1.76 are authorized before anything
// else is said (404 to a project that cannot see the node, 403 to a
// reader that can), a PUT to a node state Ironic has no route for is
// 405, and the fake machine's LEDs are Ironic's fake's.
func TestTempestRBACOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, sysReader, other := clients["system-admin"], clients["system-reader"], clients["other-reader"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "owner": "own"})
		mustStatus(t, r, 201)
		id := fmt.Sprint(r.JSON(t)["uuid"])
		node := "/v1/nodes/" + id

		mustStatus(t, other.Do(t, "PATCH", node, `[]`), 404)
		mustStatus(t, sysReader.Do(t, "PATCH", node, `[]`), 403)
		mustFault(t, admin.Do(t, "PATCH", node, `[]`), 400, "empty")

		old := api.VerChangeBootMode - 1
		for _, path := range []string{"/states/boot_mode", "/states/secure_boot"} {
			body := map[string]any{"target": "uefi"}
			if path == "/states/secure_boot" {
				body = map[string]any{"target": true}
			}
			mustStatus(t, atVer(other, old).Do(t, "PUT", node+path, body), 404)
			mustStatus(t, atVer(sysReader, old).Do(t, "PUT", node+path, body), 403)
			mustFault(t, atVer(admin, old).Do(t, "PUT", node+path, body), 404, api.VerChangeBootMode.String())
		}

		mustStatus(t, sysReader.Do(t, "PUT", node+"/states/target_raid_config", map[string]any{"raid": "config"}), 405)
		// The routes that exist still answer for themselves.
		mustFault(t, admin.Do(t, "PUT", node+"/states/raid", map[string]any{"logical_disks": []any{}}), 400, "logical_disks")

		leds := sysReader.Do(t, "GET", node+"/management/indicators", nil).JSON(t)["indicators"].([]any)
		var names []string
		for _, l := range leds {
			m := l.(map[string]any)
			names = append(names, fmt.Sprint(m["name"], " readonly=", m["readonly"]))
		}
		if strings.Join(names, ", ") != "led@system readonly=false, led-0@chassis readonly=true" {
			t.Errorf("the fake machine's indicators: %v", names)
		}
		mustStatus(t, sysReader.Do(t, "GET", node+"/management/indicators/led@system", nil), 200)
		mustStatus(t, sysReader.Do(t, "PUT", node+"/management/indicators/led@system", map[string]any{"state": "blinking"}), 403)
		mustStatus(t, admin.Do(t, "PUT", node+"/management/indicators/led@system", map[string]any{"state": "blinking"}), 204)
		if s := admin.Do(t, "GET", node+"/management/indicators/led@system", nil).JSON(t)["state"]; s != "blinking" {
			t.Errorf("led@system after the set: %v", s)
		}
	})
}
