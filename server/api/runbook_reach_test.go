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

// reachSteps are what a lessee may not run directly: a persistent boot
// device, a BMC reset and a hold.
var reachSteps = []map[string]any{
	{"interface": "management", "step": "set_boot_device", "order": 1, "args": map[string]any{"device": "pxe", "persistent": true}},
	{"interface": "management", "step": "reset_bmc", "order": 2},
	{"interface": "deploy", "step": "hold", "order": 3},
}

// runbookReach is who may run which runbook on a node owned by "own" and
// leased to "les" that carries CUSTOM_OWNER_GATE, a trait only the
// owner's side set. Every runbook lists that trait, so the trait gate
// alone would let every one of them run. Columns: owner member, lessee
// member, lessee manager, system member.
var runbookReach = []struct {
	runbook string // who owns it, and how it is made
	want    string
}{
	{"system public", "202 202 202 202"},
	{"system private", "404 404 404 202"},
	{"owner project", "202 404 404 202"},
	{"lessee project", "404 403 403 403"},
	{"third project", "404 404 404 403"},
	{"system public without the node's trait", "400 400 400 400"},
}

var reachCallers = []string{"owner-member", "lessee-member", "lessee-manager", "system-member"}

func TestRunbookReachIsTheNodeOwnersChoice(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		i := 0
		// mk creates a runbook as c and returns its UUID; the lessee's is
		// made by its own manager, as in the attack.
		mk := func(c *servertest.Client, body map[string]any) string {
			i++
			body["name"] = fmt.Sprintf("CUSTOM_REACH_%d", i)
			body["steps"] = reachSteps
			if _, ok := body["traits"]; !ok {
				body["traits"] = []string{"CUSTOM_OWNER_GATE"}
			}
			r := c.Do(t, "POST", "/v1/runbooks", body)
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		makers := map[string]func() string{
			"system public":  func() string { return mk(admin, map[string]any{"public": true}) },
			"system private": func() string { return mk(admin, map[string]any{}) },
			"owner project":  func() string { return mk(clients["owner-manager"], map[string]any{}) },
			"lessee project": func() string { return mk(clients["lessee-manager"], map[string]any{}) },
			"third project":  func() string { return mk(clients["other-manager"], map[string]any{}) },
			"system public without the node's trait": func() string {
				return mk(admin, map[string]any{"public": true, "traits": []string{"CUSTOM_ELSEWHERE"}})
			},
		}
		for _, row := range runbookReach {
			want := strings.Fields(row.want)
			for col, caller := range reachCallers {
				rb := makers[row.runbook]()
				i++
				r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("reach-%d", i), "driver": "fake", "owner": "own", "lessee": "les"})
				mustStatus(t, r, 201)
				id := r.JSON(t)["uuid"].(string)
				mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_OWNER_GATE", nil), 204)
				provision(t, admin, id, map[string]any{"target": "manage"}, 202)
				waitState(t, admin, id, "manageable")

				got := clients[caller].Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "runbook": rb})
				if strconv.Itoa(got.Status) != want[col] {
					t.Errorf("%s runbook run by %s: status %d, want %s: %.300s", row.runbook, caller, got.Status, want[col], got.Body)
					continue
				}
				if got.Status == 202 {
					waitState(t, admin, id, "clean hold")
					continue
				}
				// A refusal changes nothing: no step ran, the node stays put.
				n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
				if n["provision_state"] != "manageable" {
					t.Errorf("%s runbook refused for %s, yet the node is %v", row.runbook, caller, n["provision_state"])
				}
				if got.Status == 403 && !strings.Contains(got.Fault(t), "does not own node") {
					t.Errorf("%s runbook for %s: fault %q does not say why", row.runbook, caller, got.Fault(t))
				}
			}
		}
	})
}

// TestRunbookNamesPerOwner: names are unique per owner, so a project
// cannot squat the system's name, and a name resolves to the caller's
// own runbook, then the system's public one, then any other it may see.
func TestRunbookNamesPerOwner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, ownMgr, lesMgr := clients["system-admin"], clients["owner-manager"], clients["lessee-manager"]
		create := func(c *servertest.Client, body map[string]any, want int) string {
			t.Helper()
			body["steps"] = rbSteps
			r := c.Do(t, "POST", "/v1/runbooks", body)
			mustStatus(t, r, want)
			if want != 201 {
				return r.Fault(t)
			}
			return r.JSON(t)["uuid"].(string)
		}
		// The project's private CUSTOM_X no longer blocks the system's.
		ownX := create(ownMgr, map[string]any{"name": "CUSTOM_X"}, 201)
		sysX := create(admin, map[string]any{"name": "CUSTOM_X", "public": true}, 201)
		lesX := create(lesMgr, map[string]any{"name": "CUSTOM_X"}, 201)
		// Within one owner the name is still unique.
		if f := create(ownMgr, map[string]any{"name": "CUSTOM_X"}, 409); !strings.Contains(f, "own") || !strings.Contains(f, "CUSTOM_X") {
			t.Errorf("project duplicate: %q", f)
		}
		if f := create(admin, map[string]any{"name": "CUSTOM_X"}, 409); !strings.Contains(f, "system") {
			t.Errorf("system duplicate: %q", f)
		}
		create(ownMgr, map[string]any{"name": "CUSTOM_Z"}, 201)
		mustStatus(t, ownMgr.Do(t, "PATCH", "/v1/runbooks/CUSTOM_Z", `[{"op":"replace","path":"/name","value":"CUSTOM_X"}]`), 409)
		// Moving a runbook to an owner that has the name is a 409 too.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/runbooks/"+lesX, `[{"op":"replace","path":"/owner","value":"own"}]`), 409)

		for _, c := range []struct {
			caller, ident, want string
		}{
			{"owner-member", "CUSTOM_X", ownX}, // its own project's first
			{"lessee-reader", "CUSTOM_X", lesX},
			{"other-member", "CUSTOM_X", sysX}, // then the system's public one
			{"system-reader", "CUSTOM_X", sysX},
			{"owner-member", sysX, sysX}, // a UUID always wins
			{"system-reader", lesX, lesX},
		} {
			r := clients[c.caller].Do(t, "GET", "/v1/runbooks/"+c.ident, nil)
			mustStatus(t, r, 200)
			if got := r.JSON(t)["uuid"]; got != c.want {
				t.Errorf("%s asking for %s got %v, want %s", c.caller, c.ident, got, c.want)
			}
		}
		// Two projects' runbooks of one name, no system one: the system
		// sees both and must name one by UUID; each project sees its own;
		// a third sees none.
		create(ownMgr, map[string]any{"name": "CUSTOM_Y"}, 201)
		create(lesMgr, map[string]any{"name": "CUSTOM_Y"}, 201)
		if r := clients["system-reader"].Do(t, "GET", "/v1/runbooks/CUSTOM_Y", nil); r.Status != 409 || !strings.Contains(r.Fault(t), "UUID") {
			t.Errorf("ambiguous name: %d %s", r.Status, r.Body)
		}
		if r := clients["lessee-member"].Do(t, "GET", "/v1/runbooks/CUSTOM_Y", nil); r.Status != 200 || r.JSON(t)["owner"] != "les" {
			t.Errorf("lessee's CUSTOM_Y: %d %s", r.Status, r.Body)
		}
		mustStatus(t, clients["other-member"].Do(t, "GET", "/v1/runbooks/CUSTOM_Y", nil), 404)
	})
}

// TestRunbookMarkerOracle: a runbook the caller may not see answers as a
// marker exactly as one that does not exist.
func TestRunbookMarkerOracle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		r := clients["owner-manager"].Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_HIDDEN", "steps": rbSteps})
		mustStatus(t, r, 201)
		hidden := r.JSON(t)["uuid"].(string)
		missing := "0b9f5a4e-2c1d-4e8f-9a7b-6c5d4e3f2a1b"
		stranger := clients["other-member"]
		a := stranger.Do(t, "GET", "/v1/runbooks?marker="+hidden, nil)
		b := stranger.Do(t, "GET", "/v1/runbooks?marker="+missing, nil)
		if a.Status != 400 || a.Status != b.Status || string(a.Body) != string(b.Body) {
			t.Errorf("hidden marker %d %s; missing marker %d %s", a.Status, a.Body, b.Status, b.Body)
		}
		a = stranger.Do(t, "GET", "/v1/runbooks?marker=CUSTOM_HIDDEN", nil)
		b = stranger.Do(t, "GET", "/v1/runbooks?marker=CUSTOM_NOWHERE", nil)
		if a.Status != 400 || a.Status != b.Status || string(a.Body) != string(b.Body) {
			t.Errorf("hidden name marker %d %s; missing name marker %d %s", a.Status, a.Body, b.Status, b.Body)
		}
		// The owner's own runbook is a good marker.
		mustStatus(t, clients["owner-member"].Do(t, "GET", "/v1/runbooks?marker="+hidden, nil), 200)
	})
}

// TestRunbookAuthorizeBeforeValidate: every runbook handler answers 404
// for what the caller cannot see and 403 for what it may not do before
// it looks at the body, so a bad body never tells a caller more.
func TestRunbookAuthorizeBeforeValidate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		r := clients["owner-manager"].Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_ORDER", "steps": rbSteps})
		mustStatus(t, r, 201)
		for _, c := range []struct {
			caller, method, path, body string
			want                       int
		}{
			{"owner-member", "POST", "/v1/runbooks", `{"name":"not a trait","steps":[]}`, 403},
			{"owner-member", "POST", "/v1/runbooks", `{"nope":1}`, 403},
			{"owner-member", "POST", "/v1/runbooks", `{not json`, 403},
			{"owner-manager", "POST", "/v1/runbooks", `{"name":"not a trait","steps":[]}`, 400},
			{"owner-manager", "POST", "/v1/runbooks", `{not json`, 400},
			{"owner-member", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `{not json`, 403},
			{"owner-member", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `[{"op":"replace","path":"/name","value":"bad name"}]`, 403},
			{"other-member", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `{not json`, 404},
			{"owner-manager", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `{not json`, 400},
			{"owner-manager", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `[{"op":"replace","path":"/name","value":"bad name"}]`, 400},
			{"owner-manager", "PATCH", "/v1/runbooks/CUSTOM_ORDER", `[{"op":"replace","path":"/public","value":"yes"}]`, 400},
			{"owner-member", "PUT", "/v1/runbooks/CUSTOM_ORDER/traits", `{not json`, 403},
			{"other-member", "PUT", "/v1/runbooks/CUSTOM_ORDER/traits", `{not json`, 404},
			{"owner-manager", "PUT", "/v1/runbooks/CUSTOM_ORDER/traits", `{not json`, 400},
			{"owner-member", "PUT", "/v1/runbooks/CUSTOM_ORDER/traits/bad-trait", "", 403},
			{"owner-manager", "PUT", "/v1/runbooks/CUSTOM_ORDER/traits/bad-trait", "", 400},
			{"owner-member", "DELETE", "/v1/runbooks/CUSTOM_ORDER/traits/CUSTOM_NOPE", "", 403},
			{"owner-manager", "DELETE", "/v1/runbooks/CUSTOM_ORDER/traits/CUSTOM_NOPE", "", 404},
			{"other-member", "DELETE", "/v1/runbooks/CUSTOM_ORDER/traits/CUSTOM_NOPE", "", 404},
		} {
			var body any
			if c.body != "" {
				body = c.body
			}
			got := clients[c.caller].Do(t, c.method, c.path, body)
			if got.Status != c.want {
				t.Errorf("%s %s %s as %s: %d, want %d: %.200s", c.method, c.path, c.body, c.caller, got.Status, c.want, got.Body)
			}
		}
	})
}
