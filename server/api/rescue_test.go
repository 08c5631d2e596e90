package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRescueFake: Ironic's rescue and unrescue on fake-hardware's fake
// rescue interface, with the password rules and the hash never shown;
// a driver whose rescue interface cannot rescue is a 400 naming it.
func TestRescueFake(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting)
		admin, member := cs["system-admin"], cs["owner-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rs", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")

		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"target": "rescue"}, "rescue_password"},
			{map[string]any{"target": "rescue", "rescue_password": "   "}, "rescue_password"},
			{map[string]any{"target": "rescue", "rescue_password": strings.Repeat("x", 256)}, "rescue_password"},
			{map[string]any{"target": "active", "rescue_password": "pw"}, "rescue_password"},
		} {
			if f := provision(t, member, id, bad.body, 400).Fault(t); !strings.Contains(f, bad.field) {
				t.Errorf("%v: fault %q", bad.body, f)
			}
		}
		provision(t, member, id, map[string]any{"target": "unrescue"}, 409)
		old := member.Version
		member.Version = "1.37"
		provision(t, member, id, map[string]any{"target": "rescue", "rescue_password": "pw"}, 406)
		member.Version = old

		provision(t, member, id, map[string]any{"target": "rescue", "rescue_password": "s3cret pass"}, 202)
		n := waitState(t, admin, id, "rescue")
		if ii := n["instance_info"].(map[string]any); ii["hashed_rescue_password"] != "******" {
			t.Errorf("instance_info shows %v", ii)
		}
		for _, p := range []string{"system-admin", "owner-member", "lessee-reader"} {
			if body := string(cs[p].Do(t, "GET", "/v1/nodes/"+id, nil).Body); strings.Contains(body, "$6$") || strings.Contains(body, "s3cret") {
				t.Errorf("%s sees the rescue password or its hash", p)
			}
		}
		provision(t, member, id, map[string]any{"target": "unrescue"}, 202)
		n = waitState(t, admin, id, "active")
		if _, ok := n["instance_info"].(map[string]any)["hashed_rescue_password"]; ok {
			t.Error("the hash outlived unrescue")
		}

		// redfish's default rescue interface is no-rescue.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rs2", "driver": "redfish",
			"driver_info": map[string]any{"redfish_address": "https://192.0.2.1", "redfish_username": "u", "redfish_password": "p"}})
		mustStatus(t, r, 201)
		rid := r.JSON(t)["uuid"].(string)
		setState(t, srv, rid, "active")
		if f := provision(t, admin, rid, map[string]any{"target": "rescue", "rescue_password": "pw"}, 400).Fault(t); !strings.Contains(f, "rescue_interface") {
			t.Errorf("no-rescue: %q", f)
		}
	})
}

// TestBaremetalCLIRescue: Debian's baremetal CLI rescues and unrescues a
// fake-hardware node, waiting for each state as an operator would.
func TestBaremetalCLIRescue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, admin := start(t, setting)
		bm := newCLI(t, srv.URL)
		id := availableNode(t, admin, map[string]any{"name": "cli-rescue", "driver": "fake-hardware"})
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")
		bm.run(false, "node", "rescue", "--rescue-password", "cli pass", "--wait", "60", "cli-rescue")
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "rescue" {
			t.Fatalf("after baremetal node rescue: %v (%v)", n["provision_state"], n["last_error"])
		}
		if out := bm.run(true, "node", "rescue", "cli-rescue"); !strings.Contains(out, "rescue-password") && !strings.Contains(out, "rescue_password") {
			t.Errorf("rescue without a password: %s", out)
		}
		bm.run(false, "node", "unrescue", "--wait", "60", "cli-rescue")
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "active" {
			t.Fatalf("after baremetal node unrescue: %v (%v)", n["provision_state"], n["last_error"])
		}
	})
}
