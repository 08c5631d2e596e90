package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestDeployTemplates: CRUD with Ironic's validation (a trait name, deploy
// steps of runbook shape with a priority, no duplicate steps), fields and
// paging, and the 1.55 gate.
func TestDeployTemplates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		step := func(iface, name string, args map[string]any, prio any) map[string]any {
			return map[string]any{"interface": iface, "step": name, "args": args, "priority": prio}
		}
		body := map[string]any{"name": "CUSTOM_PXE_ONCE", "steps": []any{
			step("management", "set_boot_device", map[string]any{"device": "pxe", "persistent": false}, 150),
			step("power", "reboot", map[string]any{}, "10"),
		}}
		r := c.Do(t, "POST", "/v1/deploy_templates", body)
		mustStatus(t, r, 201)
		dt := r.JSON(t)
		steps := dt["steps"].([]any)
		if dt["name"] != "CUSTOM_PXE_ONCE" || len(steps) != 2 || steps[1].(map[string]any)["priority"] != float64(10) || r.Header.Get("Location") == "" {
			t.Fatalf("created %v", dt)
		}
		mustFault(t, c.Do(t, "POST", "/v1/deploy_templates", body), 409, "CUSTOM_PXE_ONCE")
		for _, bad := range []struct {
			body    map[string]any
			mention string
		}{
			{map[string]any{"name": "pxe-once", "steps": body["steps"]}, "name"},
			{map[string]any{"name": "CUSTOM_X"}, "steps"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{}}, "steps"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{step("power", "reboot", map[string]any{}, -1)}}, "priority"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{step("power", "reboot", map[string]any{}, "soon")}}, "priority"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{step("power", "reboot", nil, 1)}}, "args"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{step("cloud", "reboot", map[string]any{}, 1)}}, "steps[0]"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{step("power", "reboot", map[string]any{}, 1), step("power", "reboot", map[string]any{}, 2)}}, "Duplicate deploy steps"},
			{map[string]any{"name": "CUSTOM_X", "steps": []any{map[string]any{"interface": "power", "step": "reboot", "args": map[string]any{}, "priority": 1, "order": 1}}}, "order"},
			{map[string]any{"name": "CUSTOM_X", "steps": body["steps"], "owner": "p"}, "owner"},
		} {
			mustFault(t, c.Do(t, "POST", "/v1/deploy_templates", bad.body), 400, bad.mention)
		}
		// Arguments are the step's to check when a deployment runs it, as
		// Ironic's conductor does: a template with a boot device no driver
		// has is stored as given.
		r = c.Do(t, "POST", "/v1/deploy_templates", map[string]any{"name": "CUSTOM_TAPE", "steps": []any{step("management", "set_boot_device", map[string]any{"device": "tape"}, 1)}})
		mustStatus(t, r, 201)
		if a := r.JSON(t)["steps"].([]any)[0].(map[string]any)["args"]; fmt.Sprint(a) != "map[device:tape]" {
			t.Errorf("stored args %v", a)
		}
		mustStatus(t, c.Do(t, "PATCH", "/v1/deploy_templates/CUSTOM_TAPE", `[{"op":"add","path":"/steps/0/args/speed","value":"fast"}]`), 200)
		mustStatus(t, c.Do(t, "DELETE", "/v1/deploy_templates/CUSTOM_TAPE", nil), 204)
		mustStatus(t, c.Do(t, "POST", "/v1/deploy_templates", map[string]any{"name": "CUSTOM_REBOOT", "steps": []any{step("power", "reboot", map[string]any{}, 1)}, "extra": map[string]any{"a": 1}}), 201)

		list := c.Do(t, "GET", "/v1/deploy_templates", nil).JSON(t)["deploy_templates"].([]any)
		if len(list) != 2 || strings.Join(keysOf(list[0].(map[string]any)), ",") != "links,name,uuid" {
			t.Errorf("list %v", list)
		}
		detail := c.Do(t, "GET", "/v1/deploy_templates?detail=true&sort_key=name&sort_dir=desc", nil).JSON(t)["deploy_templates"].([]any)
		if d := detail[0].(map[string]any); d["name"] != "CUSTOM_REBOOT" || d["steps"] == nil || d["extra"] == nil {
			t.Errorf("detail %v", detail)
		}
		if f := c.Do(t, "GET", "/v1/deploy_templates?fields=uuid", nil).JSON(t)["deploy_templates"].([]any); f[0].(map[string]any)["name"] != nil {
			t.Errorf("fields=uuid %v", f)
		}
		page := c.Do(t, "GET", "/v1/deploy_templates?limit=1", nil).JSON(t)
		if page["next"] == nil {
			t.Errorf("page %v", page)
		}
		mustFault(t, c.Do(t, "GET", "/v1/deploy_templates?sort_key=steps", nil), 400, "sort_key")
		mustFault(t, c.Do(t, "GET", "/v1/deploy_templates?node=x", nil), 400, "node")
		mustStatus(t, at(c, "1.54").Do(t, "GET", "/v1/deploy_templates", nil), 404)
		mustStatus(t, at(c, "1.54").Do(t, "POST", "/v1/deploy_templates", body), 405)

		id := dt["uuid"].(string)
		if g := c.Do(t, "GET", "/v1/deploy_templates/CUSTOM_PXE_ONCE", nil).JSON(t); g["uuid"] != id {
			t.Errorf("by name %v", g)
		}
		r = c.Do(t, "PATCH", "/v1/deploy_templates/"+id, []map[string]any{
			{"op": "add", "path": "/extra/answer", "value": 42},
			{"op": "add", "path": "/steps/-", "value": step("management", "reset_bmc", map[string]any{}, 5)},
			{"op": "replace", "path": "/name", "value": "CUSTOM_PXE_TWICE"},
		})
		mustStatus(t, r, 200)
		if p := r.JSON(t); p["name"] != "CUSTOM_PXE_TWICE" || len(p["steps"].([]any)) != 3 || p["extra"].(map[string]any)["answer"] != float64(42) {
			t.Errorf("patched %v", p)
		}
		mustFault(t, c.Do(t, "PATCH", "/v1/deploy_templates/"+id, []map[string]any{{"op": "replace", "path": "/name", "value": "CUSTOM_REBOOT"}}), 409, "CUSTOM_REBOOT")
		mustFault(t, c.Do(t, "PATCH", "/v1/deploy_templates/"+id, []map[string]any{{"op": "replace", "path": "/steps/0/priority", "value": "x"}}), 400, "priority")
		mustFault(t, c.Do(t, "PATCH", "/v1/deploy_templates/"+id, []map[string]any{{"op": "replace", "path": "/steps", "value": []any{}}}), 400, "steps")
		mustFault(t, c.Do(t, "PATCH", "/v1/deploy_templates/"+id, []map[string]any{{"op": "replace", "path": "/uuid", "value": id}}), 400, "uuid")
		if g := c.Do(t, "GET", "/v1/deploy_templates/"+id, nil).JSON(t); g["name"] != "CUSTOM_PXE_TWICE" || len(g["steps"].([]any)) != 3 {
			t.Errorf("a refused patch changed the template: %v", g)
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/deploy_templates/CUSTOM_PXE_TWICE", nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/deploy_templates/"+id, nil), 404)
		mustStatus(t, c.Do(t, "DELETE", "/v1/deploy_templates/bbb45f41-d4bc-4307-8d1d-32f95ce1e920", nil), 404)
	})
}
