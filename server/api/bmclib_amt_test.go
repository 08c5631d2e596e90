package api_test

import (
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBmclibIntelAMT drives a node through bmclib's intelamt provider
// against a fake AMT written from the requests iamt makes (digest auth,
// WS-Management): power on, off and reboot, the one-time PXE boot it
// sets; disk and soft power off, which the provider cannot do, are
// refused before anything is sent; the password is never shown, and a
// wrong one is a credential refusal that puts the node into maintenance
// the third time.
func TestBmclibIntelAMT(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		amt := bmctest.NewAMT("admin", "amt-P4ssw0rd-do-not-show", "off")
		ts := httptest.NewServer(amt)
		defer ts.Close()
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		info := map[string]any{"bmclib_provider": "intelamt", "bmclib_address": "127.0.0.1",
			"bmclib_port": float64(ts.Listener.Addr().(*net.TCPAddr).Port), "bmclib_username": amt.User, "bmclib_password": amt.Password}
		id := enrolBmclib(t, admin, "amt-1", info, amt.Password)

		power := func(target string) map[string]any {
			t.Helper()
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target}), 202)
			return waitPower(t, admin, id)
		}
		for _, tc := range []struct{ target, amt string }{{bmc.PowerOn, "on"}, {bmc.PowerOff, "off"}, {bmc.PowerOn, "on"}} {
			if n := power(tc.target); n["power_state"] != tc.target || n["last_error"] != nil || amt.State().Power != tc.amt {
				t.Fatalf("%s: node %v (last_error %v), AMT %s", tc.target, n["power_state"], n["last_error"], amt.State().Power)
			}
		}
		// A reboot is off, confirmed, then on: AMT's soft off (8) then on
		// (2), and the machine boots once more.
		before := amt.State()
		if n := power(bmc.Rebooting); n["power_state"] != bmc.PowerOn || n["last_error"] != nil {
			t.Fatalf("reboot: node %v, last_error %v", n["power_state"], n["last_error"])
		}
		st := amt.State()
		if sent := changes(st.Actions[len(before.Actions):]); !slices.Equal(sent, []string{"RequestPowerStateChange 8", "RequestPowerStateChange 2"}) ||
			len(st.Boots) != len(before.Boots)+1 || st.Power != "on" {
			t.Fatalf("reboot at the AMT: power changes %v, boots %v, power %s", sent, st.Boots, st.Power)
		}

		// Boot device pxe: iamt's SetPXE, one-time, used by the next boot.
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe"}), 204)
		st = amt.State()
		for _, want := range []string{"Put AMT_BootSettingData", "SetBootConfigRole 1", "ChangeBootOrder Intel(r) AMT: Force PXE Boot"} {
			if !slices.Contains(st.Actions, want) {
				t.Errorf("boot device pxe: no %q at the AMT: %v", want, st.Actions)
			}
		}
		if !st.PXENext {
			t.Fatalf("boot device pxe: the AMT's next boot is not PXE")
		}
		power(bmc.Rebooting)
		if st := amt.State(); st.Boots[len(st.Boots)-1] != "pxe" || st.PXENext {
			t.Fatalf("the reboot after pxe: boots %v, PXE still next %v", st.Boots, st.PXENext)
		}

		// What intelamt cannot do is refused before anything is sent.
		before = amt.State()
		r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "disk"})
		if mustFaultNaming(t, "boot device disk", r, "boot_device"); !strings.Contains(r.Fault(t), `boot device "disk" is not one of pxe (driver bmclib with bmclib provider intelamt)`) {
			t.Errorf("boot device disk: %s", r.Fault(t))
		}
		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "pxe", "persistent": true})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "Intel AMT sets the boot device for the next boot only") {
			t.Errorf("persistent pxe: %d %s", r.Status, r.Body)
		}
		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": bmc.SoftPowerOff})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "does not support the power state, soft power off") || !strings.Contains(r.Fault(t), "intelamt") {
			t.Errorf("soft power off: %d %s", r.Status, r.Body)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["power_state"] != bmc.PowerOn || n["target_power_state"] != nil || n["last_error"] != nil {
			t.Errorf("after the refusals: power %v, target %v, last_error %v", n["power_state"], n["target_power_state"], n["last_error"])
		}
		if st := amt.State(); len(st.Actions) != len(before.Actions) || len(st.Faults) != 0 || st.Refused != 0 {
			t.Fatalf("refused requests reached the AMT: %v, faults %v, %d refused", st.Actions[len(before.Actions):], st.Faults, st.Refused)
		}

		// The password is never shown: not in the node, not in its
		// history.
		for _, path := range []string{"/v1/nodes/" + id, "/v1/nodes/" + id + "/history?detail=true"} {
			if r := admin.Do(t, "GET", path, nil); strings.Contains(string(r.Body), amt.Password) {
				t.Errorf("GET %s shows the password: %s", path, r.Body)
			}
		}

		// A wrong password: AMT refuses the digest, Anvil says the
		// credentials were refused, and the third refusal in a row puts
		// the node into maintenance.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/driver_info/bmclib_password","value":"not-the-password"}]`), 200)
		for i := range 3 {
			n := power(bmc.PowerOff)
			if e := fmt.Sprint(n["last_error"]); !strings.Contains(e, bmc.ErrAuth.Error()) || strings.Contains(e, "not-the-password") {
				t.Fatalf("wrong password, try %d: last_error %q", i+1, e)
			}
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] != true || n["fault"] != "power failure" {
			t.Errorf("after three refused passwords: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		if st := amt.State(); st.Power != "on" || st.Refused < 3 || len(st.Faults) != 0 {
			t.Errorf("AMT after the wrong password: power %s, %d refused, faults %v", st.Power, st.Refused, st.Faults)
		}
	})
}

// changes are the power state changes among an AMT's actions.
func changes(actions []string) []string {
	var out []string
	for _, a := range actions {
		if strings.HasPrefix(a, "RequestPowerStateChange ") {
			out = append(out, a)
		}
	}
	return out
}
