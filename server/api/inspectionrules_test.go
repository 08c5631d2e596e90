package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/inspectionrule"
	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestInspectionRulesGate: below 1.96 the resource is hidden as Ironic
// hides it, a read 404 and a write 405; from 1.96 it is there.
func TestInspectionRulesGate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = "1.95"
		mustFault(t, c.Do(t, "GET", "/v1/inspection_rules", nil), 404, "inspection rules")
		mustFault(t, c.Do(t, "GET", "/v1/inspection_rules/7f0a1a9e-4c43-4bde-9a2a-2d4c1a0c0b01", nil), 404, "inspection rules")
		mustStatus(t, c.Do(t, "POST", "/v1/inspection_rules", map[string]any{"actions": []any{}}), 405)
		mustStatus(t, c.Do(t, "PATCH", "/v1/inspection_rules/7f0a1a9e-4c43-4bde-9a2a-2d4c1a0c0b01", `[]`), 405)
		mustStatus(t, c.Do(t, "DELETE", "/v1/inspection_rules/7f0a1a9e-4c43-4bde-9a2a-2d4c1a0c0b01", nil), 405)
		c.Version = "1.96"
		mustStatus(t, c.Do(t, "GET", "/v1/inspection_rules", nil), 200)
	})
}

// TestInspectionRules: CRUD and PATCH at 1.96 with Ironic's validation,
// sensitive rules hidden, fields, the phase filter, audit.
func TestInspectionRules(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = "1.96"
		body := map[string]any{"description": "big boxes", "priority": 50,
			"conditions": []any{map[string]any{"op": "gt", "args": map[string]any{"values": []any{"{inventory[cpu][count]}", 4}}}},
			"actions":    []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/resource_class", "value": "large"}}}}
		r := c.Do(t, "POST", "/v1/inspection_rules", body)
		mustStatus(t, r, 201)
		rule := r.JSON(t)
		id := rule["uuid"].(string)
		if rule["phase"] != "main" || rule["priority"] != float64(50) || rule["sensitive"] != false || len(rule["conditions"].([]any)) != 1 || r.Header.Get("Location") == "" {
			t.Fatalf("created %v", rule)
		}
		for _, bad := range []struct {
			body    map[string]any
			mention string
		}{
			{map[string]any{}, "actions"},
			{map[string]any{"actions": []any{}}, "actions"},
			{map[string]any{"actions": body["actions"], "priority": 10000}, "Priority"},
			{map[string]any{"actions": body["actions"], "priority": -1}, "Priority"},
			{map[string]any{"actions": body["actions"], "phase": "early"}, "phase"},
			{map[string]any{"actions": body["actions"], "name": "x"}, "name"},
			{map[string]any{"actions": body["actions"], "uuid": "nope"}, "uuid"},
			{map[string]any{"actions": []any{map[string]any{"op": "explode", "args": map[string]any{}}}}, "Unsupported action operator: explode"},
			{map[string]any{"actions": []any{map[string]any{"op": "api-call", "args": map[string]any{"url": "http://x"}}}}, "api-call"},
			{map[string]any{"actions": []any{map[string]any{"op": "set-port-attribute", "args": map[string]any{}}}}, "set-port-attribute"},
			{map[string]any{"actions": []any{map[string]any{"op": "add-trait", "args": map[string]any{}}}}, "missing required argument(s): name"},
			{map[string]any{"actions": []any{map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_A", "x": 1}}}}, "unexpected argument(s): x"},
			{map[string]any{"actions": []any{map[string]any{"op": "add-trait", "args": map[string]any{"name": "lower"}}}}, "actions[0].args"},
			{map[string]any{"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/power_state", "value": "on"}}}}, "power_state"},
			{map[string]any{"actions": body["actions"], "conditions": []any{map[string]any{"op": "near", "args": map[string]any{}}}}, "Unsupported condition operator: near"},
			{map[string]any{"actions": body["actions"], "conditions": []any{map[string]any{"op": "!!eq", "args": map[string]any{"values": []any{}}}}}, "!!eq"},
			{map[string]any{"actions": body["actions"], "conditions": []any{map[string]any{"op": "matches", "args": map[string]any{"value": "x", "regex": "("}}}}, "regular expression"},
			{map[string]any{"actions": body["actions"], "conditions": []any{map[string]any{"op": "eq", "args": map[string]any{"values": []any{}}, "multiple": "most"}}}, "multiple"},
		} {
			mustFault(t, c.Do(t, "POST", "/v1/inspection_rules", bad.body), 400, bad.mention)
		}
		mustFault(t, c.Do(t, "POST", "/v1/inspection_rules", map[string]any{"uuid": id, "actions": body["actions"]}), 409, id)

		// A sensitive rule hides its conditions and actions, and stays
		// sensitive.
		r = c.Do(t, "POST", "/v1/inspection_rules", map[string]any{"sensitive": true, "priority": 10,
			"actions": []any{map[string]any{"op": "set-attribute", "args": []any{"/driver_info/secret", "x"}}}})
		mustStatus(t, r, 201)
		sens := r.JSON(t)
		if sens["actions"] != nil || sens["conditions"] != nil || sens["sensitive"] != true {
			t.Errorf("sensitive rule shown as %v", sens)
		}
		sid := sens["uuid"].(string)
		mustFault(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+sid, `[{"op":"replace","path":"/sensitive","value":false}]`), 400, "sensitive")
		mustFault(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+sid, `[{"op":"copy","from":"/actions/0/args","path":"/description"}]`), 400, "sensitive")
		mustFault(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+sid, `[{"op":"test","path":"/actions/0/args/1","value":"x"}]`), 400, "sensitive")
		mustStatus(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+sid, `[{"op":"replace","path":"/actions","value":[{"op":"add-trait","args":{"name":"CUSTOM_S"}}]}]`), 200)

		list := c.Do(t, "GET", "/v1/inspection_rules", nil).JSON(t)["inspection_rules"].([]any)
		if len(list) != 2 || strings.Join(keysOf(list[0].(map[string]any)), ",") != "description,links,phase,priority,uuid" {
			t.Errorf("list %v", list)
		}
		detail := c.Do(t, "GET", "/v1/inspection_rules?detail=true&sort_key=priority&sort_dir=desc", nil).JSON(t)["inspection_rules"].([]any)
		if d := detail[0].(map[string]any); d["uuid"] != id || d["actions"] == nil || d["created_at"] == nil {
			t.Errorf("detail %v", detail)
		}
		if l := c.Do(t, "GET", "/v1/inspection_rules?phase=other", nil).JSON(t)["inspection_rules"].([]any); len(l) != 0 {
			t.Errorf("phase filter %v", l)
		}
		if g := c.Do(t, "GET", "/v1/inspection_rules/"+id+"?fields=uuid,actions", nil).JSON(t); strings.Join(keysOf(g), ",") != "actions,links,uuid" {
			t.Errorf("fields %v", g)
		}
		mustFault(t, c.Do(t, "GET", "/v1/inspection_rules?color=red", nil), 400, "color")
		mustFault(t, c.Do(t, "GET", "/v1/inspection_rules/"+id+"?fields=name", nil), 400, "name")
		mustFault(t, c.Do(t, "GET", "/v1/inspection_rules/6e0f8c9b-0000-4000-8000-000000000000", nil), 404, "6e0f8c9b")

		// PATCH validates the document it produces; a bad one changes nothing.
		r = c.Do(t, "PATCH", "/v1/inspection_rules/"+id, `[{"op":"replace","path":"/priority","value":70},{"op":"add","path":"/actions/-","value":{"op":"add-trait","args":{"name":"CUSTOM_BIG"}}}]`)
		mustStatus(t, r, 200)
		if p := r.JSON(t); p["priority"] != float64(70) || len(p["actions"].([]any)) != 2 || p["updated_at"] == nil {
			t.Errorf("patched %v", p)
		}
		mustFault(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+id, `[{"op":"replace","path":"/priority","value":1},{"op":"add","path":"/actions/-","value":{"op":"api-call","args":{}}}]`), 400, "api-call")
		mustFault(t, c.Do(t, "PATCH", "/v1/inspection_rules/"+id, `[{"op":"replace","path":"/uuid","value":"x"}]`), 400, "uuid")
		if g := c.Do(t, "GET", "/v1/inspection_rules/"+id, nil).JSON(t); g["priority"] != float64(70) {
			t.Errorf("a refused patch changed the rule: %v", g)
		}

		mustStatus(t, c.Do(t, "DELETE", "/v1/inspection_rules/"+id, nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/inspection_rules/"+id, nil), 404)
		for _, rule := range []string{"create", "update", "delete"} {
			ev := c.Do(t, "GET", "/v1/events?rule=baremetal:inspection_rule:"+rule, nil)
			mustStatus(t, ev, 200)
			if len(ev.JSON(t)["events"].([]any)) == 0 {
				t.Errorf("no audit events for %s", rule)
			}
		}
	})
}

// TestInspectionRulesAfterInspect: rules run after a real inspection over
// Redfish, highest priority first, against the inventory inspection
// stored, setting properties, capabilities, traits, extra and the
// resource class; a fail action fails the inspection and writes nothing.
// The rules are stored directly so the engine is tested whatever the
// advertised maximum.
func TestInspectionRulesAfterInspect(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rules-1", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		rule := func(prio int, conds []map[string]any, acts ...map[string]any) {
			t.Helper()
			err := db.InspectionRule.Create().SetUUID(newUUID(prio)).SetPriority(prio).SetConditions(conds).SetActions(acts).Exec(ctx)
			if err != nil {
				t.Fatal(err)
			}
		}
		op := func(name string, args any) map[string]any { return map[string]any{"op": name, "args": args} }
		rule(90, []map[string]any{op("gt", map[string]any{"values": []any{"{inventory[cpu][count]}", 0}}), op("is-empty", map[string]any{"value": "{inventory[no_such]}"})},
			op("set-attribute", map[string]any{"path": "/resource_class", "value": "cpus-{inventory[cpu][count]}"}),
			op("add-trait", map[string]any{"name": "CUSTOM_INSPECTED"}),
			op("set-capability", map[string]any{"name": "rules", "value": "yes"}),
			op("set-attribute", map[string]any{"path": "extra.arch", "value": "{inventory[cpu][architecture]}"}))
		// Lower priority: runs after, and sees what the first rule set.
		rule(10, []map[string]any{op("eq", map[string]any{"values": []any{"{node[extra][arch]}", "x86_64"}})},
			op("extend-attribute", map[string]any{"path": "/extra/seen", "value": "{item}"}),
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/properties/{item[k]}", "value": "{item[v]}"}, "loop": []any{map[string]any{"k": "a", "v": "1"}, map[string]any{"k": "b", "v": "{inventory[cpu][count]}"}}})
		// Never applies: its condition is false, inverted or not.
		rule(50, []map[string]any{op("!is-true", map[string]any{"value": true})}, op("fail", map[string]any{"msg": "must not run"}))
		// Applies to the loop's any match, and removes a trait.
		rule(40, []map[string]any{{"op": "matches", "args": map[string]any{"value": "{item}", "regex": "x86_.*"}, "loop": []any{"arm", "{inventory[cpu][architecture]}"}, "multiple": "any"}},
			op("remove-trait", map[string]any{"name": "CUSTOM_OLD"}))
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_OLD", nil), 204)

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil {
			t.Fatalf("inspection: %v", n["last_error"])
		}
		props := n["properties"].(map[string]any)
		cpus := props["cpus"].(float64)
		want := "cpus-" + strconv.Itoa(int(cpus))
		if n["resource_class"] != want {
			t.Errorf("resource_class %v, want %s", n["resource_class"], want)
		}
		if caps, _ := props["capabilities"].(string); !strings.Contains(caps, "rules:yes") || !strings.Contains(caps, "boot_mode:") {
			t.Errorf("capabilities %q", caps)
		}
		if props["a"] != "1" || props["b"] != strconv.Itoa(int(cpus)) {
			t.Errorf("looped properties %v", props)
		}
		extra := n["extra"].(map[string]any)
		if extra["arch"] != "x86_64" || extra["seen"] == nil {
			t.Errorf("extra %v", extra)
		}
		traits := admin.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil).JSON(t)["traits"].([]any)
		if len(traits) != 1 || traits[0] != "CUSTOM_INSPECTED" {
			t.Errorf("traits %v", traits)
		}

		// A fail action fails inspection with its message and the other
		// rules' changes are not written.
		if _, err := db.InspectionRule.Delete().Where(inspectionrule.Priority(40)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_OLD", nil), 204)
		rule(5, []map[string]any{op("contains", map[string]any{"value": "{node.name}", "regex": "rules"})}, op("fail", map[string]any{"msg": "refused by rule"}))
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n = waitState(t, admin, id, "inspect failed")
		if le, _ := n["last_error"].(string); !strings.Contains(le, "refused by rule") {
			t.Errorf("last_error %q", le)
		}
		traits = admin.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil).JSON(t)["traits"].([]any)
		if len(traits) != 2 {
			t.Errorf("a failed run changed traits: %v", traits)
		}
		if seen := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["extra"].(map[string]any)["seen"].([]any); len(seen) != 1 {
			t.Errorf("a failed run extended extra/seen: %v", seen)
		}
	})
}

// TestInspectionRuleListArgs: args given as a list (Ironic's older,
// still accepted form) are returned as sent, as Ironic returns them, and
// an inspection runs them by their operator's argument order.
func TestInspectionRuleListArgs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		conds := []any{map[string]any{"op": "eq", "args": []any{[]any{"{inventory[cpu][architecture]}", "x86_64"}}}}
		acts := []any{map[string]any{"op": "add-trait", "args": []any{"CUSTOM_LISTED"}},
			map[string]any{"op": "set-attribute", "args": []any{"/extra/listed", "{inventory[cpu][architecture]}"}}}
		r := admin.Do(t, "POST", "/v1/inspection_rules", map[string]any{"conditions": conds, "actions": acts})
		mustStatus(t, r, 201)
		rid := r.JSON(t)["uuid"].(string)
		for _, got := range []map[string]any{r.JSON(t), admin.Do(t, "GET", "/v1/inspection_rules/"+rid, nil).JSON(t)} {
			if !reflect.DeepEqual(got["conditions"], conds) || !reflect.DeepEqual(got["actions"], acts) {
				t.Errorf("rule shown as conditions %v actions %v, want them as sent: %v %v", got["conditions"], got["actions"], conds, acts)
			}
		}
		mustFault(t, admin.Do(t, "POST", "/v1/inspection_rules", map[string]any{"actions": []any{map[string]any{"op": "add-trait", "args": []any{"CUSTOM_A", "x"}}}}),
			400, "too many arguments")

		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "listed-1", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil {
			t.Fatalf("inspection: %v", n["last_error"])
		}
		if extra := n["extra"].(map[string]any); extra["listed"] != "x86_64" {
			t.Errorf("extra %v: the list-args set-attribute did not run", extra)
		}
		traits := admin.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil).JSON(t)["traits"].([]any)
		if len(traits) != 1 || traits[0] != "CUSTOM_LISTED" {
			t.Errorf("traits %v: the list-args add-trait did not run", traits)
		}
	})
}

func newUUID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// TestInspectionRulesCannotReadSecrets: rules a system admin creates
// through the API, run by a real Redfish inspection, see the BMC password
// only as its mask: copied into extra, logged, used in a condition or in
// a fail message, it never lands in the node, its history, last_error or
// the server log, and the stored password is kept.
func TestInspectionRulesCannotReadSecrets(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		logs := &syncbuf.Buffer{}
		o := bmcOpts
		o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		_, clients := startLocal(t, setting, o)
		admin := clients["system-admin"]
		admin.Version = api.VerInspectionRules.String()
		id := enrol(t, admin, map[string]any{"name": "secret-rules", "driver": "redfish", "driver_info": sim.DriverInfo("1")})
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		pw := "{node.driver_info.redfish_password}"
		leak := "pw=" + bmctest.RedfishPassword
		op := func(name string, args map[string]any) map[string]any { return map[string]any{"op": name, "args": args} }
		mustStatus(t, admin.Do(t, "POST", "/v1/inspection_rules", map[string]any{"priority": 90, "actions": []any{
			op("set-attribute", map[string]any{"path": "/extra/copy", "value": "pw=" + pw}),
			op("set-attribute", map[string]any{"path": "/extra/all", "value": "{node.driver_info}"}),
			op("set-attribute", map[string]any{"path": "/properties/pw", "value": "pw=" + pw}),
			op("log", map[string]any{"msg": "rule log pw=" + pw}),
		}}), 201)
		// A condition is no oracle either: the right guess does not match.
		mustStatus(t, admin.Do(t, "POST", "/v1/inspection_rules", map[string]any{"priority": 80,
			"conditions": []any{op("eq", map[string]any{"values": []any{pw, bmctest.RedfishPassword}})},
			"actions":    []any{op("add-trait", map[string]any{"name": "CUSTOM_PASSWORD_GUESSED"})}}), 201)

		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		n := waitState(t, admin, id, "manageable")
		if n["last_error"] != nil {
			t.Fatalf("inspection: %v", n["last_error"])
		}
		// The rules ran, on the mask.
		if extra := n["extra"].(map[string]any); extra["copy"] != "pw="+nodes.Masked {
			t.Errorf("extra/copy %v, want the mask", extra["copy"])
		}
		if !strings.Contains(logs.String(), "rule log pw="+nodes.Masked) {
			t.Errorf("the log action did not run on the mask:\n%s", logs.String())
		}
		if r := admin.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil); r.Status != 200 || strings.Contains(string(r.Body), "CUSTOM_PASSWORD_GUESSED") {
			t.Errorf("a condition read the password: traits %d %s", r.Status, r.Body)
		}

		// A fail action's message is no way out (in a loop, where it is
		// formatted): last_error and history.
		mustStatus(t, admin.Do(t, "POST", "/v1/inspection_rules", map[string]any{"priority": 5,
			"actions": []any{map[string]any{"op": "fail", "args": map[string]any{"msg": "refused pw=" + pw}, "loop": []any{1}}}}), 201)
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		failed := waitState(t, admin, id, "inspect failed")
		if le, _ := failed["last_error"].(string); !strings.Contains(le, "refused pw="+nodes.Masked) {
			t.Errorf("last_error %q, want the fail message on the mask", le)
		}

		for _, who := range []string{"system-admin", "owner-member", "lessee-reader"} {
			for _, path := range []string{"/v1/nodes/" + id, "/v1/nodes/" + id + "/history?detail=true", "/v1/nodes/" + id + "/traits"} {
				if body := clients[who].Do(t, "GET", path, nil).Body; strings.Contains(string(body), leak) || strings.Contains(string(body), `"redfish_password":"`+bmctest.RedfishPassword) {
					t.Errorf("%s GET %s shows the password: %s", who, path, body)
				}
			}
		}
		if l := logs.String(); strings.Contains(l, leak) || strings.Contains(l, `"redfish_password":"`+bmctest.RedfishPassword) {
			t.Errorf("the server log holds the password:\n%s", l)
		}
		if got := storedInfo(t, db, id)["redfish_password"]; got != bmctest.RedfishPassword {
			t.Errorf("stored password after the rules: %v", got)
		}
	})
}
