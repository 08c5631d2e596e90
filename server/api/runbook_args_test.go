package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// Ironic stores a runbook or deploy template whose steps have the right
// shape, whatever their arguments (a runbook written for another driver
// or release), and its conductor checks the arguments when a run starts:
// the run fails before its first step, in clean failed, with last_error
// naming the argument, and nothing is done to the node (no step started,
// no maintenance, as Ironic's cleaning_error_handler leaves a node whose
// steps it could not compose).
func TestRunbookArgumentsCheckedWhenTheRunStarts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]

		r := admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_RAID", "public": true, "steps": []any{
			map[string]any{"interface": "power", "step": "power_on", "order": 1},
			map[string]any{"interface": "raid", "step": "create_configuration", "order": 2, "args": map[string]any{"logical_disks": []any{}}},
		}})
		mustStatus(t, r, 201)
		// A patch stores what a create would: a required argument left out.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_RAID", `[{"op":"add","path":"/steps/-","value":{"interface":"management","step":"set_boot_device","order":3,"args":{}}}]`), 200)
		r = admin.Do(t, "POST", "/v1/deploy_templates", map[string]any{"name": "CUSTOM_DT_RAID", "steps": []any{
			map[string]any{"interface": "raid", "step": "create_configuration", "priority": 10, "args": map[string]any{"logical_disks": []any{}}},
		}})
		mustStatus(t, r, 201)
		// The shape is still checked when stored.
		if f := admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_BAD", "steps": []any{
			map[string]any{"interface": "warp", "step": "drive", "order": 1}}}).Fault(t); !strings.Contains(f, `interface "warp"`) {
			t.Errorf("a step of no interface: %q", f)
		}

		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rb-args", "driver": "fake-hardware", "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_RAID", nil), 204)
		before := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["power_state"]
		provision(t, clients["owner-member"], id, map[string]any{"target": "clean", "runbook": "CUSTOM_RAID"}, 202)
		n := waitState(t, admin, id, "clean failed")
		want := `Cannot clean node ` + id + `: step 2 (raid.create_configuration): step raid.create_configuration takes no argument "logical_disks".`
		if n["last_error"] != want {
			t.Errorf("last_error %q, want %q", n["last_error"], want)
		}
		if n["maintenance"] != false || n["fault"] != nil || n["power_state"] != before || n["clean_step"] == nil || len(n["clean_step"].(map[string]any)) != 0 {
			t.Errorf("a run that could not start touched the node: maintenance %v fault %v power %v (was %v) clean_step %v",
				n["maintenance"], n["fault"], n["power_state"], before, n["clean_step"])
		}
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			if msg := e.(map[string]any)["event"].(string); strings.Contains(msg, "started") {
				t.Errorf("a step started: %s", msg)
			}
		}
		// Explicit steps are still refused at the request, as before.
		if f := provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create_configuration", map[string]any{"logical_disks": []any{}}))}, 400).Fault(t); !strings.Contains(f, "logical_disks") {
			t.Errorf("explicit steps with a bad argument: %q", f)
		}
	})
}

// A runbook takes the client's uuid, as Ironic's POST does: a malformed
// one is a 400 naming uuid, a taken one (even by a runbook the caller
// cannot see) a 409.
func TestRunbookCreateTakesTheClientsUUID(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, manager := clients["system-admin"], clients["other-manager"]
		body := func(name, uuid string) map[string]any {
			return map[string]any{"uuid": uuid, "name": name, "steps": rbSteps}
		}
		const id = "3A8C2E38-8E4B-4A4B-9B1D-0D4C2F1E5A77"
		r := admin.Do(t, "POST", "/v1/runbooks", body("CUSTOM_MINE", id))
		mustStatus(t, r, 201)
		if got := r.JSON(t)["uuid"]; got != strings.ToLower(id) {
			t.Errorf("uuid %v, want %s", got, strings.ToLower(id))
		}
		mustStatus(t, admin.Do(t, "GET", "/v1/runbooks/"+strings.ToLower(id), nil), 200)
		if r := admin.Do(t, "POST", "/v1/runbooks", body("CUSTOM_OTHER", "not-a-uuid")); r.Status != 400 || !strings.Contains(r.Fault(t), "uuid") {
			t.Errorf("a malformed uuid: %d %s", r.Status, r.Body)
		}
		if r := manager.Do(t, "POST", "/v1/runbooks", body("CUSTOM_THEIRS", id)); r.Status != 409 || !strings.Contains(r.Fault(t), "UUID") {
			t.Errorf("a taken uuid: %d %s", r.Status, r.Body)
		}
		mustStatus(t, manager.Do(t, "POST", "/v1/runbooks", body("CUSTOM_THEIRS", "")), 201)
		// A patch still cannot change it.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/runbooks/"+id, `[{"op":"replace","path":"/uuid","value":"4a8c2e38-8e4b-4a4b-9b1d-0d4c2f1e5a77"}]`), 400)
	})
}
