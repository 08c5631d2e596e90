package web_test

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// waitState waits until the node settles in state with no target.
func waitState(t *testing.T, api *servertest.Client, id, state string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] == state && n["target_provision_state"] == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v (%v), not %s", id, n["provision_state"], n["last_error"], state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOperatorActions: a system admin puts a node in and out of
// maintenance, manages and provides it, adds and removes a trait, retires
// and unretires it and deletes it (after a question) from the node page;
// each change is what the API then shows. The lessee's member sees every
// control disabled with the rule that refuses it, and is refused when it
// posts anyway, the node unchanged.
func TestOperatorActions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		id := ids["f-00"] // owner blue, lessee green
		root, gil := signInAs(t, srv, "root"), signInAs(t, srv, "gil")
		node := func() map[string]any { return api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t) }
		post := func(b *browser, path string, form url.Values) (int, string) {
			t.Helper()
			b.do("GET", "/nodes/"+id, nil)
			form.Set("csrf", b.csrf)
			st, body, _ := b.do("POST", "/nodes/"+id+path, form)
			return st, body
		}

		_, page, _ := gil.do("GET", "/nodes/"+id, nil)
		for testid, rule := range map[string]string{"maint-why": "baremetal:node:set_maintenance", "life-why": "baremetal:node:set_provision_state",
			"trait-add-why": "baremetal:node:traits:set", "retire-why": "baremetal:node:update:retired", "delete-why": "baremetal:node:delete",
			"test-why": "baremetal:node:validate"} {
			if !strings.Contains(page, `data-testid="`+testid+`">Not available: your role (member of green)`) || !strings.Contains(page, rule) {
				t.Errorf("lessee member: %s does not give the reason with %s", testid, rule)
			}
		}
		if !strings.Contains(page, `disabled aria-describedby="maint-why">Put in maintenance</button>`) {
			t.Errorf("lessee member: Put in maintenance is not disabled")
		}
		_, page, _ = root.do("GET", "/nodes/"+id, nil)
		if strings.Contains(page, `data-testid="maint-why"`) || !strings.Contains(page, ">Manage (check the BMC)</button>") {
			t.Fatalf("system admin: maintenance or manage not offered")
		}

		// Maintenance.
		if st, body := post(gil, "/maintenance", url.Values{"on": {"yes"}, "reason": {"mine"}}); st != 403 || !strings.Contains(body, "baremetal:node:set_maintenance") {
			t.Errorf("lessee member set maintenance: %d", st)
		}
		if node()["maintenance"] != false {
			t.Fatalf("a refused maintenance changed the node")
		}
		if st, _ := post(root, "/maintenance", url.Values{"on": {"yes"}, "reason": {"disk swap"}}); st != 303 {
			t.Fatalf("set maintenance: %d", st)
		}
		if n := node(); n["maintenance"] != true || n["maintenance_reason"] != "disk swap" {
			t.Fatalf("after maintenance on: %v %v", n["maintenance"], n["maintenance_reason"])
		}
		if _, page, _ = root.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "is in maintenance") || !strings.Contains(page, ">End maintenance</button>") {
			t.Errorf("no note of maintenance or no way out of it")
		}
		if st, _ := post(root, "/maintenance", url.Values{"on": {"no"}}); st != 303 || node()["maintenance"] != false {
			t.Fatalf("clear maintenance: %d %v", st, node()["maintenance"])
		}

		// Lifecycle.
		if st, _ := post(gil, "/lifecycle", url.Values{"target": {"manage"}}); st != 403 || node()["provision_state"] != "enroll" {
			t.Errorf("lessee member manage: %d, node %v", st, node()["provision_state"])
		}
		if st, body := post(root, "/lifecycle", url.Values{"target": {"deploy"}}); st != 400 || !strings.Contains(body, "choose manage, inspect or provide") {
			t.Errorf("a verb the section does not offer: %d", st)
		}
		if st, _ := post(root, "/lifecycle", url.Values{"target": {"manage"}}); st != 303 {
			t.Fatalf("manage: %d", st)
		}
		waitState(t, api, id, "manageable")

		// Traits.
		if st, _ := post(gil, "/traits", url.Values{"add": {"CUSTOM_GIL"}}); st != 403 {
			t.Errorf("lessee member add trait: %d", st)
		}
		if st, body := post(root, "/traits", url.Values{"add": {"not a trait"}}); st != 400 || !strings.Contains(body, `data-testid="problem-trait"`) {
			t.Errorf("bad trait: %d, want 400 next to the field", st)
		}
		if st, _ := post(root, "/traits", url.Values{"add": {"CUSTOM_OPS"}}); st != 303 {
			t.Fatalf("add trait: %d", st)
		}
		traits := func() []any { return api.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil).JSON(t)["traits"].([]any) }
		if !slices.Contains(traits(), any("CUSTOM_OPS")) || !slices.Contains(traits(), any("CUSTOM_X")) {
			t.Fatalf("traits after add: %v", traits())
		}
		if st, _ := post(root, "/traits", url.Values{}); st != 400 || len(traits()) != 2 {
			t.Errorf("an empty trait: %d, traits %v (must not remove them all)", st, traits())
		}
		if st, _ := post(root, "/traits", url.Values{"remove": {"CUSTOM_OPS"}}); st != 303 || slices.Contains(traits(), any("CUSTOM_OPS")) {
			t.Fatalf("remove trait: %d %v", st, traits())
		}

		// Retirement.
		if st, _ := post(gil, "/retire", url.Values{"retired": {"yes"}}); st != 403 || node()["retired"] != false {
			t.Errorf("lessee member retire: %d", st)
		}
		if st, _ := post(root, "/retire", url.Values{"retired": {"yes"}, "reason": {"end of life"}}); st != 303 {
			t.Fatalf("retire: %d", st)
		}
		if n := node(); n["retired"] != true || n["retired_reason"] != "end of life" {
			t.Fatalf("after retire: %v %v", n["retired"], n["retired_reason"])
		}
		if st, body := post(root, "/lifecycle", url.Values{"target": {"provide"}}); st != 400 || !strings.Contains(body, "retired") {
			t.Errorf("provide a retired node: %d", st)
		}
		if st, _ := post(root, "/retire", url.Values{"retired": {"no"}}); st != 303 || node()["retired"] != false || node()["retired_reason"] != nil {
			t.Fatalf("unretire: %d %v %v", st, node()["retired"], node()["retired_reason"])
		}
		if st, _ := post(root, "/lifecycle", url.Values{"target": {"provide"}}); st != 303 {
			t.Fatalf("provide: %d", st)
		}
		waitState(t, api, id, "available")

		// Delete, asked first.
		if st, _ := post(gil, "/delete", url.Values{"confirmed": {"yes"}}); st != 403 {
			t.Errorf("lessee member delete: %d", st)
		}
		st, body := post(root, "/delete", url.Values{})
		if st != 200 || !strings.Contains(body, `data-testid="confirm-delete"`) || api.Do(t, "GET", "/v1/nodes/"+id, nil).Status != 200 {
			t.Fatalf("delete without confirming: %d; the question must come first", st)
		}
		if st, _ := post(root, "/delete", url.Values{"confirmed": {"yes"}}); st != 303 {
			t.Fatalf("delete: %d", st)
		}
		if r := api.Do(t, "GET", "/v1/nodes/"+id, nil); r.Status != 404 {
			t.Fatalf("after delete the node answers %d", r.Status)
		}
	})
}

// TestOperatorEnrolAndBMC: a system admin enrols a redfish node on
// redfish-sim with two ports from the enrol form, tests the connection
// (the simulator is asked for the system), is told next to the address
// that changing it needs the password, and learns from the test when the
// credentials are wrong. No page shows the password. The lessee's member
// may not enrol, edit the BMC settings or test them.
func TestOperatorEnrolAndBMC(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		srv, api, _ := fleet(t, setting)
		root, gil := signInAs(t, srv, "root"), signInAs(t, srv, "gil")
		info := sim.DriverInfo("1")
		form := url.Values{"name": {"rf-new"}, "bmc_address": {"redfish://" + strings.TrimPrefix(sim.URL, "https://") + "/redfish/v1/Systems/1"},
			"bmc_username": {bmctest.RedfishUser}, "bmc_password": {bmctest.RedfishPassword}, "redfish_verify_ca": {sim.CAPEM},
			"resource_class": {"baremetal"}, "owner": {"blue"}, "lessee": {"green"}, "boot_mac": {"52:54:00:AA:BB:02"}}

		if st, page, _ := gil.do("GET", "/nodes/new", nil); st != 403 || !strings.Contains(page, "may enrol nodes; you are member of green.") {
			t.Errorf("lessee member enrol form: %d", st)
		}
		_, page, _ := gil.do("GET", "/nodes", nil)
		if strings.Contains(page, `data-testid="enrol-link"`) || !strings.Contains(page, `data-testid="enrol-disabled"`) {
			t.Errorf("lessee member is offered the enrol form, or not shown it disabled")
		}
		if _, page, _ = root.do("GET", "/nodes", nil); !strings.Contains(page, `data-testid="enrol-link"`) {
			t.Errorf("system admin is not offered the enrol form")
		}

		// Refused: no address; the reason is next to the field, what was
		// typed stays.
		root.do("GET", "/nodes/new", nil)
		bad := url.Values{"csrf": {root.csrf}, "name": {"rf-bad"}, "bmc_username": {"admin"}}
		st, page, _ := root.do("POST", "/nodes/new", bad)
		if st != 400 || !strings.Contains(page, `data-testid="problem-bmc_address"`) || !strings.Contains(page, `value="rf-bad"`) {
			t.Fatalf("enrol without an address: %d\n%s", st, page)
		}
		if r := api.Do(t, "GET", "/v1/nodes/rf-bad", nil); r.Status != 404 {
			t.Fatalf("a refused enrolment created a node: %d", r.Status)
		}

		form.Set("csrf", root.csrf)
		st, _, h := root.do("POST", "/nodes/new", form)
		if st != 303 || !strings.HasPrefix(h.Get("Location"), "/nodes/") {
			t.Fatalf("enrol: %d %s", st, h.Get("Location"))
		}
		n := api.Do(t, "GET", "/v1/nodes/rf-new", nil).JSON(t)
		id := n["uuid"].(string)
		if h.Get("Location") != "/nodes/"+id+"?ops=1" {
			t.Errorf("enrol redirects to %s, not the node", h.Get("Location"))
		}
		di := n["driver_info"].(map[string]any)
		if n["driver"] != "redfish" || n["resource_class"] != "baremetal" || n["owner"] != "blue" || n["lessee"] != "green" ||
			di["redfish_address"] != sim.URL || di["redfish_username"] != bmctest.RedfishUser || di["redfish_password"] != "******" || di["redfish_verify_ca"] != strings.TrimSpace(sim.CAPEM) {
			t.Fatalf("enrolled node: %v", n)
		}
		var macs []string
		for _, p := range api.Do(t, "GET", "/v1/ports?node="+id, nil).JSON(t)["ports"].([]any) {
			macs = append(macs, p.(map[string]any)["address"].(string))
		}
		if !slices.Equal(macs, []string{"52:54:00:aa:bb:02"}) {
			t.Fatalf("ports: %v", macs)
		}

		// Test connection: Anvil asks the BMC.
		asked := func() int {
			cnt := 0
			for _, r := range sim.Requests(t) {
				if strings.HasPrefix(r, "GET /redfish/v1/Systems/1 ") {
					cnt++
				}
			}
			return cnt
		}
		test := func(b *browser) (int, string) {
			t.Helper()
			b.do("GET", "/nodes/"+id, nil)
			st, page, _ := b.do("POST", "/nodes/"+id+"/test-bmc", url.Values{"csrf": {b.csrf}})
			return st, page
		}
		before := asked()
		st, page = test(root)
		if st != 200 || !strings.Contains(page, "The BMC answered: the node is powered off. Anvil can reach it and log in.") {
			t.Fatalf("test connection: %d\n%s", st, page)
		}
		if asked() <= before {
			t.Errorf("test connection did not ask the simulator")
		}
		// What the BMC said is the node's power state from now on, not at
		// the next power sync.
		if ps := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["power_state"]; ps != "power off" {
			t.Errorf("after the connection test the node's power state is %v, want power off", ps)
		}
		// The simulator's password is the word "password": look for it as
		// a value.
		if strings.Contains(page, `value="`+bmctest.RedfishPassword+`"`) || !strings.Contains(page, "A password is stored; it is never shown.") {
			t.Errorf("the node page shows the BMC password, or does not say one is stored")
		}

		// An address change without the password is refused next to the field.
		bmcForm := func(b *browser, set map[string]string) (int, string) {
			t.Helper()
			b.do("GET", "/nodes/"+id, nil)
			f := url.Values{"csrf": {b.csrf}}
			for k, v := range info {
				if k != "redfish_password" {
					f.Set(k, v.(string))
				}
			}
			for k, v := range set {
				f.Set(k, v)
			}
			st, page, _ := b.do("POST", "/nodes/"+id+"/bmc", f)
			return st, page
		}
		st, page = bmcForm(root, map[string]string{"redfish_address": "https://192.0.2.1"})
		if st != 400 || !strings.Contains(page, `data-testid="problem-redfish_address">Changing driver_info/redfish_address moves where the stored driver_info/redfish_password is sent`) {
			t.Fatalf("address change without the password: %d\n%s", st, page)
		}
		if a := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver_info"].(map[string]any)["redfish_address"]; a != sim.URL {
			t.Fatalf("a refused change stored address %v", a)
		}
		_, page, _ = gil.do("GET", "/nodes/"+id, nil)
		if !strings.Contains(page, `disabled aria-describedby="bmc-why">Save BMC settings</button>`) || !strings.Contains(page, ruleHTML("baremetal:node:update:driver_info")) ||
			!strings.Contains(page, `disabled aria-describedby="test-why">Test connection</button>`) {
			t.Errorf("lessee member: the BMC controls are not disabled with their rules")
		}
		if st, _ = bmcForm(gil, map[string]string{"redfish_username": "gil", "redfish_password": "x"}); st != 403 {
			t.Errorf("lessee member edits the BMC: %d", st)
		}
		if u := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver_info"].(map[string]any)["redfish_username"]; u != bmctest.RedfishUser {
			t.Fatalf("a refused edit stored user name %v", u)
		}
		before = asked()
		if st, page = test(gil); st != 403 || strings.Contains(page, "The BMC answered") || asked() != before {
			t.Errorf("lessee member tests the BMC: %d; the BMC must not be asked", st)
		}

		// Wrong credentials: saved, and the test says so.
		if st, _ = bmcForm(root, map[string]string{"redfish_username": "nobody", "redfish_password": "wrong-password"}); st != 303 {
			t.Fatalf("change the user: %d", st)
		}
		if u := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver_info"].(map[string]any)["redfish_username"]; u != "nobody" {
			t.Fatalf("user name after the change: %v", u)
		}
		if st, page = test(root); st != 200 || !strings.Contains(page, "refused the user name or password") {
			t.Fatalf("test with wrong credentials: %d\n%s", st, page)
		}
		if st, _ = bmcForm(root, map[string]string{"redfish_password": bmctest.RedfishPassword}); st != 303 {
			t.Fatalf("restore the credentials: %d", st)
		}
		if st, page = test(root); st != 200 || !strings.Contains(page, "The BMC answered") {
			t.Fatalf("test after restoring: %d", st)
		}
	})
}

// TestOperatorEnrolIPMI: the enrol form's IPMI fields (the port as typed)
// make a node whose BMC, ipmi_sim, answers "Test connection".
func TestOperatorEnrolIPMI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.Start(t)
		srv, api, _ := fleet(t, setting)
		root := signInAs(t, srv, "root")
		root.do("GET", "/nodes/new", nil)
		info := sim.DriverInfo(bmctest.Password)
		st, _, h := root.do("POST", "/nodes/new", url.Values{"csrf": {root.csrf}, "name": {"ipmi-new"},
			"bmc_address":  {"ipmi://" + info["ipmi_address"].(string) + ":" + strconv.Itoa(int(info["ipmi_port"].(float64)))},
			"bmc_username": {info["ipmi_username"].(string)}, "bmc_password": {bmctest.Password}, "console_interface": {"ipmitool-socat"}})
		if st != 303 {
			t.Fatalf("enrol: %d", st)
		}
		in := api.Do(t, "GET", "/v1/nodes/ipmi-new", nil).JSON(t)
		di := in["driver_info"].(map[string]any)
		if in["driver"] != "ipmi" || di["ipmi_address"] != "127.0.0.1" || di["ipmi_port"] != info["ipmi_port"] || di["ipmi_password"] != "******" || in["console_interface"] != "ipmitool-socat" {
			t.Fatalf("enrolled: %v %v %v", in["driver"], in["console_interface"], di)
		}
		loc := strings.TrimSuffix(h.Get("Location"), "?ops=1")
		root.do("GET", loc, nil)
		st, page, _ := root.do("POST", loc+"/test-bmc", url.Values{"csrf": {root.csrf}})
		want := map[string]string{"0": "powered off", "1": "powered on"}[sim.Power()]
		if st != 200 || !strings.Contains(page, "The BMC answered: the node is "+want+".") {
			t.Fatalf("test connection (sim power %s): %d\n%s", sim.Power(), st, page)
		}
	})
}

// TestOperatorBMCNetworks: with --bmc-networks, the enrol form refuses a
// BMC outside them next to the address, and "Test connection" on a node
// stored with such an address (before the networks were narrowed) says so
// instead of reaching out.
func TestOperatorBMCNetworks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		nets, err := bmc.ParseNetworks([]string{"127.0.0.0/8"})
		if err != nil {
			t.Fatal(err)
		}
		srv, api, ids := fleetWith(t, server.Options{Database: setting, Conductor: conductor.Config{BMCNetworks: nets}})
		defer bmc.SetNetworks(nil)
		root := signInAs(t, srv, "root")
		root.do("GET", "/nodes/new", nil)
		st, page, _ := root.do("POST", "/nodes/new", url.Values{"csrf": {root.csrf}, "name": {"far"},
			"bmc_address": {"redfish://192.0.2.1"}, "bmc_username": {"admin"}, "bmc_password": {"pw"}})
		if st != 400 || !strings.Contains(page, `data-testid="problem-bmc_address"`) || !strings.Contains(page, "BMC networks") {
			t.Fatalf("enrol outside the BMC networks: %d\n%s", st, page)
		}
		if r := api.Do(t, "GET", "/v1/nodes/far", nil); r.Status != 404 {
			t.Fatalf("a refused enrolment created a node: %d", r.Status)
		}
		id := ids["f-01"]
		if err := db.Node.Update().Where(node.UUID(id)).SetDriver("redfish").
			SetDriverInfo(map[string]any{"redfish_address": "https://192.0.2.1", "redfish_username": "admin", "redfish_password": "pw"}).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		root.do("GET", "/nodes/"+id, nil)
		st, page, _ = root.do("POST", "/nodes/"+id+"/test-bmc", url.Values{"csrf": {root.csrf}})
		if st != 200 || !strings.Contains(page, `data-testid="bmc-test">The BMC settings are incomplete or wrong: driver_info/redfish_address &#34;192.0.2.1&#34; is outside the BMC networks`) {
			t.Fatalf("test connection outside the networks: %d\n%s", st, page)
		}
	})
}

// TestOperatorEnrolSelfOwned: a project admin enrols a node its project
// owns (Ironic's create:self_owned_node); the form shows the owner fixed,
// and another owner typed in anyway is refused by the service.
func TestOperatorEnrolSelfOwned(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, _ := fleet(t, setting)
		ctx := context.Background()
		if err := srv.IDs.CreateUser(ctx, "ada", "ada-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "ada", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "admin"}); err != nil {
			t.Fatal(err)
		}
		ada := signInAs(t, srv, "ada")
		_, page, _ := ada.do("GET", "/nodes/new", nil)
		if !strings.Contains(page, `<input id="owner" name="owner" value="blue" readonly`) {
			t.Fatalf("project admin: owner not fixed to its project\n%s", page)
		}
		form := url.Values{"csrf": {ada.csrf}, "name": {"ada-1"}, "bmc_address": {"fake-hardware://"}, "owner": {"red"}}
		if st, _, _ := ada.do("POST", "/nodes/new", form); st != 403 {
			t.Errorf("project admin enrols for another project: %d", st)
		}
		if r := api.Do(t, "GET", "/v1/nodes/ada-1", nil); r.Status != 404 {
			t.Fatalf("a refused enrolment created a node: %d", r.Status)
		}
		form.Set("owner", "blue")
		if st, _, _ := ada.do("POST", "/nodes/new", form); st != 303 {
			t.Fatalf("project admin enrols for its project: %d", st)
		}
		if n := api.Do(t, "GET", "/v1/nodes/ada-1", nil).JSON(t); n["owner"] != "blue" || n["driver"] != "fake-hardware" {
			t.Fatalf("enrolled: %v %v", n["owner"], n["driver"])
		}
	})
}
