package api_test

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBmclibBindingsFollowTheMachine: the keys that pick which machine a
// stored secret acts on bind it as the address does. An rpc webhook
// serving many machines is told which by bmclib_address, a Home
// Assistant token switches whatever entity it is sent with, a Redfish
// BMC with several systems drives the one bmclib_system_name names: an
// owner-project member who changes any of them without sending the
// secret again would power another project's machine with the
// operator's credentials.
func TestBmclibBindingsFollowTheMachine(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		member := atVer(clients["owner-member"], api.VerMax)
		for _, tc := range []struct {
			info           map[string]any
			key, to, bound string
		}{
			{map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node7", "bmclib_rpc_url": "http://127.0.0.1:9/hook", "bmclib_rpc_secret": "shared-hmac"},
				"bmclib_address", "rack2-node3", "bmclib_rpc_secret"},
			{map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_password": "ha-token", "bmclib_homeassistant_switch": "switch.rack1_node7"},
				"bmclib_homeassistant_switch", "switch.rack2_node3", "bmclib_password"},
			{map[string]any{"bmclib_provider": "redfish", "bmclib_address": "127.0.0.1", "bmclib_username": "root", "bmclib_password": "chassis-pw", "bmclib_system_name": "blade-1"},
				"bmclib_system_name", "blade-2", "bmclib_password"},
		} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "owner": "own", "driver_info": tc.info})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			p := member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/driver_info/" + tc.key, "value": tc.to}})
			if p.Status != 400 || !strings.Contains(p.Fault(t), tc.bound) {
				t.Errorf("%s: changing %s without %s: %d, want 400 naming it", tc.info["bmclib_provider"], tc.key, tc.bound, p.Status)
			}
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["driver_info"].(map[string]any)[tc.key] != tc.info[tc.key] {
				t.Errorf("%s: %s became %v", tc.info["bmclib_provider"], tc.key, n["driver_info"].(map[string]any)[tc.key])
			}
			// With the secret sent again it is the member's own to point.
			mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/driver_info/" + tc.key, "value": tc.to},
				{"op": "replace", "path": "/driver_info/" + tc.bound, "value": "the-members-own"}}), 200)
		}
	})
}

// TestBmclibHomeAssistantEntity: bmclib joins the switch entity into
// the path of every state read (url.JoinPath, which resolves "..") and
// sends the token along, so only an entity ID of the switch domain is
// taken: nothing that walks to another Home Assistant endpoint.
func TestBmclibHomeAssistantEntity(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		for _, sw := range []string{"../services/switch/turn_off", "switch.a/../../config", "switch.a?x=1", "switch.a#b", "switch.A b", "light.kitchen", "switch.", "switch.a%2F..%2Fconfig"} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": map[string]any{
				"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_password": "tok", "bmclib_homeassistant_switch": sw}})
			if r.Status != 400 || !strings.Contains(r.Fault(t), "bmclib_homeassistant_switch") {
				t.Errorf("switch %q: %d, want 400 naming bmclib_homeassistant_switch", sw, r.Status)
			}
		}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": map[string]any{
			"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_password": "tok", "bmclib_homeassistant_switch": "switch.rack1_node7"}})
		mustStatus(t, r, 201)
	})
}

// TestBmclibRPCRedirect: a webhook that answers with a redirect to an
// address outside --bmc-networks does not get Anvil there: bmclib's rpc
// client follows redirects, but every dial passes the allow-list.
func TestBmclibRPCRedirect(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		var reached atomic.Int32
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		outside := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached.Add(1) }))
		outside.Listener = ln
		outside.Start()
		defer outside.Close()
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, outside.URL+"/bmc", http.StatusTemporaryRedirect)
		}))
		defer hook.Close()
		o := bmcOpts
		o.Conductor.BMCNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		_, clients := startLocal(t, setting, o)
		t.Cleanup(func() { bmc.SetNetworks(nil) })
		admin := atVer(clients["system-admin"], api.VerMax)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": map[string]any{
			"bmclib_provider": "rpc", "bmclib_rpc_url": hook.URL + "/bmc", "bmclib_rpc_secret": "s"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		n := waitPower(t, admin, id)
		if e := fmt.Sprint(n["last_error"]); !strings.Contains(e, bmc.ErrNetwork.Error()) {
			t.Errorf("power on through a redirect outside the BMC networks: last_error %q", e)
		}
		if reached.Load() != 0 {
			t.Errorf("the redirect reached %s %d times", outside.URL, reached.Load())
		}
	})
}

// TestBmclibWrongPassword: a refused password is a credential refusal
// on every provider that logs in over HTTP, whatever words the
// provider wraps the BMC's answer in, so the third in a row puts the
// node into maintenance as any BMC's does.
func TestBmclibWrongPassword(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerMax)
		for _, tc := range []struct{ vendor, provider string }{
			{"dell", "dell"}, {"supermicro", "supermicro"}, {"asrockrack", "asrockrack"}, {"openbmc", "openbmc"}, {"openbmc", "redfish"},
		} {
			fake := bmctest.StartVendorBMC(t, tc.vendor)
			info := fake.DriverInfo()
			info["bmclib_provider"], info["bmclib_password"] = tc.provider, "not-the-password"
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": info})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			for i := range 3 {
				mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
				n := waitPower(t, admin, id)
				if e := fmt.Sprint(n["last_error"]); !strings.Contains(e, bmc.ErrAuth.Error()) || strings.Contains(e, "not-the-password") {
					t.Errorf("%s: wrong password, try %d: last_error %q", tc.provider, i+1, e)
					break
				}
			}
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["maintenance"] != true {
				t.Errorf("%s: after three refused passwords: maintenance %v", tc.provider, n["maintenance"])
			}
		}
	})
}

// TestBmclibScreenshotStaysWithItsProject: the console screenshot is what
// the machine showed its owner then; once the node goes to another
// project it is gone, as its console is, rather than shown to the next.
func TestBmclibScreenshotStaysWithItsProject(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerMax)
		fake := bmctest.StartVendorBMC(t, "dell")
		id := enrolVendor(t, admin, fake)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/owner", "value": "own"}}), 200)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "screenshot", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("screenshot: %v", n["last_error"])
		}
		mustStatus(t, clients["owner-member"].Do(t, "GET", "/v1/nodes/"+id+"/screenshot", nil), 200)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/owner", "value": "oth"}}), 200)
		for _, who := range []string{"other-member", "system-admin"} {
			if r := clients[who].Do(t, "GET", "/v1/nodes/"+id+"/screenshot", nil); r.Status != 404 {
				t.Errorf("%s reads the last owner's screenshot: %d (%d bytes)", who, r.Status, len(r.Body))
			}
		}
	})
}

// TestBmclibAnswerBounded: bmclib's vendor providers read whole answers
// into memory (Dell's screenshot is io.ReadAll of a JSON body), so a
// hostile or broken BMC could stream gigabytes within the call's time
// limit; a connection stops reading at bmc.MaxAnswerBytes, and the
// capture fails without the BMC's answer read to its end.
func TestBmclibAnswerBounded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerMax)
		fake := bmctest.StartVendorBMC(t, "dell")
		id := enrolVendor(t, admin, fake)
		fake.Screen = append(append([]byte(nil), bmctest.ScreenPNG...), make([]byte, 3*bmc.MaxAnswerBytes/2)...)
		body := base64.StdEncoding.EncodedLen(len(fake.Screen))
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "screenshot", nil))}, 202)
		if n := waitState(t, admin, id, "clean failed"); n["last_error"] == nil {
			t.Errorf("a %d-byte screenshot answer was taken", body)
		}
		if sent := fake.ScreenSent(); sent >= body {
			t.Errorf("the BMC's %d-byte answer was read to its end (%d bytes)", body, sent)
		}
	})
}

// TestBmclibWebhookPort: a webhook URL's port is 1 to 65535, refused at
// enrolment naming the field rather than at every call.
func TestBmclibWebhookPort(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		for _, u := range []string{"http://127.0.0.1:0/hook", "http://127.0.0.1:99999/hook", "http://[::1]:65536/hook"} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": map[string]any{
				"bmclib_provider": "rpc", "bmclib_rpc_url": u, "bmclib_rpc_secret": "s"}})
			if r.Status != 400 || !strings.Contains(r.Fault(t), "bmclib_rpc_url") {
				t.Errorf("webhook %s: %d, want 400 naming bmclib_rpc_url", u, r.Status)
			}
		}
	})
}
