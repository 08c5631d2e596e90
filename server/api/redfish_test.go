package api_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bmctest.StopShared()
	if err := stopBaremetalServer(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the baremetal fork server:", err)
		code = 1
	}
	os.Exit(code)
}

// bmcOpts: real waits, quick polls, no background sync (tests run it).
var bmcOpts = server.Options{Conductor: conductor.Config{PowerTimeout: 20 * time.Second,
	BMC: bmc.Options{Timeout: 5 * time.Second, Retries: -1, PowerPoll: 100 * time.Millisecond}}}

// waitPower waits for a power action to end and returns the node.
func waitPower(t *testing.T, c *servertest.Client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		n := c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["target_power_state"] == nil && n["reservation"] == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("power action on %s never ended: %v", id, n["target_power_state"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkPowerVerbs sends every power verb through the API, from on and
// from off, and checks the node and the simulator agree on the result.
func checkPowerVerbs(t *testing.T, admin *servertest.Client, id string, simPower func() string) {
	t.Helper()
	set := func(target string) map[string]any {
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target}), 202)
		return waitPower(t, admin, id)
	}
	for _, tc := range []struct{ from, verb, want string }{
		{bmc.PowerOff, bmc.PowerOn, bmc.PowerOn},
		{bmc.PowerOn, bmc.PowerOff, bmc.PowerOff},
		{bmc.PowerOn, bmc.SoftPowerOff, bmc.PowerOff},
		{bmc.PowerOn, bmc.Rebooting, bmc.PowerOn},
		{bmc.PowerOff, bmc.Rebooting, bmc.PowerOn},
		{bmc.PowerOn, bmc.SoftRebooting, bmc.PowerOn},
		{bmc.PowerOff, bmc.SoftRebooting, bmc.PowerOn},
	} {
		if n := set(tc.from); n["power_state"] != tc.from || simPower() != tc.from {
			t.Fatalf("setup %s: node %v, simulator %s, last_error %v", tc.from, n["power_state"], simPower(), n["last_error"])
		}
		n := set(tc.verb)
		if n["power_state"] != tc.want || n["last_error"] != nil || simPower() != tc.want {
			t.Fatalf("%s from %s: node %v, simulator %s, last_error %v", tc.verb, tc.from, n["power_state"], simPower(), n["last_error"])
		}
	}
}

func TestRedfishNodeThroughAPI(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	simPower := func() string {
		if sim.Power(t, "1") == "On" {
			return bmc.PowerOn
		}
		return bmc.PowerOff
	}
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rf-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own"})
		mustStatus(t, r, 201)
		n := r.JSON(t)
		id := n["uuid"].(string)
		if v, ok := n["power_state"]; !ok || v != nil {
			t.Fatalf("a new node's power_state is %v (present %v), want null", v, ok)
		}
		if v, ok := n["fault"]; !ok || v != nil {
			t.Fatalf("fault at the latest version: %v (present %v)", v, ok)
		}
		old := srv.Client()
		old.Header = admin.Header
		old.Version = "1.41"
		if _, ok := old.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["fault"]; ok {
			t.Fatal("fault shown before 1.42")
		}

		// Validate: power and management from driver_info, no BMC asked.
		v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil)
		mustStatus(t, v, 200)
		vj := v.JSON(t)
		for iface, want := range map[string]any{"power": true, "management": true, "bios": true, "inspect": true, "network": true, "boot": false, "deploy": false, "raid": true} {
			got, _ := vj[iface].(map[string]any)
			if got == nil || got["result"] != want {
				t.Errorf("validate %s: %v, want result %v", iface, vj[iface], want)
			}
		}
		// The default boot interface (ipxe) boots the agent from
		// deploy_kernel and deploy_ramdisk, which are not set.
		if r, _ := vj["boot"].(map[string]any)["reason"].(string); !strings.Contains(r, "deploy_kernel") {
			t.Errorf("validate boot reason %q does not name deploy_kernel", r)
		}
		if len(vj) != 11 {
			t.Errorf("validate lists %d interfaces: %v", len(vj), vj)
		}
		mustStatus(t, clients["other-admin"].Do(t, "GET", "/v1/nodes/"+id+"/validate", nil), 404)

		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		if n := waitState(t, admin, id, "manageable"); n["power_state"] != simPower() {
			t.Fatalf("manage read power %v, simulator %s", n["power_state"], simPower())
		}

		// A device the driver cannot set is a 400 before any BMC call.
		before := len(sim.Requests(t))
		if r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "safe"}); r.Status != 400 || !strings.Contains(string(r.Body), "redfish") {
			t.Fatalf("safe on redfish: %d %s", r.Status, r.Body)
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "set_boot_device", map[string]any{"device": "safe"}))}, 400)
		if after := len(sim.Requests(t)); after != before {
			t.Fatalf("a refused boot device reached the BMC (%d requests)", after-before)
		}
		// A target the BMC does not list in its AllowableValues (the
		// simulator offers Pxe, Cd, Hdd and, in UEFI, UefiHttp; not
		// BiosSetup) is refused before the PATCH, as sushy refuses it:
		// the boot override stays.
		target0, _, _ := sim.Boot(t, "1")
		before = len(sim.Requests(t))
		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "bios"})
		if r.Status < 400 || !strings.Contains(string(r.Body), "boot targets") {
			t.Fatalf("bios on a BMC without BiosSetup: %d %s", r.Status, r.Body)
		}
		if target, _, _ := sim.Boot(t, "1"); target != target0 || slices.ContainsFunc(sim.Requests(t)[before:], func(s string) bool { return strings.HasPrefix(s, "PATCH /redfish/v1/Systems/1 ") }) {
			t.Fatalf("a target the BMC does not offer reached it: target %s", target)
		}

		// The two sequences the issue reported: both end with the machine
		// on, the boot mode untouched.
		for _, seq := range [][]map[string]any{
			steps(step("power", "power_off", nil), step("management", "set_boot_device", map[string]any{"device": "disk"}), step("power", "power_on", nil)),
			steps(step("power", "power_on", nil), step("management", "set_boot_device", map[string]any{"device": "pxe"}), step("power", "reboot", nil)),
		} {
			provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": seq}, 202)
			n := waitState(t, admin, id, "manageable")
			target, mode, _ := sim.Boot(t, "1")
			dev := seq[1]["args"].(map[string]any)["device"]
			if n["power_state"] != bmc.PowerOn || simPower() != bmc.PowerOn || mode != "UEFI" || target != map[any]string{"disk": "Hdd", "pxe": "Pxe"}[dev] || n["last_error"] != nil {
				t.Fatalf("after %v: node power %v, simulator %s, boot %s/%s, last_error %v", seq, n["power_state"], simPower(), target, mode, n["last_error"])
			}
			b := admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device", nil)
			if b.Status != 200 || b.JSON(t)["boot_device"] != dev {
				t.Fatalf("boot device read back: %d %s", b.Status, b.Body)
			}
		}

		checkPowerVerbs(t, admin, id, simPower)

		// Anvil's own changes are never reported as external by sync.
		if _, err := srv.Cond.SyncPower(context.Background()); err != nil {
			t.Fatal(err)
		}
		if cnt, _ := db.NodeEvent.Query().Where(nodeevent.EventContains("outside Anvil")).Count(context.Background()); cnt != 0 {
			t.Fatalf("power sync reported %d of Anvil's own changes as external", cnt)
		}
		// A node with an action in flight is not synced.
		if err := db.Node.Update().Where(node.UUID(id)).SetTargetPowerState(bmc.PowerOff).SetPowerState(bmc.PowerOff).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, _ = srv.Cond.SyncPower(context.Background())
		if got, _ := db.Node.Query().Where(node.UUID(id)).Only(context.Background()); got.PowerState == nil || *got.PowerState != bmc.PowerOff {
			t.Fatalf("sync touched a node with a power action in flight: %v", got.PowerState)
		}
		_ = db.Node.Update().Where(node.UUID(id)).ClearTargetPowerState().Exec(context.Background())
		_, _ = srv.Cond.SyncPower(context.Background())
		if cnt, _ := db.NodeEvent.Query().Where(nodeevent.EventContains("outside Anvil")).Count(context.Background()); cnt != 1 {
			t.Fatalf("a real outside change (stored off, BMC on) gave %d sync events", cnt)
		}

		// The node asks for legacy BIOS boot: only then does the mode change.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/properties/capabilities","value":"boot_mode:bios"}]`), 200)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "cdrom"}), 204)
		if target, mode, _ := sim.Boot(t, "1"); target != "Cd" || mode != "Legacy" {
			t.Fatalf("boot_mode:bios capability: %s/%s", target, mode)
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/properties/capabilities","value":"boot_mode:uefi"}]`), 200)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "disk"}), 204)
		if _, mode, _ := sim.Boot(t, "1"); mode != "UEFI" {
			t.Fatalf("boot_mode:uefi capability: %s", mode)
		}
	})
}

// TestCredentialFailuresFaultTheNode: three refusals in a row put the node
// into maintenance with Ironic's fault; sync then leaves it alone, and
// clearing maintenance clears the fault. A node without redfish_system_id
// (auth "auto", the default) meets the refusal while listing the
// systems, and must fare the same.
func TestCredentialFailuresFaultTheNode(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		var ids []string
		for _, withID := range []bool{true, false} {
			info := sim.DriverInfo("1")
			info["redfish_password"] = "not-the-password"
			if !withID {
				delete(info, "redfish_system_id")
			}
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "driver_info": info})
			mustStatus(t, r, 201)
			ids = append(ids, r.JSON(t)["uuid"].(string))
		}
		ctx := context.Background()
		for i := 1; i <= 3; i++ {
			for _, id := range ids {
				if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["maintenance"] != false {
					t.Fatalf("%s in maintenance after %d failures", id, i-1)
				}
			}
			if _, err := srv.Cond.SyncPower(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i, id := range ids {
			n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			reason, _ := n["maintenance_reason"].(string)
			if n["maintenance"] != true || n["fault"] != "power failure" || !strings.Contains(reason, "credentials") {
				t.Fatalf("node %d (system id given: %v) after 3 refusals: maintenance %v, fault %v, reason %q", i, i == 0, n["maintenance"], n["fault"], reason)
			}
		}
		before := len(sim.Requests(t))
		_, _ = srv.Cond.SyncPower(ctx)
		if after := len(sim.Requests(t)); after != before {
			t.Fatalf("sync asked a faulted node's BMC again (%d requests)", after-before)
		}
		for _, id := range ids {
			mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["maintenance"] != false || n["fault"] != nil {
				t.Fatalf("after clearing maintenance: %v, fault %v", n["maintenance"], n["fault"])
			}
		}
	})
}

// TestProjectCallersSeeNoDialErrors: a failed power action's last_error
// names the kind of failure and never the BMC's address; the operator's
// history keeps the detail.
func TestProjectCallersSeeNoDialErrors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin, owner := clients["system-admin"], clients["owner-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "owner": "own",
			"driver_info": map[string]any{"redfish_address": "https://127.0.0.1:1", "redfish_username": "u", "redfish_password": "p"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, owner.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		n := waitPower(t, owner, id)
		if n["last_error"] != "Power on failed: the BMC did not answer (unreachable) after 1 try of 5 s each" {
			t.Fatalf("last_error %q", n["last_error"])
		}
		b := owner.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device", nil)
		if b.Status != 503 || strings.Contains(string(b.Body), "127.0.0.1") || !strings.Contains(string(b.Body), "did not answer") {
			t.Fatalf("project caller's boot device error: %d %s", b.Status, b.Body)
		}
		ev, err := db.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Power on failed")).Only(context.Background())
		if err != nil || strings.Contains(ev.Event, "127.0.0.1:1") || !strings.Contains(ev.Detail, "127.0.0.1:1") {
			t.Fatalf("history keeps the detail for operators: %v %v", ev, err)
		}
	})
}

func TestBMCNetworksAtEnrolment(t *testing.T) {
	nets, _ := bmc.ParseNetworks([]string{"10.0.0.0/8"})
	o := bmcOpts
	o.Conductor.BMCNetworks = nets
	_, clients := startLocal(t, storetest.Setting(t, "sqlite"), o)
	defer bmc.SetNetworks(nil)
	admin := clients["system-admin"]
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "driver_info": map[string]any{"redfish_address": "https://169.254.169.254"}})
	if r.Status != 400 || !strings.Contains(string(r.Body), "redfish_address") || !strings.Contains(string(r.Body), "BMC networks") {
		t.Fatalf("enrol outside the BMC networks: %d %s", r.Status, r.Body)
	}
	r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "ipmi", "driver_info": map[string]any{"ipmi_address": "10.9.8.7"}})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	p := admin.Do(t, "PATCH", "/v1/nodes/"+id, fmt.Sprintf(`[{"op":"replace","path":"/driver_info/ipmi_address","value":%q}]`, "192.168.1.1"))
	if p.Status != 400 || !strings.Contains(string(p.Body), "ipmi_address") {
		t.Fatalf("update outside the BMC networks: %d %s", p.Status, p.Body)
	}
}

// TestValidateReportsBadDriverInfo: validate answers from what is stored,
// naming the problem, without any BMC.
func TestValidateReportsBadDriverInfo(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "owner": "own",
			"driver_info": map[string]any{"redfish_address": "https://10.0.0.1"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		// A CA path the API now refuses, stored before it did.
		if err := db.Node.Update().Where(node.UUID(id)).SetDriverInfo(map[string]any{"redfish_address": "https://10.0.0.1", "redfish_verify_ca": "/nonexistent/ca.pem"}).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		v := clients["owner-member"].Do(t, "GET", "/v1/nodes/"+id+"/validate", nil)
		mustStatus(t, v, 200)
		power, _ := v.JSON(t)["power"].(map[string]any)
		reason, _ := power["reason"].(string)
		if power["result"] != false || !strings.Contains(reason, "redfish_verify_ca") {
			t.Fatalf("validate power: %v", power)
		}
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/nodes/"+id+"/validate", nil), 403)
	})
}

// TestRedfishConnectionSettingsThroughAPI: each way of reaching a Redfish
// BMC that driver_info offers — Basic, session or auto authentication; a
// trusted CA, verification off, or the default (verify, which a
// self-signed BMC fails); the system as an Id path or a bare Id — carries
// a power change through the API to the BMC, or fails saying why.
func TestRedfishConnectionSettingsThroughAPI(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		for i, tc := range []struct {
			name   string
			change map[string]any
			fail   string // a word last_error must hold; "" when it must work
		}{
			{"basic", map[string]any{"redfish_auth_type": "basic"}, ""},
			{"session", map[string]any{"redfish_auth_type": "session"}, ""},
			{"auto", map[string]any{"redfish_auth_type": "auto"}, ""},
			{"verify off", map[string]any{"redfish_verify_ca": false}, ""},
			{"bare system id", map[string]any{"redfish_system_id": "1"}, ""},
			{"verify by default", map[string]any{"redfish_verify_ca": nil}, "certificate"},
		} {
			info := sim.DriverInfo("1")
			for k, v := range tc.change {
				if v == nil {
					delete(info, k)
				} else {
					info[k] = v
				}
			}
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("rf-conn-%d", i), "driver": "redfish", "driver_info": info})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			for _, target := range []string{bmc.PowerOn, bmc.PowerOff} {
				mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target}), 202)
				n := waitPower(t, admin, id)
				lastErr, _ := n["last_error"].(string)
				if tc.fail != "" {
					if n["power_state"] != nil || !strings.Contains(lastErr, tc.fail) {
						t.Errorf("%s: power %v, last_error %q; want no power state and an error about %s", tc.name, n["power_state"], lastErr, tc.fail)
					}
					break
				}
				if n["power_state"] != target || lastErr != "" || sim.Power(t, "1") != map[string]string{bmc.PowerOn: "On", bmc.PowerOff: "Off"}[target] {
					t.Errorf("%s %s: node %v, BMC %s, last_error %q", tc.name, target, n["power_state"], sim.Power(t, "1"), lastErr)
				}
			}
		}
	})
}
