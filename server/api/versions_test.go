package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAllocationPrefersNamedNode (1.79): an allocation named like one of
// its candidates gets that node, every time, though candidates are
// otherwise tried in random order; an allocation named like no node still
// gets one.
func TestAllocationPrefersNamedNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, admin := start(t, setting)
		ids := map[string]string{}
		for i := range 8 {
			name := fmt.Sprintf("compute-%d", i)
			ids[name] = availableNode(t, admin, map[string]any{"name": name})
		}
		// Each allocation takes its node, so the named node is still free
		// for the next; compute-0 goes last, when only it is left.
		for i := 7; i >= 1; i-- {
			name := fmt.Sprintf("compute-%d", i)
			if a := allocate(t, admin, map[string]any{"resource_class": "baremetal", "name": name}); a["state"] != "active" || a["node_uuid"] != ids[name] {
				t.Fatalf("allocation %s: state %v, node %v; want node %s", name, a["state"], a["node_uuid"], ids[name])
			}
		}
		if a := allocate(t, admin, map[string]any{"resource_class": "baremetal", "name": "web-1"}); a["state"] != "active" || a["node_uuid"] != ids["compute-0"] {
			t.Fatalf("allocation web-1: state %v, node %v; want the last free node", a["state"], a["node_uuid"])
		}
	})
}

// TestVerbsAtTheirVersion: provide (1.4), abort (1.13), adopt (1.17),
// unhold (1.85), service (1.87), disable_ramdisk for servicing (1.108) and
// provisioning by runbook (1.92) are refused
// with 406 below the version that offers them, before the node's state is
// looked at; from it the request reaches the state machine, which refuses
// an enrolled node with 409.
func TestVerbsAtTheirVersion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "verbs", "driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		r = c.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_VERBS", "steps": rbSteps})
		mustStatus(t, r, 201)
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_VERBS", nil), 204)
		for _, tc := range []struct {
			body  map[string]any
			since api.Version
		}{
			{map[string]any{"target": "provide"}, api.VerManageable},
			{map[string]any{"target": "abort"}, api.VerAbort},
			{map[string]any{"target": "adopt"}, api.VerAdopt},
			{map[string]any{"target": "unhold"}, api.VerUnhold},
			{map[string]any{"target": "service", "service_steps": []map[string]any{{"interface": "power", "step": "reboot"}}}, api.VerService},
			{map[string]any{"target": "service", "service_steps": []map[string]any{{"interface": "power", "step": "reboot"}}, "disable_ramdisk": true}, api.VerServiceRamdisk},
			{map[string]any{"target": "clean", "runbook": "CUSTOM_VERBS"}, api.VerRunbooks},
		} {
			from := tc.since
			c.Version = (from - 1).String()
			if r := c.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", tc.body); r.Status != 406 {
				t.Errorf("%v at %s: status %d, want 406: %s", tc.body, c.Version, r.Status, r.Body)
			}
			c.Version = from.String()
			if r := c.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", tc.body); r.Status != 409 {
				t.Errorf("%v at %s: status %d, want 409 (enroll): %s", tc.body, c.Version, r.Status, r.Body)
			}
		}
	})
}

// TestPatchKeysWithTildeAndSlash (1.98): a patch path names a key holding
// "/" or "~" with RFC 6901's ~1 and ~0, at every version, as Ironic's
// JSON patch always did; Ironic's 1.98 extends the same decoding to the
// top-level field name, and no field's name holds either character.
func TestPatchKeysWithTildeAndSlash(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "escapes", "driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		c.Version = "1.1"
		r = c.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/extra/rack~1slot", "value": "a"},
			{"op": "add", "path": "/extra/home~0dir", "value": "b"},
		})
		mustStatus(t, r, 200)
		extra := r.JSON(t)["extra"].(map[string]any)
		if extra["rack/slot"] != "a" || extra["home~dir"] != "b" || len(extra) != 2 {
			t.Fatalf("extra = %v, want rack/slot and home~dir", extra)
		}
		r = c.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/extra/rack~1slot"}})
		mustStatus(t, r, 200)
		if extra := r.JSON(t)["extra"].(map[string]any); len(extra) != 1 || extra["home~dir"] != "b" {
			t.Fatalf("after remove, extra = %v", extra)
		}
	})
}

// TestRequestIDHeaders (1.107): every response, errors included, carries
// its request id as X-OpenStack-Request-Id and, as Ironic's oslo
// middleware also does, under the older name OpenStack-Request-Id.
func TestRequestIDHeaders(t *testing.T) {
	_, c := start(t, storetest.Setting(t, "sqlite"))
	for _, path := range []string{"/", "/v1/nodes", "/v1/nodes/missing"} {
		r := c.Do(t, "GET", path, nil)
		id := r.Header.Get("X-OpenStack-Request-Id")
		if !strings.HasPrefix(id, "req-") || r.Header.Get("OpenStack-Request-Id") != id {
			t.Errorf("GET %s (%d): X-OpenStack-Request-Id %q, OpenStack-Request-Id %q", path, r.Status, id, r.Header.Get("OpenStack-Request-Id"))
		}
	}
}

// TestHistoryRecordsProjectAndState (1.113, 1.115): a history event keeps
// the acting project and the node's provision state, target and seconds
// in that state when it was written (none while the state never changed,
// as Ironic); the system's own events name no project.
func TestHistoryRecordsProjectAndState(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting)
		admin, manager := clients["system-admin"], clients["owner-manager"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hist", "driver": "fake", "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, manager.Do(t, "PUT", "/v1/nodes/"+id+"/maintenance", map[string]any{"reason": "r"}), 202)
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		mustStatus(t, manager.Do(t, "PUT", "/v1/nodes/"+id+"/maintenance", map[string]any{"reason": "r"}), 202)
		evs, err := srv.DB.NodeEvent.Query().Where(nodeevent.EventType("maintenance")).Order(ent.Asc(nodeevent.FieldID)).All(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 {
			t.Fatalf("%d maintenance events, want 3", len(evs))
		}
		for i, want := range []struct {
			project, state string
			timed          bool
		}{{"own", "enroll", false}, {"", "enroll", false}, {"own", "manageable", true}} {
			e := evs[i]
			if e.Project != want.project || e.State != want.state || e.TargetProvisionState != "" || (e.DurationSeconds != nil) != want.timed {
				t.Errorf("event %d: project %q, state %q, target %q, duration %v; want %+v", i, e.Project, e.State, e.TargetProvisionState, e.DurationSeconds, want)
			}
		}
	})
}

// TestDisablePowerOff (1.95): a node with disable_power_off refuses power
// off and soft power off, through the API and as a runbook step, and its
// BMC is never asked; power on and reboot still work.
func TestDisablePowerOff(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, admin := start(t, setting)
		id := availableNode(t, admin, map[string]any{"name": "keep-on"})
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != "power on" {
			t.Fatalf("power state %v, want power on", n["power_state"])
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/disable_power_off","value":true}]`), 200)
		for _, target := range []string{"power off", "soft power off"} {
			r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target})
			mustStatus(t, r, 409)
			if f := r.Fault(t); !strings.Contains(f, "disable_power_off") {
				t.Errorf("%s: fault %q does not name disable_power_off", target, f)
			}
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "rebooting"}), 202)
		if n := waitPower(t, admin, id); n["power_state"] != "power on" {
			t.Fatalf("power state %v, want power on", n["power_state"])
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["power_state"] != "power on" || n["disable_power_off"] != true {
			t.Fatalf("node %v", n)
		}
		// At 1.94 the field is not there to set.
		old := admin.Version
		admin.Version = "1.94"
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/disable_power_off","value":false}]`), 406)
		admin.Version = old
	})
}
