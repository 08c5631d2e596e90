package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// storedInfo is a node's driver_info as stored, unmasked.
func storedInfo(t *testing.T, db *store.DB, id string) map[string]any {
	t.Helper()
	n, err := db.Node.Get(context.Background(), nodeID(t, db, id))
	if err != nil {
		t.Fatal(err)
	}
	return n.DriverInfo
}

// enrol creates a node owned by "own" and leased to "les" as the system
// admin and returns its UUID.
func enrol(t *testing.T, admin *servertest.Client, body map[string]any) string {
	t.Helper()
	body["owner"], body["lessee"] = "own", "les"
	r := admin.Do(t, "POST", "/v1/nodes", body)
	mustStatus(t, r, 201)
	return r.JSON(t)["uuid"].(string)
}

// TestSecretsFollowTheirAddress: a change of where or as whom Anvil logs
// in to a BMC (address, port, system, username, driver) is refused unless
// the same request sends the password or removes it, for every driver;
// a system-scoped caller may keep the old behaviour with keep_secrets,
// audited, and nobody else may.
func TestSecretsFollowTheirAddress(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		const pw = "stored-bmc-pw-7f3a"
		redfishInfo := func() map[string]any {
			return map[string]any{"redfish_address": "https://192.0.2.20", "redfish_system_id": "/redfish/v1/Systems/1",
				"redfish_username": "root", "redfish_password": pw}
		}
		ipmiInfo := func() map[string]any {
			return map[string]any{"ipmi_address": "192.0.2.21", "ipmi_username": "root", "ipmi_password": pw}
		}
		// refused checks a 400 naming the key and asking for the password,
		// and that driver_info and the driver are exactly as before.
		refused := func(c *servertest.Client, id, query, patch, key, secret string) {
			t.Helper()
			before := storedInfo(t, db, id)
			driver := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver"]
			r := c.Do(t, "PATCH", "/v1/nodes/"+id+query, patch)
			if r.Status != 400 || !strings.Contains(string(r.Body), key) || !strings.Contains(string(r.Body), secret) {
				t.Errorf("%s: %d %s, want a 400 naming %s and %s", patch, r.Status, r.Body, key, secret)
			}
			if strings.Contains(string(r.Body), pw) {
				t.Errorf("%s: the answer holds the password: %s", patch, r.Body)
			}
			if after := storedInfo(t, db, id); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("%s: refused, yet driver_info went from %v to %v", patch, before, after)
			}
			if d := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver"]; d != driver {
				t.Errorf("%s: refused, yet the driver went from %v to %v", patch, driver, d)
			}
		}
		taken := func(c *servertest.Client, id, query, patch string) map[string]any {
			t.Helper()
			r := c.Do(t, "PATCH", "/v1/nodes/"+id+query, patch)
			if r.Status != 200 {
				t.Errorf("%s: %d %s, want 200", patch, r.Status, r.Body)
			}
			return storedInfo(t, db, id)
		}

		// Redfish: each binding key alone is refused, however it is written.
		rf := enrol(t, admin, map[string]any{"driver": "redfish", "driver_info": redfishInfo()})
		for _, c := range []struct{ patch, key string }{
			{`[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.99"}]`, "redfish_address"},
			{`[{"op":"replace","path":"/driver_info/redfish_address","value":"http://192.0.2.20"}]`, "redfish_address"},
			{`[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.20:8443"}]`, "redfish_address"},
			{`[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.20/other"}]`, "redfish_address"},
			{`[{"op":"replace","path":"/driver_info/redfish_system_id","value":"/redfish/v1/Systems/2"}]`, "redfish_system_id"},
			{`[{"op":"replace","path":"/driver_info/redfish_username","value":"other"}]`, "redfish_username"},
			{`[{"op":"remove","path":"/driver_info/redfish_username"}]`, "redfish_username"},
			// The whole dict with the mask left in place keeps nothing either.
			{`[{"op":"replace","path":"/driver_info","value":{"redfish_address":"https://192.0.2.99","redfish_password":"******"}}]`, "redfish_address"},
			// Nor does naming the mask as the "new" password.
			{`[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.99"},{"op":"replace","path":"/driver_info/redfish_password","value":"******"}]`, "redfish_address"},
		} {
			refused(member, rf, "", c.patch, c.key, "redfish_password")
		}
		// Neighbours that do not say where or as whom are free.
		if got := taken(member, rf, "", `[{"op":"add","path":"/driver_info/redfish_auth_type","value":"basic"}]`); got["redfish_password"] != pw {
			t.Errorf("a neighbour's change lost the password: %v", got)
		}
		// Address and password together, as `baremetal node set
		// --driver-info a=… --driver-info p=…` sends them, are taken.
		got := taken(member, rf, "", `[{"op":"add","path":"/driver_info/redfish_address","value":"https://192.0.2.30"},{"op":"add","path":"/driver_info/redfish_password","value":"new-pw"}]`)
		if got["redfish_address"] != "https://192.0.2.30" || got["redfish_password"] != "new-pw" {
			t.Errorf("address with password: %v", got)
		}
		// So is a move that drops the password: the node has no
		// credentials left to send.
		got = taken(member, rf, "", `[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.31"},{"op":"remove","path":"/driver_info/redfish_password"}]`)
		if _, has := got["redfish_password"]; has || got["redfish_address"] != "https://192.0.2.31" {
			t.Errorf("address without password: %v", got)
		}

		// IPMI: address, port and username.
		ip := enrol(t, admin, map[string]any{"driver": "ipmi", "driver_info": ipmiInfo()})
		for _, c := range []struct{ patch, key string }{
			{`[{"op":"replace","path":"/driver_info/ipmi_address","value":"192.0.2.98"}]`, "ipmi_address"},
			{`[{"op":"add","path":"/driver_info/ipmi_port","value":6230}]`, "ipmi_port"},
			{`[{"op":"replace","path":"/driver_info/ipmi_username","value":"other"}]`, "ipmi_username"},
		} {
			refused(member, ip, "", c.patch, c.key, "ipmi_password")
			withPw := strings.TrimSuffix(c.patch, "]") + `,{"op":"replace","path":"/driver_info/ipmi_password","value":"pw-for-` + c.key + `"}]`
			if got := taken(member, ip, "", withPw); got["ipmi_password"] != "pw-for-"+c.key {
				t.Errorf("%s: %v", withPw, got)
			}
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+ip, []map[string]any{{"op": "replace", "path": "/driver_info", "value": ipmiInfo()}}), 200)
		}

		// A driver change carries every stored secret to another protocol,
		// and to keys that may already point elsewhere.
		fk := enrol(t, admin, map[string]any{"driver": "fake-hardware", "driver_info": ipmiInfo()})
		owner := clients["owner-admin"] // update:driver_interfaces is the owner admin's
		refused(owner, fk, "?reset_interfaces=true", `[{"op":"replace","path":"/driver","value":"ipmi"}]`, "driver", "ipmi_password")
		if got := taken(owner, fk, "?reset_interfaces=true", `[{"op":"replace","path":"/driver","value":"ipmi"},{"op":"replace","path":"/driver_info/ipmi_password","value":"pw-2"}]`); got["ipmi_password"] != "pw-2" {
			t.Errorf("driver change with the password: %v", got)
		}
		// A spelling of the same driver is no change.
		fk2 := enrol(t, admin, map[string]any{"driver": "fake", "driver_info": ipmiInfo()})
		taken(owner, fk2, "", `[{"op":"replace","path":"/driver","value":"fake-hardware"}]`)

		// keep_secrets: the system admin may, audited; without it even the
		// system admin is refused; nobody else may ask.
		sys := enrol(t, admin, map[string]any{"driver": "redfish", "driver_info": redfishInfo()})
		move := `[{"op":"replace","path":"/driver_info/redfish_address","value":"https://192.0.2.40"}]`
		refused(admin, sys, "", move, "redfish_address", "redfish_password")
		for _, who := range []string{"owner-member", "owner-admin", "system-reader"} {
			r := clients[who].Do(t, "PATCH", "/v1/nodes/"+sys+"?keep_secrets=true", move)
			if r.Status != 403 {
				t.Errorf("%s with keep_secrets: %d %s, want 403", who, r.Status, r.Body)
			}
		}
		wantFault(t, admin.Do(t, "PATCH", "/v1/nodes/"+sys+"?keep_secrets=maybe", move), 400, "keep_secrets")
		if got := storedInfo(t, db, sys); got["redfish_address"] != "https://192.0.2.20" {
			t.Errorf("refused keep_secrets requests moved the address: %v", got)
		}
		if got := taken(admin, sys, "?keep_secrets=true", move); got["redfish_address"] != "https://192.0.2.40" || got["redfish_password"] != pw {
			t.Errorf("keep_secrets: %v", got)
		}
		evs := admin.Do(t, "GET", "/v1/events?rule=baremetal:node:update&target_id="+sys, nil).JSON(t)["events"].([]any)
		kept := map[string]int{}
		for _, e := range evs {
			e := e.(map[string]any)
			if d, _ := e["detail"].(map[string]any); d["keep_secrets"] == true {
				kept[fmt.Sprint(e["user"], " ", e["status"])]++
			}
		}
		if kept["system-admin 200"] != 1 || kept["owner-member 403"] != 1 || kept["owner-admin 403"] != 1 {
			t.Errorf("keep_secrets audit: %v in %v", kept, evs)
		}
	})
}

// TestMovedAddressNeverGetsThePassword is the attack end to end: an owner
// member points a Redfish node at a listener of their own and asks for a
// power action. Every way of writing the move is refused, the node keeps
// talking to its own BMC, and the listener hears nothing.
func TestMovedAddressNeverGetsThePassword(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		var mu sync.Mutex
		var heard []string
		trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			heard = append(heard, fmt.Sprintf("%s %s Authorization=%q body=%q", r.Method, r.URL, r.Header.Get("Authorization"), body))
			mu.Unlock()
			// A service root that offers sessions, so a client that
			// trusts the address goes on to log in here.
			if r.URL.Path == "/redfish/v1/" || r.URL.Path == "/redfish/v1" {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/","RedfishVersion":"1.6.0","Systems":{"@odata.id":"/redfish/v1/Systems"},"Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`)
				return
			}
			w.WriteHeader(401)
		}))
		defer trap.Close()
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin, member := clients["system-admin"], clients["owner-member"]
		id := enrol(t, admin, map[string]any{"driver": "redfish", "driver_info": sim.DriverInfo("1")})

		for _, patch := range []string{
			fmt.Sprintf(`[{"op":"replace","path":"/driver_info/redfish_address","value":%q}]`, trap.URL),
			fmt.Sprintf(`[{"op":"add","path":"/driver_info/redfish_address","value":%q},{"op":"add","path":"/driver_info/redfish_auth_type","value":"basic"}]`, trap.URL),
			fmt.Sprintf(`[{"op":"replace","path":"/driver_info","value":{"redfish_address":%q,"redfish_username":%q,"redfish_password":"******"}}]`, trap.URL, bmctest.RedfishUser),
			fmt.Sprintf(`[{"op":"replace","path":"/driver_info/redfish_system_id","value":%q}]`, trap.URL+"/redfish/v1/Systems/1"),
		} {
			r := member.Do(t, "PATCH", "/v1/nodes/"+id, patch)
			if r.Status != 400 || !strings.Contains(string(r.Body), "redfish_password") {
				t.Errorf("%s: %d %s, want a 400 asking for redfish_password", patch, r.Status, r.Body)
			}
			mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
			n := waitPower(t, member, id)
			if n["power_state"] != "power on" || n["last_error"] != nil {
				t.Errorf("the node's own BMC: power %v, last_error %v", n["power_state"], n["last_error"])
			}
			mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power off"}), 202)
			waitPower(t, member, id)
		}
		if got := storedInfo(t, db, id); got["redfish_address"] != sim.URL || got["redfish_password"] != bmctest.RedfishPassword {
			t.Errorf("driver_info after the attempts: %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(heard) > 0 {
			t.Errorf("the listener was contacted:\n%s", strings.Join(heard, "\n"))
		}
	})
}

// TestPatchKeepsGuardedFieldsInPlace: driver_info is shown to the owner
// only, so an owner member may copy or move inside it but not into a
// field lessees read, whole or key by key; the lessee sees no BMC address
// anywhere afterwards.
func TestPatchKeepsGuardedFieldsInPlace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		const addr, user = "https://192.0.2.77", "bmc-admin-user"
		id := enrol(t, admin, map[string]any{"driver": "redfish",
			"driver_info": map[string]any{"redfish_address": addr, "redfish_username": user, "redfish_password": "pw-77"}})
		for _, patch := range []string{
			`[{"op":"copy","from":"/driver_info","path":"/extra/di"}]`,
			`[{"op":"copy","from":"/driver_info/redfish_address","path":"/extra/addr"}]`,
			`[{"op":"copy","from":"/driver_info/redfish_username","path":"/description"}]`,
			`[{"op":"copy","from":"/driver_info/redfish_address","path":"/properties/addr"}]`,
			`[{"op":"copy","from":"/driver_info/redfish_address","path":"/instance_info/addr"}]`,
			`[{"op":"move","from":"/driver_info/redfish_username","path":"/extra/user"}]`,
		} {
			r := member.Do(t, "PATCH", "/v1/nodes/"+id, patch)
			if r.Status != 400 || !strings.Contains(r.Fault(t), "driver_info") {
				t.Errorf("%s: %d %s, want a 400 naming driver_info", patch, r.Status, r.Body)
			}
			// A lessee may not even read what it would copy.
			mustStatus(t, clients["lessee-member"].Do(t, "PATCH", "/v1/nodes/"+id, patch), 403)
		}
		// Inside driver_info, copy and move stay as they were.
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/driver_info/note","value":"n"},{"op":"copy","from":"/driver_info/note","path":"/driver_info/note2"},{"op":"move","from":"/driver_info/note","path":"/driver_info/note3"}]`), 200)
		if got := storedInfo(t, db, id); got["note2"] != "n" || got["note3"] != "n" || got["redfish_address"] != addr {
			t.Errorf("copy and move within driver_info: %v", got)
		}
		for _, who := range []string{"lessee-reader", "lessee-member"} {
			for _, path := range []string{"/v1/nodes/" + id, "/v1/nodes/detail", "/v1/nodes/" + id + "/history?detail=true"} {
				if body := string(clients[who].Do(t, "GET", path, nil).Body); strings.Contains(body, "192.0.2.77") || strings.Contains(body, user) {
					t.Errorf("%s GET %s shows the BMC address or user: %s", who, path, body)
				}
			}
		}
	})
}
