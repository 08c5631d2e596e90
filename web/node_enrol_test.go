package web_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// enrolForm posts the enrol form as b, after loading it for the CSRF
// token.
func enrolForm(b *browser, path string, form url.Values, header ...string) (int, string, http.Header) {
	b.t.Helper()
	b.do("GET", "/nodes/new", nil)
	form.Set("csrf", b.csrf)
	return b.do("POST", path, form, header...)
}

// TestEnrolAddressMapping: the BMC address's scheme picks the driver and
// fills driver_info (and the boot interface for virtual media) as metal3
// reads the same URLs; a bad address, or a driver_info key the address
// or the driver's fields get wrong, is a 400 next to that field, with
// no node made.
func TestEnrolAddressMapping(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, _ := fleet(t, setting)
		root := signInAs(t, srv, "root")
		for i, tc := range []struct {
			address string
			extra   map[string]string
			// driver, info (a subset of driver_info) and boot when made;
			// field and said when refused.
			driver string
			info   map[string]any
			boot   string
			field  string
			said   string
		}{
			{address: "redfish://10.0.0.5/redfish/v1/Systems/1", driver: "redfish",
				info: map[string]any{"redfish_address": "https://10.0.0.5", "redfish_system_id": "/redfish/v1/Systems/1", "redfish_username": "admin", "redfish_password": "******"}, boot: "ipxe"},
			{address: "redfish+http://bmc.lab:8000", driver: "redfish", info: map[string]any{"redfish_address": "http://bmc.lab:8000", "redfish_system_id": nil}},
			{address: "redfish-virtualmedia://10.0.0.6/redfish/v1/Systems/System.Embedded.1", extra: map[string]string{"redfish_verify_ca": "false"}, driver: "redfish",
				info: map[string]any{"redfish_address": "https://10.0.0.6", "redfish_system_id": "/redfish/v1/Systems/System.Embedded.1", "redfish_verify_ca": false}, boot: "redfish-virtual-media"},
			{address: "idrac://10.0.0.7", driver: "redfish", info: map[string]any{"redfish_address": "https://10.0.0.7"}, boot: "ipxe"},
			{address: "idrac-virtualmedia+https://10.0.0.8", driver: "redfish", info: map[string]any{"redfish_address": "https://10.0.0.8"}, boot: "redfish-virtual-media"},
			{address: "ipmi://10.0.0.9", driver: "ipmi", info: map[string]any{"ipmi_address": "10.0.0.9", "ipmi_port": nil, "ipmi_username": "admin"}},
			{address: "ipmi://[fd00::9]:6230", driver: "ipmi", info: map[string]any{"ipmi_address": "fd00::9", "ipmi_port": float64(6230)}},
			{address: "bmclib+supermicro://10.0.0.10", driver: "bmclib", info: map[string]any{"bmclib_provider": "supermicro", "bmclib_address": "10.0.0.10", "bmclib_username": "admin", "bmclib_password": "******"}},
			{address: "bmclib+homeassistant://ha.lab:8123", extra: map[string]string{"bmclib_homeassistant_switch": "switch.rack1_node7"}, driver: "bmclib",
				info: map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "ha.lab", "bmclib_port": float64(8123), "bmclib_homeassistant_switch": "switch.rack1_node7"}},
			{address: "fake-hardware://", driver: "fake-hardware", info: map[string]any{}},

			{address: "", field: "bmc_address", said: "give the BMC&#39;s address"},
			{address: "10.0.0.5", field: "bmc_address", said: "start the address with the BMC&#39;s protocol, such as redfish://10.0.0.5"},
			{address: "ilo5://10.0.0.5", field: "bmc_address", said: "there is no driver for ilo5://"},
			{address: "redfish://admin:pw-in-url@10.0.0.5", field: "bmc_address", said: "go in their own fields"},
			{address: "redfish://10.0.0.5/some/path", field: "bmc_address", said: "is not a system&#39;s"},
			{address: "ipmi://10.0.0.5:99999", field: "bmc_address", said: "port &#34;99999&#34; is not a number from 1 to 65535"},
			{address: "ipmi://10.0.0.5/x", field: "bmc_address", said: "an IPMI address has no path"},
			{address: "bmclib+gofish://10.0.0.5", field: "bmc_address", said: "bmclib has no provider &#34;gofish&#34;"},
			{address: "bmclib+rpc://hook", field: "bmc_address", said: "name the webhook&#39;s protocol"},
			{address: "ipmi://bad_host", field: "bmc_address", said: "the BMC address &#34;bad_host&#34; is not a host name or IP address"},
			{address: "bmclib+homeassistant://ha.lab", field: "bmclib_homeassistant_switch", said: "switch"},
			{address: "redfish://10.0.0.5", extra: map[string]string{"redfish_verify_ca": "maybe"}, field: "redfish_verify_ca", said: "verify the certificate must be true, false or a PEM CA bundle"},
		} {
			name := "map-" + strconv.Itoa(i)
			form := url.Values{"name": {name}, "bmc_address": {tc.address}, "bmc_username": {"admin"}, "bmc_password": {"pw"}}
			for k, v := range tc.extra {
				form.Set(k, v)
			}
			st, page, _ := enrolForm(root, "/nodes/new", form)
			if tc.field != "" {
				if st != 400 || !strings.Contains(page, `data-testid="problem-`+tc.field+`"`) || !strings.Contains(page, tc.said) || !strings.Contains(page, `href="#`+tc.field+`"`) {
					t.Errorf("%q: %d, want 400 next to %s saying %q\n%s", tc.address, st, tc.field, tc.said, page)
				}
				if r := api.Do(t, "GET", "/v1/nodes/"+name, nil); r.Status != 404 {
					t.Errorf("%q: a refused enrolment made a node", tc.address)
				}
				if strings.Contains(page, "pw-in-url") {
					t.Errorf("%q: the refused form shows the password typed into the address", tc.address)
				}
				continue
			}
			if st != 303 {
				t.Errorf("%q: %d\n%s", tc.address, st, page)
				continue
			}
			n := api.Do(t, "GET", "/v1/nodes/"+name, nil).JSON(t)
			di := n["driver_info"].(map[string]any)
			if n["driver"] != tc.driver {
				t.Errorf("%q: driver %v, want %s", tc.address, n["driver"], tc.driver)
			}
			for k, want := range tc.info {
				if di[k] != want {
					t.Errorf("%q: driver_info/%s = %v, want %v (%v)", tc.address, k, di[k], want, di)
				}
			}
			if tc.boot != "" && n["boot_interface"] != tc.boot {
				t.Errorf("%q: boot_interface %v, want %s", tc.address, n["boot_interface"], tc.boot)
			}
		}
	})
}

// TestEnrolFormErrors: every problem of the form at once, in a summary
// at the top linking to each field and again next to it; the password
// is not sent back and the form says to type it again; an owner project
// nothing uses is asked about before anything is made, then made once
// confirmed, with its boot port and console.
func TestEnrolFormErrors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, _ := fleet(t, setting)
		root := signInAs(t, srv, "root")
		form := url.Values{"name": {"bad name"}, "bmc_address": {"redfish://10.0.0.5"}, "bmc_username": {"admin"}, "bmc_password": {"s3cret-pw"},
			"redfish_verify_ca": {"maybe"}, "boot_mac": {"zz:00"}, "console_interface": {"ipmitool-socat"}, "owner": {strings.Repeat("x", 300)}}
		st, page, _ := enrolForm(root, "/nodes/new", form)
		if st != 400 || !strings.Contains(page, "5 problems to fix") {
			t.Fatalf("bad form: %d\n%s", st, page)
		}
		for _, f := range []string{"name", "redfish_verify_ca", "boot_mac", "console_interface", "owner"} {
			if !strings.Contains(page, `<a href="#`+f+`">`) || !strings.Contains(page, `data-testid="problem-`+f+`"`) {
				t.Errorf("no summary link or problem for %s", f)
			}
		}
		if strings.Contains(page, "s3cret-pw") || !strings.Contains(page, "Type the password again") {
			t.Errorf("the password is sent back, or the form does not say to type it again")
		}
		if !strings.Contains(page, `value="bad name"`) || !strings.Contains(page, `value="zz:00"`) {
			t.Errorf("what was typed is lost")
		}

		// An owner nothing uses yet: asked first, nothing made.
		good := url.Values{"name": {"new-1"}, "bmc_address": {"ipmi://10.0.0.9"}, "bmc_username": {"admin"}, "bmc_password": {"pw"},
			"boot_mac": {"52:54:00:0E:00:01"}, "console_interface": {"ipmitool-socat"}, "owner": {"bleu"}}
		st, page, _ = enrolForm(root, "/nodes/new", good)
		if st != 200 || !strings.Contains(page, `data-testid="confirm-new-project"`) || !strings.Contains(page, "No node, role or runbook uses project bleu yet.") {
			t.Fatalf("unknown owner: %d\n%s", st, page)
		}
		if r := api.Do(t, "GET", "/v1/nodes/new-1", nil); r.Status != 404 {
			t.Fatalf("enrolled before the new project was confirmed")
		}
		good.Set("new_project", "bleu")
		if st, page, _ = enrolForm(root, "/nodes/new", good); st != 303 {
			t.Fatalf("confirmed: %d\n%s", st, page)
		}
		n := api.Do(t, "GET", "/v1/nodes/new-1", nil).JSON(t)
		if n["owner"] != "bleu" || n["console_interface"] != "ipmitool-socat" {
			t.Errorf("enrolled: owner %v console %v", n["owner"], n["console_interface"])
		}
		ps := api.Do(t, "GET", "/v1/ports?node=new-1&detail=true", nil).JSON(t)["ports"].([]any)
		if len(ps) != 1 || ps[0].(map[string]any)["address"] != "52:54:00:0e:00:01" || ps[0].(map[string]any)["pxe_enabled"] != true {
			t.Errorf("boot port: %v", ps)
		}
		// The same name again: the service's refusal, next to the name.
		good.Set("boot_mac", "")
		if st, page, _ = enrolForm(root, "/nodes/new", good); st != 409 || !strings.Contains(page, `<a href="#name">`) {
			t.Errorf("a taken name: %d\n%s", st, page)
		}

		// Without JavaScript the address's fields come by sending the form;
		// nothing is refused or made.
		st, page, _ = enrolForm(root, "/nodes/new", url.Values{"bmc_address": {"bmclib+homeassistant://ha.lab"}, "step": {"fields"}})
		if st != 200 || !strings.Contains(page, `id="bmclib_homeassistant_switch"`) || strings.Contains(page, `id="redfish_verify_ca"`) || strings.Contains(page, "problems to fix") {
			t.Errorf("the address's fields without JavaScript: %d\n%s", st, page)
		}
		// An address changed to another driver after its fields were
		// shown: the new driver's fields first, nothing made.
		st, page, _ = enrolForm(root, "/nodes/new", url.Values{"name": {"changed-1"}, "bmc_address": {"redfish://10.0.0.5"}, "shown_driver": {"ipmi"}})
		if st != 200 || !strings.Contains(page, `data-testid="driver-changed"`) || !strings.Contains(page, `id="redfish_verify_ca"`) {
			t.Errorf("driver changed: %d\n%s", st, page)
		}
		if r := api.Do(t, "GET", "/v1/nodes/changed-1", nil); r.Status != 404 {
			t.Errorf("enrolled before the new driver's fields were shown")
		}
	})
}

// TestEnrolDisabledReason: a system manager, whom Ironic's default
// policy does not let enrol, sees the control disabled with who may
// (not hidden), and is refused the form, the connection test and the
// CSV upload.
func TestEnrolDisabledReason(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		if err := srv.IDs.CreateUser(ctx, "max", "max-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "max", identity.Assignment{Scope: identity.Scope{System: true}, Role: "manager"}); err != nil {
			t.Fatal(err)
		}
		max := signInAs(t, srv, "max")
		const why = "Only system admins and project admins (nodes their project owns) may enrol nodes; you are system manager."
		_, page, _ := max.do("GET", "/nodes", nil)
		if !strings.Contains(page, `<button type="button" disabled aria-describedby="enrol-why" data-testid="enrol-disabled">Enrol a node</button>`) ||
			!strings.Contains(page, why) || strings.Contains(page, `data-testid="enrol-link"`) {
			t.Errorf("system manager: no disabled control with the reason\n%s", page)
		}
		if st, page, _ := max.do("GET", "/nodes/new", nil); st != 403 || !strings.Contains(page, why) {
			t.Errorf("system manager enrol form: %d", st)
		}
		max.do("GET", "/nodes", nil)
		if st, _, _ := max.do("POST", "/nodes/new/test", url.Values{"csrf": {max.csrf}, "bmc_address": {"fake-hardware://"}}); st != 403 {
			t.Errorf("system manager tests a BMC: %d", st)
		}
		if st, _, _ := max.do("POST", "/nodes/new", url.Values{"csrf": {max.csrf}, "name": {"max-1"}, "bmc_address": {"fake-hardware://"}}); st != 403 {
			t.Errorf("system manager enrols: %d", st)
		}
		if st, _ := uploadCSV(max, "apply", "bmc_address\nfake-hardware://\n"); st != 403 {
			t.Errorf("system manager uploads a CSV: %d", st)
		}
		root := signInAs(t, srv, "root")
		if _, page, _ := root.do("GET", "/nodes", nil); !strings.Contains(page, `data-testid="enrol-link"`) || strings.Contains(page, "enrol-disabled") {
			t.Errorf("system admin is not offered the enrol form")
		}
	})
}

// TestEnrolTestConnection: "Test connection" asks the BMC the form
// describes before anything is saved: the Redfish simulator answers with
// its power state (as a fragment for htmx), wrong credentials are said
// as such, a bad address is not tried, and nobody who may not enrol
// makes Anvil ask.
func TestEnrolTestConnection(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		srv, api, _ := fleet(t, setting)
		root, gil := signInAs(t, srv, "root"), signInAs(t, srv, "gil")
		form := url.Values{"name": {"tc-1"}, "bmc_address": {"redfish://" + strings.TrimPrefix(sim.URL, "https://") + "/redfish/v1/Systems/1"},
			"bmc_username": {bmctest.RedfishUser}, "bmc_password": {bmctest.RedfishPassword}, "redfish_verify_ca": {sim.CAPEM}}
		asked := func() int { return len(sim.Requests(t)) }

		before := asked()
		st, page, _ := enrolForm(root, "/nodes/new/test", form)
		if st != 200 || !strings.Contains(page, `data-testid="enrol-test">The BMC answered: the machine is powered off. Anvil can reach it and log in.`) ||
			!strings.Contains(page, "Type the password again") || asked() == before {
			t.Fatalf("test connection: %d\n%s", st, page)
		}
		if r := api.Do(t, "GET", "/v1/nodes/tc-1", nil); r.Status != 404 {
			t.Fatalf("testing the connection made a node")
		}
		st, page, _ = enrolForm(root, "/nodes/new/test", form, "HX-Request", "true")
		if st != 200 || !strings.HasPrefix(strings.TrimSpace(page), `<div id="bmc-test"><p class="flash" role="status" tabindex="-1" autofocus`) {
			t.Errorf("htmx test connection: %d\n%s", st, page)
		}
		form.Set("bmc_password", "wrong-password")
		if st, page, _ = enrolForm(root, "/nodes/new/test", form); st != 200 || !strings.Contains(page, "refused the user name or password") {
			t.Errorf("wrong password: %d\n%s", st, page)
		}
		before = asked()
		bad := url.Values{"bmc_address": {"redfish://10.0.0.5/not/a/system"}}
		if st, page, _ = enrolForm(root, "/nodes/new/test", bad); st != 200 || !strings.Contains(page, "Not tested: BMC address: the path") || asked() != before {
			t.Errorf("bad address: %d\n%s", st, page)
		}
		form.Set("bmc_password", bmctest.RedfishPassword)
		gil.do("GET", "/nodes", nil)
		form.Set("csrf", gil.csrf)
		if st, _, _ = gil.do("POST", "/nodes/new/test", form); st != 403 || asked() != before {
			t.Errorf("lessee member tests a BMC: %d (the BMC must not be asked)", st)
		}
	})
}

// uploadCSV posts a CSV file to /nodes/import with action (dry-run or
// apply) and the new projects confirmed.
func uploadCSV(b *browser, action, data string, newProjects ...string) (int, string) {
	b.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("csrf", b.csrf)
	mw.WriteField("action", action)
	for _, p := range newProjects {
		mw.WriteField("new_project", p)
	}
	fw, _ := mw.CreateFormFile("csv", "nodes.csv")
	fw.Write([]byte(data))
	mw.Close()
	req, _ := http.NewRequest("POST", b.base+"/nodes/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestEnrolCSV: a CSV dry run says of every row whether it would be
// created or why not (a bad address, a name taken in Anvil or earlier in
// the file, a duplicate boot MAC), makes nothing, and names new
// projects; applying creates the rows that pass, each through the nodes
// service (so audited), and holds back a new project's row until it is
// confirmed. A project admin's rows for another owner are refused. A
// file Anvil cannot read is one sentence.
func TestEnrolCSV(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, _ := fleet(t, setting)
		root := signInAs(t, srv, "root")
		root.do("GET", "/nodes/import", nil)
		const file = "name,bmc_address,username,password,boot_mac,owner,lessee,console\n" +
			"csv-1,ipmi://10.0.1.1,admin,pw,52:54:00:0c:00:01,blue,,ipmitool-socat\n" +
			"csv-2,redfish://10.0.1.2/redfish/v1/Systems/1,admin,pw,,blue,green,\n" +
			"csv-3,10.0.1.3,admin,pw,,blue,,\n" +
			"f-00,fake-hardware://,,,,blue,,\n" +
			"csv-1,fake-hardware://,,,,,,\n" +
			"csv-6,fake-hardware://,,,52:54:00:0C:00:01,,,\n" +
			"csv-7,fake-hardware://,,,,bleu,,\n" +
			"csv-8,redfish://admin:s3cret-in-url@10.0.1.8,,,,,,\n"
		st, page := uploadCSV(root, "dry-run", file)
		if st != 200 || !strings.Contains(page, "Dry run: 3 of 8 rows would be enrolled") {
			t.Fatalf("dry run: %d\n%s", st, page)
		}
		for _, want := range []string{"Would be created.", "Refused: BMC address: start the address with the BMC&#39;s protocol",
			"Refused: Name: a node named f-00 exists.", "Refused: Name: line 2 names a node csv-1 too.",
			"Refused: Boot MAC address: line 2 has 52:54:00:0c:00:01 too.", "Project bleu is new: check the spelling.", `value="bleu"`} {
			if !strings.Contains(page, want) {
				t.Errorf("dry run does not say %q", want)
			}
		}
		if strings.Contains(page, "s3cret-in-url") || !strings.Contains(page, "redfish://admin:xxxxx@10.0.1.8") {
			t.Errorf("the dry run shows a password typed into an address")
		}
		if r := api.Do(t, "GET", "/v1/nodes/csv-1", nil); r.Status != 404 {
			t.Fatalf("the dry run made a node")
		}

		st, page = uploadCSV(root, "apply", file)
		if st != 200 || !strings.Contains(page, "2 of 8 rows enrolled") || !strings.Contains(page, "Not enrolled: project bleu is new") {
			t.Fatalf("apply: %d\n%s", st, page)
		}
		n := api.Do(t, "GET", "/v1/nodes/csv-1", nil).JSON(t)
		if n["driver"] != "ipmi" || n["owner"] != "blue" || n["console_interface"] != "ipmitool-socat" || n["driver_info"].(map[string]any)["ipmi_password"] != "******" {
			t.Errorf("csv-1: %v", n)
		}
		if ps := api.Do(t, "GET", "/v1/ports?node=csv-1", nil).JSON(t)["ports"].([]any); len(ps) != 1 {
			t.Errorf("csv-1's boot port: %v", ps)
		}
		if n := api.Do(t, "GET", "/v1/nodes/csv-2", nil).JSON(t); n["lessee"] != "green" || n["driver"] != "redfish" {
			t.Errorf("csv-2: %v", n)
		}
		if !strings.Contains(page, `href="/nodes/`+n["uuid"].(string)+`"`) {
			t.Errorf("the applied rows do not link their nodes")
		}
		for _, name := range []string{"csv-3", "csv-6", "csv-7"} {
			if r := api.Do(t, "GET", "/v1/nodes/"+name, nil); r.Status != 404 {
				t.Errorf("refused row %s was enrolled", name)
			}
		}
		ev := api.Do(t, "GET", "/v1/events?limit=200", nil)
		if !strings.Contains(string(ev.Body), n["uuid"].(string)) {
			t.Errorf("no audit event for csv-2's creation")
		}

		// Confirmed: the new project's row is made; the others are now
		// taken names.
		if st, page = uploadCSV(root, "apply", file, "bleu"); st != 200 || !strings.Contains(page, "1 of 8 rows enrolled") {
			t.Fatalf("apply confirmed: %d\n%s", st, page)
		}
		if n := api.Do(t, "GET", "/v1/nodes/csv-7", nil).JSON(t); n["owner"] != "bleu" {
			t.Errorf("csv-7: %v", n)
		}

		// A project admin enrols only nodes its project owns.
		if err := srv.IDs.CreateUser(context.Background(), "ada", "ada-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(context.Background(), "ada", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "admin"}); err != nil {
			t.Fatal(err)
		}
		ada := signInAs(t, srv, "ada")
		st, page = uploadCSV(ada, "dry-run", "name,bmc_address,owner\nada-1,fake-hardware://,red\nada-2,fake-hardware://,\n")
		if st != 200 || !strings.Contains(page, "Refused: Owner project: you may enrol only nodes project blue owns.") || !strings.Contains(page, "1 of 2 rows would be enrolled") {
			t.Errorf("project admin's dry run: %d\n%s", st, page)
		}

		for _, bad := range []struct{ file, said string }{
			{"name,colour\nx,red\n", "column &#34;colour&#34; is not one Anvil reads"},
			{"name\nx\n", "the file has no bmc_address column"},
			{"name,bmc_address\n", "the file has a header but no rows"},
		} {
			if st, page = uploadCSV(root, "dry-run", bad.file); st != 400 || !strings.Contains(page, bad.said) {
				t.Errorf("%q: %d\n%s", bad.file, st, page)
			}
		}
	})
}
