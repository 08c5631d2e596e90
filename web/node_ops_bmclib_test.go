package web_test

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestOperatorEnrolBmclib: the enrol form's address scheme
// bmclib+PROVIDER picks the bmclib driver and provider and shows that
// provider's own fields only. A system admin enrols an rpc node
// (bmclib+rpc+http://webhook) whose webhook (loopback, signatures
// checked) answers "Test connection"; what was typed for other providers
// is not saved, the secret is never shown again. An unknown provider, a
// missing secret and a webhook or BMC outside --bmc-networks come back
// as the form with the problem next to its field and no node made;
// moving the webhook without its secret is refused next to the URL, and
// switching the node to ipmitool drops the webhook and its secret.
func TestOperatorEnrolBmclib(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		nets, err := bmc.ParseNetworks([]string{"127.0.0.0/8"})
		if err != nil {
			t.Fatal(err)
		}
		srv, api, _ := fleetWith(t, server.Options{Database: setting, Conductor: conductor.Config{BMCNetworks: nets}})
		defer bmc.SetNetworks(nil)
		const secret = "portal-rpc-s3cret"
		hook := bmctest.NewRPCWebhook(secret, "on")
		ts := httptest.NewServer(hook)
		defer ts.Close()
		root := signInAs(t, srv, "root")

		// The address's scheme picks the provider, and the form shows that
		// provider's own fields only: rpc's machine name, not a port.
		_, page, _ := root.do("GET", "/nodes/new/driver?bmc_address="+url.QueryEscape("bmclib+rpc+"+ts.URL+"/bmc"), nil)
		if !strings.Contains(page, "bmclib, provider rpc") || !strings.Contains(page, `id="bmclib_address"`) || strings.Contains(page, `id="bmclib_port"`) ||
			strings.Contains(page, `id="bmclib_homeassistant_switch"`) {
			t.Errorf("rpc's fields:\n%s", page)
		}
		_, page, _ = root.do("GET", "/nodes/new/driver?bmc_address="+url.QueryEscape("bmclib+homeassistant://ha.lab"), nil)
		if !strings.Contains(page, `id="bmclib_homeassistant_switch"`) || strings.Contains(page, `id="bmclib_address"`) {
			t.Errorf("homeassistant's fields:\n%s", page)
		}

		enrol := func(name string, set map[string]string) (int, string, string) {
			t.Helper()
			root.do("GET", "/nodes/new", nil)
			f := url.Values{"csrf": {root.csrf}, "name": {name}}
			for k, v := range set {
				f.Set(k, v)
			}
			st, page, h := root.do("POST", "/nodes/new", f)
			return st, page, h.Get("Location")
		}
		for _, tc := range []struct {
			set         map[string]string
			field, said string
		}{
			{map[string]string{"bmc_address": "bmclib+gofish://127.0.0.1"}, "bmc_address", "bmclib has no provider"},
			{map[string]string{"bmc_address": "bmclib+rpc+" + ts.URL + "/bmc"}, "bmc_password", "requires the webhook secret"},
			{map[string]string{"bmc_address": "bmclib+rpc+http://192.0.2.1/bmc", "bmc_password": secret}, "bmc_address", "BMC networks"},
			{map[string]string{"bmc_address": "bmclib+ipmitool://10.1.2.3"}, "bmc_address", "BMC networks"},
		} {
			st, page, _ := enrol("bl-bad", tc.set)
			if st != 400 || !strings.Contains(page, `data-testid="problem-`+tc.field+`"`) || !strings.Contains(page, tc.said) || !strings.Contains(page, `value="bl-bad"`) {
				t.Errorf("%v: %d, want 400 next to %s saying %q\n%s", tc.set, st, tc.field, tc.said, page)
			}
			if strings.Contains(page, secret) {
				t.Errorf("%v: the refused form shows the secret", tc.set)
			}
		}
		if r := api.Do(t, "GET", "/v1/nodes/bl-bad", nil); r.Status != 404 {
			t.Fatalf("a refused enrolment created a node: %d", r.Status)
		}

		// rpc, with a user name and a port typed too: those are other
		// providers', and are not saved; the machine's name the webhook is
		// told is.
		st, _, loc := enrol("bl-rpc", map[string]string{"bmc_address": "bmclib+rpc+" + ts.URL + "/bmc", "bmc_password": secret,
			"bmclib_address": "rack1-node7", "bmc_username": "nobody", "bmclib_port": "623"})
		if st != 303 {
			t.Fatalf("enrol rpc: %d", st)
		}
		n := api.Do(t, "GET", "/v1/nodes/bl-rpc", nil).JSON(t)
		id := n["uuid"].(string)
		di := n["driver_info"].(map[string]any)
		if n["driver"] != "bmclib" || di["bmclib_provider"] != "rpc" || di["bmclib_rpc_url"] != ts.URL+"/bmc" || di["bmclib_rpc_secret"] != "******" ||
			di["bmclib_address"] != "rack1-node7" || di["bmclib_username"] != nil || di["bmclib_password"] != nil {
			t.Fatalf("enrolled: %v %v", n["driver"], di)
		}
		if loc != "/nodes/"+id+"?ops=1" {
			t.Errorf("enrol redirects to %s", loc)
		}

		// The node page: the provider chosen, the secret said to be
		// stored, never shown; Test connection asks the webhook.
		_, page, _ = root.do("GET", "/nodes/"+id, nil)
		if !strings.Contains(page, `<option value="rpc" selected>`) || !strings.Contains(page, "A password is stored; it is never shown.") || strings.Contains(page, secret) {
			t.Errorf("node page: provider not selected, or the secret shown or not said stored")
		}
		st, page, _ = root.do("POST", "/nodes/"+id+"/test-bmc", url.Values{"csrf": {root.csrf}})
		if st != 200 || !strings.Contains(page, "The BMC answered: the node is powered on. Anvil can reach it and log in.") {
			t.Fatalf("test connection: %d\n%s", st, page)
		}
		if _, _, bad, calls := hook.State(); bad != 0 || len(calls) == 0 || calls[len(calls)-1] != "getPowerState" {
			t.Errorf("webhook: %d refused signatures, calls %v", bad, calls)
		}

		bmcForm := func(set map[string]string) (int, string) {
			t.Helper()
			root.do("GET", "/nodes/"+id, nil)
			f := url.Values{"csrf": {root.csrf}}
			for k, v := range set {
				f.Set(k, v)
			}
			st, page, _ := root.do("POST", "/nodes/"+id+"/bmc", f)
			return st, page
		}
		// The webhook moved without its secret: refused next to the URL.
		st, page = bmcForm(map[string]string{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.2:9/bmc"})
		if st != 400 || !strings.Contains(page, `data-testid="problem-bmclib_rpc_url"`) || !strings.Contains(page, "bmclib_rpc_secret") {
			t.Fatalf("webhook moved without its secret: %d\n%s", st, page)
		}
		// Another provider: its fields saved, the webhook and its secret
		// dropped.
		if st, page = bmcForm(map[string]string{"bmclib_provider": "ipmitool", "bmclib_address": "127.0.0.1", "bmclib_port": "6230",
			"bmclib_username": "admin", "bmclib_password": "ipmi-pw", "bmclib_rpc_url": ts.URL + "/bmc"}); st != 303 {
			t.Fatalf("switch to ipmitool: %d\n%s", st, page)
		}
		di = api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver_info"].(map[string]any)
		if di["bmclib_provider"] != "ipmitool" || di["bmclib_address"] != "127.0.0.1" || di["bmclib_password"] != "******" ||
			di["bmclib_rpc_url"] != nil || di["bmclib_rpc_secret"] != nil {
			t.Errorf("after switching to ipmitool: %v", di)
		}
	})
}
