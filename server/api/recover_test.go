package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// A clean or service step that fails puts the node into maintenance with
// Ironic's fault (cleaning_error_handler, servicing_error_handler), out of
// band as in the agent; maintenance then refuses what Ironic refuses.
// A lessee member who ran the runbook recovers the node only when its
// publisher marked it retryable (anvil:node:recover): retry runs it again
// and return brings the node back, both ending the maintenance the
// failure set; otherwise they may ask the owner to look, and the owner's
// member (who may provision and clear maintenance) recovers it.
func TestFailedRunMaintenanceAndTenantRecovery(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, lessee, owner, other := clients["system-admin"], clients["lessee-member"], clients["owner-member"], clients["other-admin"]
		fw := func(url string) []any {
			return []any{map[string]any{"interface": "firmware", "step": "update", "order": 1,
				"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": url}}}}}
		}
		// Retryable is the default; the publisher of CUSTOM_FW_ONCE opts
		// out as the CLI would write it (--extra anvil_retryable=false).
		for name, optOut := range map[string]bool{"CUSTOM_FW_RETRY": false, "CUSTOM_FW_ONCE": true} {
			body := map[string]any{"name": name, "public": true, "steps": fw("https://images.example/fail-bios.bin")}
			if optOut {
				body["extra"] = map[string]any{"anvil_retryable": "false"}
			}
			mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", body), 201)
		}
		mk := func(name string) string {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "owner": "own", "lessee": "les"})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			for _, tr := range []string{"CUSTOM_FW_RETRY", "CUSTOM_FW_ONCE"} {
				mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/"+tr, nil), 204)
			}
			provision(t, admin, id, map[string]any{"target": "manage"}, 202)
			waitState(t, admin, id, "manageable")
			return id
		}
		// The retryable runbook fails in its step: maintenance and fault.
		id := mk("rec-1")
		provision(t, lessee, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW_RETRY"}, 202)
		n := waitState(t, admin, id, "clean failed")
		if n["maintenance"] != true || n["fault"] != "clean failure" || n["maintenance_reason"] != n["last_error"] {
			t.Fatalf("after a failed clean step: maintenance %v fault %v reason %v (last_error %v)", n["maintenance"], n["fault"], n["maintenance_reason"], n["last_error"])
		}
		// Maintenance refuses manual cleaning, as Ironic's conductor does.
		if f := provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil))}, 400).Fault(t); !strings.Contains(f, "maintenance mode") {
			t.Errorf("clean in maintenance: %q", f)
		}
		// A project that cannot see the node gets 404; bad actions 400.
		mustStatus(t, other.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "retry"}), 404)
		if f := lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "reboot"}); f.Status != 400 || !strings.Contains(f.Fault(t), "action") {
			t.Errorf("unknown action: %d %s", f.Status, f.Body)
		}
		// The lessee member retries: the run starts from clean failed,
		// maintenance ends with it, and it fails again (same image).
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "retry"}), 202)
		n = waitState(t, admin, id, "clean failed")
		if n["maintenance"] != true || n["fault"] != "clean failure" {
			t.Errorf("after the retried run failed: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		started := 0
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			if strings.Contains(e.(map[string]any)["event"].(string), "Step firmware.update started") {
				started++
			}
		}
		if started != 2 {
			t.Errorf("firmware.update started %d times, want 2 (the run and its retry)", started)
		}
		// Return: manageable again, out of maintenance.
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}), 202)
		n = waitState(t, admin, id, "manageable")
		if n["maintenance"] != false || n["fault"] != nil {
			t.Errorf("after return: maintenance %v fault %v", n["maintenance"], n["fault"])
		}
		// Maintenance an operator set is not the run's to clear.
		provision(t, lessee, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW_RETRY"}, 202)
		waitState(t, admin, id, "clean failed")
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/maintenance", map[string]any{"reason": "checking the BIOS chip"}), 202)
		if r := lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}); r.Status != 409 || strings.Contains(string(r.Body), "BIOS chip") {
			t.Errorf("return from an operator's maintenance: %d %s (want 409, reason unsaid)", r.Status, r.Body)
		}

		// A runbook its publisher opted out of retries: the lessee member may only
		// notify; the owner's member, who may provision and clear
		// maintenance by Ironic's defaults, recovers it.
		id = mk("rec-2")
		provision(t, lessee, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW_ONCE"}, 202)
		waitState(t, admin, id, "clean failed")
		for _, action := range []string{"retry", "return"} {
			if r := lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": action}); r.Status != 403 || !strings.Contains(r.Fault(t), "not retryable: its publisher opted out") {
				t.Errorf("%s of a runbook not retryable: %d %s", action, r.Status, r.Body)
			}
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "clean failed" || n["maintenance"] != true {
			t.Errorf("refused recoveries changed the node: %v, maintenance %v", n["provision_state"], n["maintenance"])
		}
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "notify"}), 204)
		asked := false
		for _, e := range owner.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			asked = asked || strings.Contains(e.(map[string]any)["event"].(string), "lessee-member asks the owner to look at the failed runbook CUSTOM_FW_ONCE")
		}
		if !asked {
			t.Error("the owner does not see the lessee's request in the node's history")
		}
		mustStatus(t, owner.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}), 202)
		if n := waitState(t, admin, id, "manageable"); n["maintenance"] != false {
			t.Errorf("the owner member's return left maintenance %v", n["maintenance"])
		}
		// Nothing to recover on a node that has not failed.
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "notify"}), 409)

		// Every recovery is audited under its rule.
		evs := admin.Do(t, "GET", "/v1/events?rule=anvil:node:recover", nil).JSON(t)
		if len(evs["events"].([]any)) < 6 {
			t.Errorf("recoveries audited: %d events", len(evs["events"].([]any)))
		}
	})
}
