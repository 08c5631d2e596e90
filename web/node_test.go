package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func TestNodePage(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	for _, u := range []struct {
		name  string
		scope identity.Scope
		role  string
	}{
		{"root", identity.Scope{System: true}, "admin"},
		{"lena", identity.Scope{Project: "les"}, "member"},
		{"rita", identity.Scope{Project: "les"}, "reader"},
		{"oscar", identity.Scope{Project: "oth"}, "admin"},
	} {
		if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: u.scope, Role: u.role}); err != nil {
			t.Fatal(err)
		}
	}
	signIn := func(user string) *browser {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		if st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}}); st != 303 {
			t.Fatalf("sign in %s: %d", user, st)
		}
		return b
	}
	root := signIn("root")
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "page-1", "driver": "fake", "owner": "own", "lessee": "les"})
	id := r.JSON(t)["uuid"].(string)
	api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"})

	page := func(b *browser) (int, string) {
		st, body, _ := b.do("GET", "/nodes/"+id, nil)
		return st, body
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := page(root)
		if strings.Contains(body, `data-testid="provision-state">manageable`) {
			if !strings.Contains(body, "Start cleaning") || !strings.Contains(body, "Power on") {
				t.Fatal("system admin lacks the power buttons or the cleaning form")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never became manageable:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The node's owner side set CUSTOM_PAGE; a system public runbook and
	// a lessee's own runbook both list it, but the node runs only the
	// system's, so the page offers only that one.
	api.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_PAGE", nil)
	for _, rb := range []map[string]any{{"name": "CUSTOM_PAGE_PUB", "public": true}, {"name": "CUSTOM_PAGE_LES", "owner": "les"}} {
		rb["traits"] = []string{"CUSTOM_PAGE"}
		rb["steps"] = []map[string]any{{"interface": "power", "step": "power_on", "order": 1}}
		if r := api.Do(t, "POST", "/v1/runbooks", rb); r.Status != 201 {
			t.Fatalf("runbook %v: %d %s", rb["name"], r.Status, r.Body)
		}
	}
	lena := signIn("lena")
	_, body := page(lena)
	if !strings.Contains(body, "Power on") || strings.Contains(body, "Start cleaning") ||
		!strings.Contains(body, refusalHTML("may not start cleaning", "baremetal:node:set_provision_state")) {
		t.Error("lessee member: wants power buttons and the arbitrary-steps form disabled with its rule")
	}
	if !strings.Contains(body, "Run CUSTOM_PAGE_PUB (clean)</button>") || strings.Contains(body, "Run CUSTOM_PAGE_LES") ||
		!strings.Contains(body, "<summary>1 more runbook you cannot run here: open for each one&#39;s reason</summary>") ||
		!strings.Contains(body, "runbook CUSTOM_PAGE_LES belongs to project les, which does not own node") {
		t.Error("lessee member: wants the system's runbook offered and its own project's shown disabled with the reason")
	}
	// A lessee reader sees the power controls disabled, with the reason.
	if _, body := page(signIn("rita")); strings.Contains(body, "Power on") ||
		!strings.Contains(body, `<details class="cannot" id="power-why" data-testid="power-why"><summary>You cannot change this node&#39;s power.</summary>`) ||
		!strings.Contains(body, "Not available: your role (reader of") || !strings.Contains(body, "by rule baremetal:node:set_power_state") {
		t.Error("lessee reader: wants disabled power buttons and the reason")
	}
	if st, _ := page(signIn("oscar")); st != 404 {
		t.Errorf("another project's admin gets %d for the node page", st)
	}

	// The lessee powers the node on from the page; the status fragment
	// comes back and the node ends up on.
	st, frag, _ := lena.do("POST", "/nodes/"+id+"/power", url.Values{"csrf": {lena.csrf}, "target": {"power on"}}, "HX-Request", "true")
	if st != 200 || !strings.Contains(frag, `id="status"`) || strings.Contains(frag, "<html") {
		t.Fatalf("power from the page: %d\n%s", st, frag)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(frag, `data-testid="power-state">power on </dd>`) {
		if time.Now().After(deadline) {
			t.Fatalf("power on never showed:\n%s", frag)
		}
		time.Sleep(50 * time.Millisecond)
		_, frag, _ = lena.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
	}
	// Arbitrary steps from the page are refused for the lessee, and the
	// refusal is shown, not a crash.
	_, frag, _ = lena.do("POST", "/nodes/"+id+"/clean", url.Values{"csrf": {lena.csrf}, "steps": {`[{"interface":"power","step":"power_off"}]`}}, "HX-Request", "true")
	if !strings.Contains(frag, "Access was denied") {
		t.Errorf("lessee cleaning with steps:\n%s", frag)
	}
	_, frag, _ = root.do("POST", "/nodes/"+id+"/clean", url.Values{"csrf": {root.csrf}, "steps": {`not json`}}, "HX-Request", "true")
	if !strings.Contains(frag, "steps: not a JSON list") {
		t.Errorf("bad steps JSON:\n%s", frag)
	}

	// A system admin re-leases the node from its page; the old lessee loses it.
	if !strings.Contains(body, `<button type="submit" disabled>Save owner and lessee</button>`) ||
		!strings.Contains(body, refusalHTML("your role (member of les) may not change the lessee", "baremetal:node:update:lessee")) {
		t.Error("the lessee member is not shown the owner and lessee form disabled with the rule")
	}
	if st, _, _ := root.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {root.csrf}, "owner": {"own"}, "lessee": {"new-tenant"}, "new_project": {"new-tenant"}}); st != 303 {
		t.Fatalf("set lessee: %d", st)
	}
	if st, _ := page(lena); st != 404 {
		t.Errorf("the former lessee still sees the node: %d", st)
	}
	if st, _, _ := root.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {root.csrf}, "owner": {strings.Repeat("x", 300)}, "lessee": {""}}); st != 400 {
		t.Errorf("a malformed owner: %d", st)
	}
}

// TestTenancyForm: an owner's member changes the lessee (not the owner) from
// the page, warned of a project nothing uses; the change is in the node's
// history, from the page and from the API alike; a lessee, another project
// and a forged owner field are refused with nothing written; clearing the
// owner asks first.
func TestTenancyForm(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		id := ids["f-00"] // owner blue, lessee green
		pat, gil, root := signInAs(t, srv, "pat"), signInAs(t, srv, "gil"), signInAs(t, srv, "root")
		tenancy := func() (string, string) {
			n := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			o, _ := n["owner"].(string)
			l, _ := n["lessee"].(string)
			return o, l
		}

		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		sec := section(t, page, "tenancy")
		for _, want := range []string{
			`<input id="owner" name="owner" value="blue" disabled aria-describedby="owner-why">`,
			refusalHTML("your role (member of blue) may not change the owner", "baremetal:node:update:owner"),
			`<input id="lessee" name="lessee" value="green" list="known-projects"`,
			`<option value="green"></option>`, `<option value="blue"></option>`,
			`<button type="submit">Save owner and lessee</button>`,
		} {
			if !strings.Contains(sec, want) {
				t.Errorf("owner member's tenancy section lacks %s\n%s", want, sec)
			}
		}
		if strings.Contains(sec, `<option value="red">`) {
			t.Error("suggestions name a project on nodes blue may not list")
		}
		if _, frag, _ := pat.do("GET", "/nodes/"+id+"/tenancy/check?lessee=no-such-project", nil, "HX-Request", "true"); !strings.Contains(frag,
			"No node or user you can see is in project no-such-project yet — check the spelling.") {
			t.Errorf("no warning for an unknown project: %s", frag)
		}
		// red owns a node blue may not list: the warning tells pat no more
		// of it than of a name nobody uses, as the suggestions do.
		if _, frag, _ := pat.do("GET", "/nodes/"+id+"/tenancy/check?lessee=red", nil, "HX-Request", "true"); !strings.Contains(frag, "in project red yet") {
			t.Errorf("the warning says whether a project pat cannot see exists: %s", frag)
		}
		if _, frag, _ := root.do("GET", "/nodes/"+id+"/tenancy/check?lessee=red", nil, "HX-Request", "true"); strings.Contains(frag, "No node") {
			t.Errorf("a warning to an operator for a project in use: %s", frag)
		}
		if _, frag, _ := pat.do("GET", "/nodes/"+id+"/tenancy/check?lessee=blue", nil, "HX-Request", "true"); strings.Contains(frag, "No node") {
			t.Errorf("a warning for the caller's own project: %s", frag)
		}

		// Hostile: the lessee's member, another project's member, and the
		// owner's member forging the owner field with the lessee.
		if st, body, _ := gil.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {gil.csrf}, "owner": {"blue"}, "lessee": {"green-2"}}); st != 403 ||
			!strings.Contains(body, "baremetal:node:update:lessee") {
			t.Errorf("lessee member setting the lessee: %d", st)
		}
		if st, _, _ := gil.do("POST", "/nodes/"+ids["f-02"]+"/tenancy", url.Values{"csrf": {gil.csrf}, "lessee": {"green"}}); st != 404 {
			t.Errorf("another project's member: %d", st)
		}
		if st, _, _ := pat.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {pat.csrf}, "owner": {"red"}, "lessee": {"tenant-blue"}}); st != 403 {
			t.Errorf("forged owner field: %d", st)
		}
		if o, l := tenancy(); o != "blue" || l != "green" {
			t.Fatalf("a refused form wrote: owner %q lessee %q", o, l)
		}

		// The owner's member sets the lessee: only that field is patched,
		// and only once a project nothing uses yet is confirmed as new.
		st, body, _ := pat.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {pat.csrf}, "owner": {"blue"}, "lessee": {"tenant-blue"}})
		if st != 200 || !strings.Contains(body, `data-testid="confirm-new-project"`) || !strings.Contains(body, "No node, role or runbook uses project tenant-blue yet.") ||
			!strings.Contains(body, `<input type="hidden" name="new_project" value="tenant-blue">`) || !strings.Contains(body, `<input type="hidden" name="lessee" value="tenant-blue">`) ||
			strings.Contains(body, `<input type="hidden" name="owner"`) || !strings.Contains(body, "Yes, use new project tenant-blue") {
			t.Fatalf("a new lessee project unconfirmed: %d\n%s", st, body)
		}
		if _, l := tenancy(); l != "green" {
			t.Fatal("a new project was saved before it was confirmed")
		}
		if st, body, _ := pat.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {pat.csrf}, "lessee": {"tenant-blue"}, "new_project": {"tenant-bleu"}}); st != 200 ||
			!strings.Contains(body, "confirm-new-project") {
			t.Errorf("confirming another name than the one typed saves it: %d", st)
		}
		if st, _, h := pat.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {pat.csrf}, "lessee": {"tenant-blue"}, "new_project": {"tenant-blue"}}); st != 303 ||
			h.Get("Location") != "/nodes/"+id {
			t.Fatalf("owner member sets the lessee: %d", st)
		}
		if o, l := tenancy(); o != "blue" || l != "tenant-blue" {
			t.Fatalf("owner %q lessee %q", o, l)
		}
		_, page, _ = pat.do("GET", "/nodes/"+id, nil)
		for _, want := range []string{
			`<p class="flash" role="status">Lessee of f-00 set to tenant-blue. Project tenant-blue is new.</p>`,
			`<td data-label="Event">Lessee changed: green → tenant-blue</td><td data-label="By">pat</td>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("after saving, the page lacks %s", want)
			}
		}
		// The API's PATCH writes the same history.
		api.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/lessee", "value": "green"}})
		if _, page, _ = pat.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `<td data-label="Event">Lessee changed: tenant-blue → green</td><td data-label="By">root</td>`) {
			t.Error("an API lessee change is not in the node's history")
		}

		// Clearing the owner is asked about, naming the lessee that stays.
		st, body, _ = root.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {root.csrf}, "owner": {""}, "lessee": {"green"}})
		if st != 200 || !strings.Contains(body, "Clear the owner of f-00? Its lessee green keeps its lease.") {
			t.Fatalf("clearing the owner without confirming: %d", st)
		}
		if o, _ := tenancy(); o != "blue" {
			t.Fatal("the owner was cleared before confirming")
		}
		if st, _, _ := root.do("POST", "/nodes/"+id+"/tenancy", url.Values{"csrf": {root.csrf}, "owner": {""}, "lessee": {"green"}, "confirmed": {"yes"}}); st != 303 {
			t.Fatalf("confirmed clear: %d", st)
		}
		if o, l := tenancy(); o != "" || l != "green" {
			t.Fatalf("after clearing: owner %q lessee %q", o, l)
		}
		if _, page, _ = root.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "Owner of f-00 cleared.") || !strings.Contains(page, "Owner changed: blue → (none)") {
			t.Error("clearing the owner: no flash or history")
		}
	})
}

// ruleHTML is how a refusal's rule shows: folded behind Details, so a
// person reads the sentence and whoever needs the rule opens it.
func ruleHTML(rule string) string {
	return `<details class="rule"><summary>Rule</summary><code>` + rule + `</code></details>`
}

// refusalHTML is a refusal as the page renders it: its sentence, ended,
// then its rule behind Details (ruleHTML).
func refusalHTML(sentence, rule string) string { return sentence + ". " + ruleHTML(rule) }
