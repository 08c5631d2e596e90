package api_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var rbSteps = []map[string]any{
	{"interface": "power", "step": "power_off", "order": 2},
	{"interface": "power", "step": "power_on", "order": 1, "args": map[string]any{}},
}

// runbookMatrix is the self-service runbook spec's persona table as
// data, columns as in personas. {sys}, {pub}, {own} and {oth} are fresh
// runbooks per cell: system-owned private, public, owned by the owner
// project, owned by the third project. Provision rows act on a fresh
// manageable node owned by "own", leased to "les", carrying the
// runbook's trait.
var runbookMatrix = []struct {
	method, path, body, want string
}{
	// runbook:list is API_READER; runbook:get RUNBOOK_READER, whose
	// role:service term names no project: every service user sees every
	// runbook, as in Ironic.
	{"GET", "/v1/runbooks", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/runbooks/{sys}", "", "401 | 200 200 200 200 | 404 404 404 404 200 | 404 404 404 404 200 | 404 404 404 404 | 200"},
	{"GET", "/v1/runbooks/{pub}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/runbooks/{own}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 404 404 404 404 200 | 404 404 404 404 | 200"},
	// runbook:create, update and delete are RUNBOOK_CREATOR/RUNBOOK_ADMIN:
	// system members, managers of the owner project, and role:service.
	{"POST", "/v1/runbooks", `{"name":"CUSTOM_NEW_{i}","steps":[{"interface":"power","step":"reboot","order":1}]}`, "401 | 201 201 403 201 | 201 201 403 403 201 | 201 201 403 403 201 | 201 201 403 403 | 201"},
	// A project-scoped caller who may create asks for a public runbook:
	// a 400, as Ironic answers it ("Cannot create a public runbook as a
	// project scoped admin"), after the create rule. A system caller needs
	// update:public (SYSTEM_MEMBER), which a system service user does not
	// pass: Anvil applies it on create too (Ironic does not), so what
	// cannot be patched public cannot be created public.
	{"POST", "/v1/runbooks", `{"name":"CUSTOM_NEW_{i}","public":true,"steps":[{"interface":"power","step":"reboot","order":1}]}`, "401 | 201 201 403 403 | 400 400 403 403 400 | 400 400 403 403 400 | 400 400 403 403 | 400"},
	{"PATCH", "/v1/runbooks/{own}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 200 | 200 200 403 403 200 | 404 404 404 404 200 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/runbooks/{own}", `[{"op":"replace","path":"/public","value":true}]`, "401 | 200 200 403 403 | 403 403 403 403 403 | 404 404 404 404 403 | 404 404 404 404 | 403"},
	{"PATCH", "/v1/runbooks/{own}", `[{"op":"replace","path":"/owner","value":"oth"}]`, "401 | 200 200 403 403 | 403 403 403 403 403 | 404 404 404 404 403 | 404 404 404 404 | 403"},
	{"PATCH", "/v1/runbooks/{pub}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 200 | 403 403 403 403 200 | 403 403 403 403 200 | 403 403 403 403 | 200"},
	{"DELETE", "/v1/runbooks/{own}", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 404 404 404 404 204 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/runbooks/{sys}", "", "401 | 204 204 403 204 | 404 404 404 404 204 | 404 404 404 404 204 | 404 404 404 404 | 204"},
	// set_provision_state:runbook (Anvil's, from the runbook spec) is
	// SYSTEM_OR_PROJECT_MEMBER, which has no owner-project service term;
	// a lessee-project service user cannot see the node.
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","runbook":"{pub}"}`, "401 | 202 202 403 202 | 202 202 202 403 403 | 202 202 202 403 404 | 404 404 404 404 | 202"},
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","runbook":"{own}"}`, "401 | 202 202 403 202 | 202 202 202 403 403 | 404 404 404 403 404 | 404 404 404 404 | 202"},
	// A third project's runbook runs only on its own project's nodes,
	// whoever asks: the node's owner decides which runbooks it accepts.
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","runbook":"{oth}"}`, "401 | 403 403 403 403 | 404 404 404 403 403 | 404 404 404 403 404 | 404 404 404 404 | 403"},
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","runbook":"{sys}"}`, "401 | 202 202 403 202 | 404 404 404 403 403 | 404 404 404 403 404 | 404 404 404 404 | 202"},
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","runbook":"{pub}","clean_steps":[{"interface":"power","step":"power_on"}]}`, "401 | 400 400 403 400 | 400 400 400 403 403 | 400 400 400 403 404 | 404 404 404 404 | 400"},
}

func TestRunbookMatrix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		i := 0
		mkRunbook := func(body map[string]any) string {
			i++
			body["name"] = fmt.Sprintf("CUSTOM_RB_%d", i)
			body["steps"] = rbSteps
			r := admin.Do(t, "POST", "/v1/runbooks", body)
			mustStatus(t, r, 201)
			return r.JSON(t)["name"].(string)
		}
		for _, row := range runbookMatrix {
			want := strings.Fields(strings.ReplaceAll(row.want, "|", ""))
			for col, p := range personas {
				rbs := map[string]string{
					"{sys}": mkRunbook(map[string]any{}),
					"{pub}": mkRunbook(map[string]any{"public": true}),
					"{own}": mkRunbook(map[string]any{"owner": "own"}),
					"{oth}": mkRunbook(map[string]any{"owner": "oth"}),
				}
				i++
				path, body := row.path, strings.ReplaceAll(row.body, "{i}", strconv.Itoa(i))
				for k, v := range rbs {
					path, body = strings.ReplaceAll(path, k, v), strings.ReplaceAll(body, k, v)
				}
				if strings.Contains(path, "{n}") {
					r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("rbn-%d", i), "driver": "fake", "owner": "own", "lessee": "les"})
					mustStatus(t, r, 201)
					id := r.JSON(t)["uuid"].(string)
					for _, name := range rbs {
						mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/"+name, nil), 204)
					}
					provision(t, admin, id, map[string]any{"target": "manage"}, 202)
					waitState(t, admin, id, "manageable")
					path = strings.ReplaceAll(path, "{n}", id)
				}
				var b any
				if body != "" {
					b = body
				}
				got := clients[p.name].Do(t, row.method, path, b)
				if strconv.Itoa(got.Status) != want[col] {
					t.Errorf("%s %s %s as %s: status %d, want %s: %.200s", row.method, row.path, row.body, p.name, got.Status, want[col], got.Body)
				}
			}
		}
	})
}

func TestRunbookOwnershipAndUse(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, manager, member := clients["system-admin"], clients["owner-manager"], clients["lessee-member"]

		// A project manager's runbook is its project's, private.
		r := manager.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_FW", "steps": rbSteps,
			"extra": map[string]any{}})
		mustStatus(t, r, 201)
		rb := r.JSON(t)
		if rb["owner"] != "own" || rb["public"] != false {
			t.Fatalf("project runbook: owner %v public %v", rb["owner"], rb["public"])
		}
		if st := rb["steps"].([]any); st[0].(map[string]any)["step"] != "power_on" {
			t.Errorf("steps not in their explicit order: %v", st)
		}
		// Another project as owner is a 400, as in Ironic.
		if r := manager.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_X", "owner": "oth", "steps": rbSteps}); r.Status != 400 || !strings.Contains(r.Fault(t), "owner other than your own project") {
			t.Errorf("a project manager naming another owner: %d %s", r.Status, r.Body)
		}
		// A system manager's runbook has no owner; publishing clears an owner;
		// an owner on a public runbook is refused.
		r = admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_SYS", "steps": rbSteps})
		mustStatus(t, r, 201)
		if r.JSON(t)["owner"] != nil {
			t.Error("system runbook got an owner")
		}
		r = admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_FW", `[{"op":"replace","path":"/public","value":true}]`)
		mustStatus(t, r, 200)
		if m := r.JSON(t); m["public"] != true || m["owner"] != nil {
			t.Errorf("publishing: public %v owner %v", m["public"], m["owner"])
		}
		// An owner onto a public runbook is a 400, as Ironic's
		// test_set_owner_system_scope_fails_if_public; with public false in
		// the same patch it is taken (test_runbook_set_owner_public_system_scope).
		if r := admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_FW", `[{"op":"replace","path":"/owner","value":"own"}]`); r.Status != 400 || !strings.Contains(r.Fault(t), "public") {
			t.Errorf("owner on a public runbook: %d %s", r.Status, r.Body)
		}
		r = admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_FW", `[{"op":"replace","path":"/owner","value":"own"},{"op":"replace","path":"/public","value":false}]`)
		mustStatus(t, r, 200)
		if m := r.JSON(t); m["public"] != false || m["owner"] != "own" {
			t.Errorf("owner with public false: public %v owner %v", m["public"], m["owner"])
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_FW", `[{"op":"replace","path":"/public","value":true}]`), 200)
		// Bad input names the field.
		for body, field := range map[string]string{
			`{"name":"not a name","steps":[]}`:                                                                                                   "name",
			`{"name":"CUSTOM_B","steps":[{"interface":"console","step":"start","order":1}]}`:                                                     `interface "console"`,
			`{"name":"CUSTOM_B","steps":[{"interface":"power","step":"9lives","order":1}]}`:                                                      "not a step name",
			`{"name":"CUSTOM_B","steps":[{"interface":"power","step":"power_on","order":1},{"interface":"power","step":"power_off","order":1}]}`: "order",
			`{"name":"CUSTOM_FW","steps":[{"interface":"power","step":"reboot","order":1}]}`:                                                     "already exists",
			`{"name":"CUSTOM_EMPTY","steps":[]}`:                                                                                                 "at least one step",
		} {
			r := admin.Do(t, "POST", "/v1/runbooks", body)
			if r.Status != 400 && r.Status != 409 || !strings.Contains(r.Fault(t), field) {
				t.Errorf("%s: %d %s", body, r.Status, r.Body)
			}
		}
		r = admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_BOOT", "steps": []map[string]any{
			{"interface": "management", "step": "set_boot_device", "order": 1, "args": map[string]any{"device": "pxe"}}}})
		mustStatus(t, r, 201)

		// A lessee member runs the public runbook on a leased node with the
		// trait, and sees it complete; without the trait it is refused.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rb-node", "driver": "fake", "owner": "own", "lessee": "les"})
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		if f := provision(t, member, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW"}, 400).Fault(t); !strings.Contains(f, "CUSTOM_FW") {
			t.Errorf("missing trait fault %q", f)
		}
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_FW", nil), 204)
		provision(t, member, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil))}, 403)
		provision(t, member, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW"}, 202)
		n := waitState(t, member, id, "manageable")
		if n["power_state"] != "power off" {
			t.Errorf("runbook steps out of order: power %v", n["power_state"])
		}
		hist := member.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any)
		var started []string
		for _, e := range hist {
			if msg := e.(map[string]any)["event"].(string); strings.Contains(msg, "started") {
				started = append(started, strings.Fields(msg)[1])
			}
		}
		if strings.Join(started, ",") != "power.power_on,power.power_off" {
			t.Errorf("runbook ran %v", started)
		}

		// Runbook traits widen where it may run: any shared trait. The
		// sub-resource edits them; a project manager cannot touch a system
		// runbook's.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/runbooks/CUSTOM_SYS", `[{"op":"replace","path":"/public","value":true}]`), 200)
		mustStatus(t, admin.Do(t, "PUT", "/v1/runbooks/CUSTOM_SYS/traits", map[string]any{"traits": []string{"CUSTOM_RACK_B"}}), 204)
		mustStatus(t, admin.Do(t, "PUT", "/v1/runbooks/CUSTOM_SYS/traits/CUSTOM_RACK_A", nil), 204)
		mustStatus(t, admin.Do(t, "DELETE", "/v1/runbooks/CUSTOM_SYS/traits/CUSTOM_RACK_B", nil), 204)
		mustStatus(t, admin.Do(t, "DELETE", "/v1/runbooks/CUSTOM_SYS/traits/CUSTOM_NOPE", nil), 404)
		mustStatus(t, admin.Do(t, "PUT", "/v1/runbooks/CUSTOM_SYS/traits/bad-trait", nil), 400)
		mustStatus(t, manager.Do(t, "PUT", "/v1/runbooks/CUSTOM_SYS/traits/CUSTOM_X", nil), 403)
		if ts := member.Do(t, "GET", "/v1/runbooks/CUSTOM_SYS/traits", nil).JSON(t)["traits"].([]any); len(ts) != 1 || ts[0] != "CUSTOM_RACK_A" {
			t.Errorf("runbook traits %v", ts)
		}
		provision(t, member, id, map[string]any{"target": "clean", "runbook": "CUSTOM_SYS"}, 400)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_RACK_A", nil), 204)
		provision(t, member, id, map[string]any{"target": "clean", "runbook": "CUSTOM_SYS"}, 202)
		waitState(t, member, id, "manageable")

		// Lists: a project sees public and its own, the system all.
		names := func(c *servertest.Client) string {
			var out []string
			for _, r := range c.Do(t, "GET", "/v1/runbooks", nil).JSON(t)["runbooks"].([]any) {
				out = append(out, r.(map[string]any)["name"].(string))
			}
			return strings.Join(out, ",")
		}
		if got := names(clients["other-reader"]); got != "CUSTOM_FW,CUSTOM_SYS" {
			t.Errorf("other project lists %s", got)
		}
		if got := names(clients["system-reader"]); got != "CUSTOM_FW,CUSTOM_SYS,CUSTOM_BOOT" {
			t.Errorf("system reader lists %s", got)
		}
	})
}
