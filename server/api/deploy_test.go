package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func TestDeployStateMachine(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "dep-1", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")

		// Verbs that need a deployed node name the state they met.
		for _, verb := range []string{"rebuild", "deleted", "undeploy"} {
			if f := provision(t, admin, id, map[string]any{"target": verb}, 409).Fault(t); !strings.Contains(f, `"available"`) {
				t.Errorf("%s: 409 fault %q does not name the state", verb, f)
			}
		}
		// Bad requests are refused before anything changes.
		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"target": "deleted", "configdrive": "aGVsbG8="}, "config drive"},
			{map[string]any{"target": "active", "configdrive": "not base64!"}, "configdrive format"},
			{map[string]any{"target": "active", "configdrive": map[string]any{"user_data": "x", "password": "y"}}, "password"},
			{map[string]any{"target": "active", "configdrive": 7}, "configdrive"},
			{map[string]any{"target": "active", "deploy_steps": steps(step("power", "power_on", nil))}, "priority"},
			{map[string]any{"target": "active", "deploy_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 90}}}, "unknown step"},
			{map[string]any{"target": "deleted", "deploy_steps": []any{map[string]any{"interface": "power", "step": "power_on", "priority": 90}}}, "deploy_steps"},
		} {
			if f := provision(t, admin, id, bad.body, 400).Fault(t); !strings.Contains(f, bad.field) {
				t.Errorf("%v: fault %q does not mention %s", bad.body, f, bad.field)
			}
		}
		old := admin.Version
		admin.Version = "1.72"
		provision(t, admin, id, map[string]any{"target": "deploy"}, 406)
		admin.Version = old

		// set_provision_state decides who deploys: not an owner reader or
		// a lessee member; another project does not see the node at all.
		deploy := map[string]any{"target": "active", "configdrive": "aGVsbG8=",
			"deploy_steps": []any{map[string]any{"interface": "power", "step": "power_off", "priority": 150}}}
		provision(t, clients["owner-reader"], id, deploy, 403)
		provision(t, clients["lessee-member"], id, deploy, 403)
		provision(t, clients["other-admin"], id, deploy, 404)
		provision(t, clients["owner-member"], id, deploy, 202)
		n := waitState(t, admin, id, "active")
		if n["power_state"] != "power on" || n["last_error"] != nil {
			t.Errorf("after deploy: power %v, last_error %v", n["power_state"], n["last_error"])
		}
		if cd := n["instance_info"].(map[string]any)["configdrive"]; cd != "******" {
			t.Errorf("configdrive reads back as %v, want it masked", cd)
		}
		if got := stepsStarted(t, admin, id); got != "power.power_off,deploy.deploy" {
			t.Errorf("deploy ran %s", got)
		}

		provision(t, admin, id, map[string]any{"target": "active"}, 409)
		provision(t, clients["lessee-admin"], id, map[string]any{"target": "rebuild"}, 202)
		n = waitState(t, admin, id, "active")
		if n["power_state"] != "power on" {
			t.Errorf("after rebuild: power %v", n["power_state"])
		}

		provision(t, clients["owner-member"], id, map[string]any{"target": "undeploy"}, 202)
		n = waitState(t, admin, id, "available")
		if n["power_state"] != "power off" || len(n["instance_info"].(map[string]any)) != 0 || n["instance_uuid"] != nil {
			t.Errorf("after undeploy: power %v, instance_info %v, instance_uuid %v", n["power_state"], n["instance_info"], n["instance_uuid"])
		}
		hist := eventsOf(t, admin, id)
		for _, want := range []string{"deploy: Step deploy.deploy started", "deploy: All 2 deploy steps done; node is active",
			"deploy: Instance torn down", "clean: All 0 clean steps done; node is available"} {
			if !strings.Contains(hist, want) {
				t.Errorf("history lacks %q:\n%s", want, hist)
			}
		}
	})
}

// eventsOf is a node's history as "type: event" lines, oldest first.
func eventsOf(t *testing.T, c *servertest.Client, id string) string {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
	mustStatus(t, r, 200)
	var lines []string
	for _, e := range r.JSON(t)["history"].([]any) {
		m := e.(map[string]any)
		lines = append(lines, fmt.Sprintf("%v: %v", m["event_type"], m["event"]))
	}
	return strings.Join(lines, "\n")
}

// stepsStarted lists the steps of the node's latest deployment in the
// order they started.
func stepsStarted(t *testing.T, c *servertest.Client, id string) string {
	t.Helper()
	var started []string
	for _, line := range strings.Split(eventsOf(t, c, id), "\n") {
		if strings.HasPrefix(line, "deploy: Step ") && strings.Contains(line, "started (1 of") {
			started = nil
		}
		if rest, ok := strings.CutPrefix(line, "deploy: Step "); ok && strings.Contains(rest, "started") {
			started = append(started, strings.Fields(rest)[0])
		}
	}
	return strings.Join(started, ",")
}
