package api_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// mustFaultNaming checks a 400 whose message names field.
func mustFaultNaming(t *testing.T, what string, r *servertest.Response, field string) {
	t.Helper()
	if r.Status != 400 || !strings.Contains(r.Fault(t), field) {
		t.Errorf("%s: %d %s, want 400 naming %s", what, r.Status, r.Body, field)
	}
}

// auditedRule checks the audit log has an entry for rule.
func auditedRule(t *testing.T, reader *servertest.Client, rule string) {
	t.Helper()
	r := reader.Do(t, "GET", "/v1/events?rule="+rule, nil)
	mustStatus(t, r, 200)
	if len(r.JSON(t)["events"].([]any)) == 0 {
		t.Errorf("no audit events for %s", rule)
	}
}

// TestBootModeOverRedfish changes the boot mode and secure boot of a
// redfish-sim machine through states/boot_mode and states/secure_boot
// (1.76): the answer is 202, the conductor sets them at the BMC, and the
// node's boot_mode and secure_boot are what the simulator reports after.
func TestBootModeOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		srv, clients := startLocal(t, setting, bmcOpts)
		v := api.VerChangeBootMode
		admin := atVer(clients["system-admin"], v)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bm-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mode, sb := "/v1/nodes/"+id+"/states/boot_mode", "/v1/nodes/"+id+"/states/secure_boot"

		// Older requests do not know the endpoints: Ironic's 404.
		mustStatus(t, atVer(admin, v-1).Do(t, "PUT", mode, map[string]any{"target": "bios"}), 404)
		mustStatus(t, atVer(admin, v-1).Do(t, "PUT", sb, map[string]any{"target": true}), 404)
		// Invisible is 404 and not allowed 403, whatever the body.
		mustStatus(t, atVer(clients["other-admin"], v).Do(t, "PUT", mode, `{"target":"nope"}`), 404)
		mustStatus(t, atVer(clients["owner-reader"], v).Do(t, "PUT", mode, `{"target":"nope"}`), 403)
		mustStatus(t, atVer(clients["owner-reader"], v).Do(t, "PUT", sb, `{"target":true}`), 403)
		// Bad requests name the field and leave the BMC alone.
		for body, field := range map[string]string{
			`{"target":"legacy"}`:         "target",
			`{}`:                          "target",
			`{"target":"uefi","extra":1}`: "extra",
			`{"target":1}`:                "target",
		} {
			mustFaultNaming(t, "boot_mode "+body, admin.Do(t, "PUT", mode, body), field)
		}
		for body, field := range map[string]string{`{"target":"yes"}`: "target", `{}`: "target", `{"target":null}`: "target"} {
			mustFaultNaming(t, "secure_boot "+body, admin.Do(t, "PUT", sb, body), field)
		}
		if _, m, _ := sim.Boot(t, "1"); m != "UEFI" {
			t.Fatalf("the simulator's boot mode changed by refused requests: %s", m)
		}

		// A lessee member may (SYSTEM_OR_PROJECT_MEMBER, as in Ironic).
		member := atVer(clients["lessee-member"], v)
		for _, tc := range []struct{ target, sim string }{{"bios", "Legacy"}, {"uefi", "UEFI"}} {
			r := member.Do(t, "PUT", mode, map[string]any{"target": tc.target})
			mustStatus(t, r, 202)
			if !strings.HasSuffix(r.Header.Get("Location"), "/v1/nodes/"+id+"/states") {
				t.Errorf("Location %q", r.Header.Get("Location"))
			}
			n := waitPower(t, admin, id)
			if _, m, _ := sim.Boot(t, "1"); m != tc.sim || n["boot_mode"] != tc.target || n["last_error"] != nil {
				t.Errorf("boot mode %s: node %v (last_error %v), simulator %s", tc.target, n["boot_mode"], n["last_error"], m)
			}
		}
		for _, on := range []bool{true, false} {
			mustStatus(t, member.Do(t, "PUT", sb, map[string]any{"target": on}), 202)
			n := waitPower(t, admin, id)
			got := sim.Resource(t, sim.SystemPath("1")+"/SecureBoot")["SecureBootEnable"]
			if got != on || n["secure_boot"] != on {
				t.Errorf("secure boot %v: node %v, simulator %v", on, n["secure_boot"], got)
			}
		}
		// states shows the fields from 1.75.
		if st := admin.Do(t, "GET", "/v1/nodes/"+id+"/states", nil).JSON(t); st["boot_mode"] != "uefi" || st["secure_boot"] != false {
			t.Errorf("states: %v", st)
		}
		auditedRule(t, clients["system-reader"], "baremetal:node:set_boot_mode")
		auditedRule(t, clients["system-reader"], "baremetal:node:set_secure_boot")

		// A node in transition is refused, as Ironic refuses it.
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean wait").Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := admin.Do(t, "PUT", mode, map[string]any{"target": "bios"}); r.Status != 409 || !strings.Contains(r.Fault(t), "clean wait") {
			t.Errorf("boot mode in clean wait: %d %s", r.Status, r.Body)
		}
	})
}

// TestIndicatorsAndNMIOverRedfish reads and sets the system's and its
// chassis' IndicatorLED through management/indicators (1.63) and injects
// an NMI (1.29), checking each at the simulator.
func TestIndicatorsAndNMIOverRedfish(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		v := api.VerIndicators
		admin := atVer(clients["system-admin"], v)
		r := atVer(admin, api.VerMax).Do(t, "POST", "/v1/nodes", map[string]any{"name": "led-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		base := "/v1/nodes/" + id + "/management/indicators"
		system := sim.Resource(t, sim.SystemPath("1"))
		chassisPath := system["Links"].(map[string]any)["Chassis"].([]any)[0].(map[string]any)["@odata.id"].(string)
		chassis := sim.Resource(t, chassisPath)
		sysLED, chLED := fmt.Sprint(system["UUID"], "@system"), fmt.Sprint(chassis["UUID"], "@chassis")

		mustStatus(t, atVer(admin, v-1).Do(t, "GET", base, nil), 404)
		mustStatus(t, atVer(clients["other-reader"], v).Do(t, "GET", base, nil), 404)
		reader := atVer(clients["lessee-reader"], v)
		r = reader.Do(t, "GET", base, nil)
		mustStatus(t, r, 200)
		var names []string
		for _, x := range r.JSON(t)["indicators"].([]any) {
			m := x.(map[string]any)
			names = append(names, m["name"].(string))
			if m["readonly"] != false || fmt.Sprint(m["states"]) != "[blinking off on]" || !strings.HasSuffix(fmt.Sprint(m["links"]), "/management/indicators/"+m["name"].(string)+" rel:bookmark]]") {
				t.Errorf("indicator %v", m)
			}
		}
		if !slices.Equal(names, []string{sysLED, chLED}) {
			t.Errorf("indicators %v, want %s and %s", names, sysLED, chLED)
		}
		// The simulator starts with both LEDs lit.
		if s := reader.Do(t, "GET", base+"/"+sysLED, nil).JSON(t)["state"]; s != "on" {
			t.Errorf("system LED %v, simulator %v", s, system["IndicatorLED"])
		}

		// set_indicator_state is SYSTEM_MEMBER_OR_OWNER_MEMBER.
		mustStatus(t, atVer(clients["lessee-member"], v).Do(t, "PUT", base+"/"+sysLED, `{"state":"nope"}`), 403)
		// As Ironic's controller: the node and the rule first, then the
		// indicator's name, so a malformed name is a 403 to a caller the
		// rule refuses and a 404 to one who cannot see the node. A path
		// with one segment more (indicators/{component}/{name}) is no
		// route: a 404 to every caller before any policy. Ironic's pecan
		// passes the extra segment to get_one/put as an argument they do
		// not take, a TypeError answered 500, also before any policy.
		mustStatus(t, atVer(clients["lessee-member"], v).Do(t, "PUT", base+"/nocomponent", `{"state":"on"}`), 403)
		mustStatus(t, atVer(clients["other-member"], v).Do(t, "PUT", base+"/nocomponent", `{"state":"on"}`), 404)
		for _, who := range []string{"system-admin", "lessee-member", "other-member"} {
			mustStatus(t, atVer(clients[who], v).Do(t, "GET", base+"/system/"+sysLED, nil), 404)
			mustStatus(t, atVer(clients[who], v).Do(t, "PUT", base+"/system/"+sysLED, `{"state":"on"}`), 404)
		}
		owner := atVer(clients["owner-member"], v)
		for body, field := range map[string]string{`{"state":"purple"}`: "state", `{}`: "state", `{"state":"on","x":1}`: "x"} {
			mustFaultNaming(t, "PUT "+body, owner.Do(t, "PUT", base+"/"+sysLED, body), field)
		}
		mustFaultNaming(t, "malformed name", owner.Do(t, "PUT", base+"/nocomponent", `{"state":"on"}`), "indicator")
		mustFaultNaming(t, "unknown indicator", owner.Do(t, "PUT", base+"/x@system", `{"state":"on"}`), "indicator")
		mustFaultNaming(t, "unknown indicator", reader.Do(t, "GET", base+"/x@disk", nil), "indicator")
		mustStatus(t, owner.Do(t, "PUT", base+"/"+sysLED, map[string]any{"state": "blinking"}), 204)
		mustStatus(t, owner.Do(t, "PUT", base+"/"+chLED, map[string]any{"state": "off"}), 204)
		if s, c := sim.Resource(t, sim.SystemPath("1"))["IndicatorLED"], sim.Resource(t, chassisPath)["IndicatorLED"]; s != "Blinking" || c != "Off" {
			t.Errorf("simulator LEDs after PUT: system %v, chassis %v", s, c)
		}
		if s := reader.Do(t, "GET", base+"/"+chLED, nil).JSON(t)["state"]; s != "off" {
			t.Errorf("chassis LED after PUT: %v", s)
		}
		auditedRule(t, clients["system-reader"], "baremetal:node:set_indicator_state")

		// inject_nmi is SYSTEM_MEMBER_OR_OWNER_ADMIN: the owner's admin
		// sends it, the owner's member may not.
		nmi := "/v1/nodes/" + id + "/management/inject_nmi"
		nv := api.VerInjectNMI
		mustStatus(t, atVer(admin, nv-1).Do(t, "PUT", nmi, nil), 404)
		mustStatus(t, atVer(clients["owner-member"], nv).Do(t, "PUT", nmi, nil), 403)
		mustFaultNaming(t, "NMI with a body", atVer(admin, nv).Do(t, "PUT", nmi, `{"now":true}`), "now")
		mustStatus(t, atVer(clients["owner-admin"], nv).Do(t, "PUT", nmi, nil), 204)
		var sent bool
		for _, b := range sim.Bodies(t) {
			sent = sent || strings.Contains(b, "ComputerSystem.Reset") && strings.Contains(b, `"Nmi"`)
		}
		if !sent {
			t.Errorf("the simulator saw no Reset with Nmi: %v", sim.Bodies(t))
		}
		auditedRule(t, clients["system-reader"], "baremetal:node:inject_nmi")
	})
}

// TestManagementOverIPMI drives the same endpoints against ipmi_sim: the
// chassis identify light is IPMI's one indicator (set, never read back),
// NMI is "chassis power diag", which ipmi_sim refuses, and boot modes
// are a redfish matter.
func TestManagementOverIPMI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.Start(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "ipmi-m", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password)})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		base := "/v1/nodes/" + id + "/management/indicators"
		r = admin.Do(t, "GET", base, nil)
		mustStatus(t, r, 200)
		list := r.JSON(t)["indicators"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["name"] != "identify@chassis" {
			t.Fatalf("ipmi indicators: %s", r.Body)
		}
		if s := admin.Do(t, "GET", base+"/identify@chassis", nil).JSON(t)["state"]; s != "unknown" {
			t.Errorf("identify state %v", s)
		}
		mustFaultNaming(t, "blinking identify", admin.Do(t, "PUT", base+"/identify@chassis", `{"state":"blinking"}`), "state")
		mustStatus(t, admin.Do(t, "PUT", base+"/identify@chassis", `{"state":"on"}`), 204)
		mustStatus(t, admin.Do(t, "PUT", base+"/identify@chassis", `{"state":"off"}`), 204)
		var identify []string
		for _, e := range sim.Events() {
			if strings.HasPrefix(e, "identify") {
				identify = append(identify, e)
			}
		}
		// ipmi_sim passes on interval and force: force on, then off.
		if !slices.Equal(identify, []string{"identify 0 1", "identify 0 0"}) {
			t.Errorf("chassis identify at the BMC: %v", sim.Events())
		}

		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/management/inject_nmi", nil)
		if r.Status != 400 || !strings.Contains(r.Fault(t), "driver ipmi") || !strings.Contains(r.Fault(t), "diagnostic interrupt") {
			t.Errorf("NMI on ipmi_sim: %d %s", r.Status, r.Body)
		}
		r = admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/boot_mode", `{"target":"uefi"}`)
		if r.Status != 400 || !strings.Contains(r.Fault(t), "driver ipmi") {
			t.Errorf("boot mode on ipmi: %d %s", r.Status, r.Body)
		}
	})
}

// selDeleted is ipmi_sim's "Last Del Time", which is "Not Available"
// until the SEL is first cleared.
func selDeleted(t *testing.T, sim *bmctest.Sim) string {
	t.Helper()
	out, err := exec.Command("ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", fmt.Sprint(sim.Port), "-U", bmctest.User,
		"-P", bmctest.Password, "-C", "3", "sel", "info").CombinedOutput()
	if err != nil {
		t.Fatalf("sel info: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Last Del Time" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("sel info has no Last Del Time: %s", out)
	return ""
}

// TestClearEventLogStep runs management.clear_event_log in manual
// cleaning: ipmi_sim's SEL is cleared; redfish-sim has no log service,
// so the step fails saying so.
func TestClearEventLogStep(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ipmi := bmctest.Start(t)
		rf := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		steps := []any{map[string]any{"interface": "management", "step": "clear_event_log"}}
		if d := selDeleted(t, ipmi); d != "Not Available" {
			t.Fatalf("SEL cleared before the step: %s", d)
		}
		for _, tc := range []struct {
			driver string
			info   map[string]any
			want   string
		}{
			{"ipmi", ipmi.DriverInfo(bmctest.Password), ""},
			{"redfish", rf.DriverInfo("1"), "the BMC offers no log service"},
		} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sel-" + tc.driver, "driver": tc.driver, "driver_info": tc.info})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			provision(t, admin, id, map[string]any{"target": "manage"}, 202)
			waitState(t, admin, id, "manageable")
			provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps}, 202)
			if tc.want == "" {
				if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
					t.Errorf("%s: clean_event_log: %v", tc.driver, n["last_error"])
				}
				continue
			}
			n := waitState(t, admin, id, "clean failed")
			if e := fmt.Sprint(n["last_error"]); !strings.Contains(e, tc.want) {
				t.Errorf("%s: last_error %q, want it to say %q", tc.driver, e, tc.want)
			}
		}
		if d := selDeleted(t, ipmi); d == "Not Available" {
			t.Errorf("the SEL was not cleared")
		}
		r := admin.Do(t, "GET", "/v1/nodes/sel-ipmi/steps", nil)
		if !strings.Contains(string(r.Body), `"clear_event_log"`) {
			t.Errorf("the ipmi step list lacks clear_event_log: %s", r.Body)
		}
	})
}
