package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestMissingActionsSayWhy: sections stay on the node page with the reason
// they cannot be used, and a failed run offers the way back.
func TestMissingActionsSayWhy(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	for user, role := range map[string]string{"olly": "member", "rita": "reader"} {
		if err := srv.IDs.CreateUser(ctx, user, user+"-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, user, identity.Assignment{Scope: identity.Scope{Project: "own"}, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.IDs.CreateUser(ctx, "root", "root-password-1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Client()
	admin.Header.Set("X-Auth-Token", tok)
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "n1", "driver": "fake", "owner": "own"})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["uuid"].(string)
	olly := signInAs(t, srv, "olly")
	_, page, _ := olly.do("GET", "/nodes/"+id, nil)
	if !strings.Contains(page, "Runbooks run on manageable or active nodes; this node is enroll.") {
		t.Errorf("an enrolled node's runbook section does not say why nothing runs")
	}

	// A failed clean: the owner's member is offered the way back, a reader
	// sees why it is not offered to them.
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").SetLastError("Step power.power_on failed").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	_, page, _ = olly.do("GET", "/nodes/"+id, nil)
	if !strings.Contains(page, "Return to manageable") || !strings.Contains(page, "this node is clean failed") {
		t.Fatalf("clean failed: no recovery offered\n%s", page)
	}
	_, page, _ = signInAs(t, srv, "rita").do("GET", "/nodes/"+id, nil)
	if strings.Contains(page, ">Return to manageable<") || !strings.Contains(page, refusalHTML("may not recover the node", "baremetal:node:set_provision_state")) {
		t.Errorf("reader: wants the recovery reason, not the button")
	}
	olly.do("GET", "/nodes/"+id, nil)
	if st, _, _ := olly.do("POST", "/nodes/"+id+"/provision", url.Values{"csrf": {olly.csrf}, "target": {"manage"}}, "HX-Request", "true"); st != 200 {
		t.Fatalf("return to manageable: %d", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		state := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"]
		if state == "manageable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after return to manageable the node is %v", state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Only the recovery verbs are taken from that form.
	if _, body, _ := olly.do("POST", "/nodes/"+id+"/provision", url.Values{"csrf": {olly.csrf}, "target": {"provide"}}, "HX-Request", "true"); !strings.Contains(body, "Only abort and return to manageable") {
		t.Errorf("the recovery form took another verb")
	}
	if s := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"]; s != "manageable" {
		t.Errorf("state after a refused verb: %v", s)
	}
}

// TestRunbooksAndRetry: every runbook matching the node is listed, those
// that cannot run disabled with the reason; the Run confirmation names the
// node; after a failed run its owner's member retries the same runbook in
// one step, while the lessee's member sees Retry disabled with the rule and
// is refused, the reason kept without JavaScript.
func TestRunbooksAndRetry(t *testing.T) {
	srv, api, ids := fleet(t, storetest.Setting(t, "sqlite"))
	ctx := context.Background()
	id := ids["f-00"] // owner blue, lessee green, trait CUSTOM_X
	var rbID string
	for _, rb := range []map[string]any{{"name": "CUSTOM_X", "public": true, "description": "Powers the node on.", "extra": map[string]any{"anvil_retryable": false}}, {"name": "CUSTOM_X_RED", "owner": "red", "traits": []string{"CUSTOM_X"}}} {
		rb["steps"] = []map[string]any{{"interface": "power", "step": "power_on", "order": 1}}
		r := api.Do(t, "POST", "/v1/runbooks", rb)
		if r.Status != 201 {
			t.Fatalf("runbook %v: %d %s", rb["name"], r.Status, r.Body)
		}
		if rb["name"] == "CUSTOM_X" {
			rbID = r.JSON(t)["uuid"].(string)
		}
	}
	pat, gil, root := signInAs(t, srv, "pat"), signInAs(t, srv, "gil"), signInAs(t, srv, "root")
	runbookRow := func(page, name string) string {
		i := strings.Index(page, `<div class="runbook" data-runbook="`+name+`"`)
		if i < 0 {
			return ""
		}
		return page[i : i+strings.Index(page[i:], "</div>")]
	}

	_, page, _ := pat.do("GET", "/nodes/"+id, nil)
	if row := runbookRow(page, "CUSTOM_X"); !strings.Contains(page, `<details class="cannot" data-testid="runbooks-cannot"><summary>1 runbook you cannot run here now: Runbooks run on manageable or active nodes; this node is enroll.</summary>`) ||
		strings.Contains(row, "<button") ||
		!strings.Contains(row, "Runbooks run on manageable or active nodes; this node is enroll.") ||
		!strings.Contains(row, `<p data-testid="runbook-description">Powers the node on.</p>`) {
		t.Errorf("enrolled node: CUSTOM_X not shown disabled with the state\n%s", row)
	}
	if runbookRow(page, "CUSTOM_X_RED") != "" {
		t.Error("blue's member sees red's private runbook")
	}
	api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"})
	waitManageable(t, api, id)
	_, page, _ = root.do("GET", "/nodes/"+id, nil)
	if row := runbookRow(page, "CUSTOM_X_RED"); !strings.Contains(page, "1 more runbook you cannot run here: open for each one&#39;s reason") || strings.Contains(row, "<button") || !strings.Contains(row, "belongs to project red, which does not own node") {
		t.Errorf("red's runbook on blue's node: not disabled with the reason\n%s", row)
	}
	_, page, _ = pat.do("GET", "/nodes/"+id, nil)
	if row := runbookRow(page, "CUSTOM_X"); !strings.Contains(row, `hx-confirm="Run CUSTOM_X on f-00? Its steps start at once."`) ||
		!strings.Contains(row, `<button type="submit">Run CUSTOM_X (clean)</button>`) {
		t.Errorf("manageable node: CUSTOM_X not offered, naming the node\n%s", row)
	}
	if _, frag, _ := pat.do("POST", "/nodes/"+id+"/runbook", url.Values{"csrf": {pat.csrf}, "runbook": {rbID}}, "HX-Request", "true"); strings.Contains(frag, `class="error"`) {
		t.Fatalf("run: %s", frag)
	}
	waitManageable(t, api, id)

	// The run failed on a BMC that refused the connection: it failed at
	// once, so the summary claims no wait.
	raw := "Step power.power_on failed: setting power on: the BMC did not answer (unreachable) after 2 tries of 20 s each"
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").SetLastError(raw).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, page, _ := pat.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `<strong data-testid="error-summary">The BMC at this node could not be reached (2 tries).</strong>`) {
		t.Errorf("refused BMC: summary\n%s", section(t, page, "status"))
	}
	raw = "Step power.power_on failed: setting power on: the BMC did not answer (name not resolved) after 1 try of 20 s each"
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetLastError(raw).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, page, _ := pat.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `<strong data-testid="error-summary">The BMC&#39;s host name could not be resolved (1 try).</strong> An operator must correct the node&#39;s BMC address or the name service.`) {
		t.Errorf("unresolved BMC: summary\n%s", section(t, page, "status"))
	}
	// The same run failed on a BMC that did not answer in time.
	raw = "Step power.power_on failed: setting power on: the BMC did not answer (timeout) after 2 tries of 20 s each"
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetLastError(raw).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	_, page, _ = pat.do("GET", "/nodes/"+id, nil)
	for _, want := range []string{
		`<strong data-testid="error-summary">The BMC at this node did not answer within 20 s (2 tries).</strong>`,
		"Then use “Retry” under Recovery to run it again, or “Return to manageable”.",
		`hx-confirm="Retry on f-00 (leased to green): run runbook CUSTOM_X again?"><input type="hidden" name="csrf" value="` + pat.csrf + `"> <button type="submit">Retry</button>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("owner member's failed node lacks %s", want)
		}
	}
	// The lessee member ran a runbook its publisher opted out of
	// retries: no Retry, the reason, who can act, and a way to ask.
	_, page, _ = gil.do("GET", "/nodes/"+id, nil)
	for _, want := range []string{
		"Runbook CUSTOM_X is not retryable: its publisher opted out; project blue or an operator can recover the node; “Ask the owner to look” tells them.",
		"Project blue or an operator can recover the node; use “Ask the owner to look” under Recovery to tell them.",
		`<button type="submit">Ask the owner to look</button>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("lessee member's failed node lacks %s", want)
		}
	}
	if strings.Contains(page, "use “Return to manageable”") || strings.Contains(page, ">Retry</button>") {
		t.Error("the lessee member is offered a recovery it may not use")
	}
	// Without JavaScript a refused retry redirects and its reason follows.
	if st, _, h := gil.do("POST", "/nodes/"+id+"/retry", url.Values{"csrf": {gil.csrf}}); st != 303 || h.Get("Location") != "/nodes/"+id {
		t.Fatalf("lessee retry: %d", st)
	}
	if _, page, _ = gil.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `<p class="flash" role="status">Not done: Runbook CUSTOM_X is not retryable: its publisher opted out`) {
		t.Error("the lessee's refused retry lost its reason")
	}
	if s := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"]; s != "clean failed" {
		t.Fatalf("a refused retry changed the node: %v", s)
	}
	// Asking the owner records it in the node's history, where the
	// owner's member reads it.
	if _, frag, _ := gil.do("POST", "/nodes/"+id+"/notify", url.Values{"csrf": {gil.csrf}}, "HX-Request", "true"); !strings.Contains(frag, "The owner was asked to look at the failed run: the request is in their inbox") {
		t.Errorf("notify: %s", section(t, frag, "status"))
	}
	if _, page, _ = pat.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "gil asks the owner to look at the failed runbook CUSTOM_X (clean failed).") {
		t.Error("the owner's member does not see the lessee's request")
	}
	// Once the publisher drops the opt-out, the lessee member may retry.
	if r := api.Do(t, "PATCH", "/v1/runbooks/"+rbID, `[{"op":"remove","path":"/extra/anvil_retryable"}]`); r.Status != 200 {
		t.Fatalf("mark retryable: %d %s", r.Status, r.Body)
	}
	if _, page, _ = gil.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "<button type=\"submit\">Retry</button>") || !strings.Contains(page, ">Return to manageable</button>") {
		t.Errorf("a retryable runbook's lessee is not offered Retry and the way back\n%s", section(t, page, "recovery"))
	}
	// She may still ask the owner (a failure only the owner can fix does
	// not go away by retrying); the owner's member has no one to ask.
	if !strings.Contains(page, `<button type="submit">Ask the owner to look</button>`) {
		t.Errorf("a retryable runbook's lessee may no longer ask the owner\n%s", section(t, page, "recovery"))
	}
	if _, page, _ = pat.do("GET", "/nodes/"+id, nil); strings.Contains(page, "Ask the owner to look</button>") {
		t.Error("the owner's member is offered to ask the owner")
	}

	if _, frag, _ := pat.do("POST", "/nodes/"+id+"/retry", url.Values{"csrf": {pat.csrf}}, "HX-Request", "true"); strings.Contains(frag, `class="error"`) {
		t.Fatalf("retry: %s", frag)
	}
	waitManageable(t, api, id)
	if _, page, _ = pat.do("GET", "/nodes/"+id+"?history=1", nil); strings.Count(page, `<td data-label="Event">Runbook CUSTOM_X, run by pat: clean with 1 step(s)</td>`) != 2 ||
		strings.Count(page, `<details class="run"`) != 2 {
		t.Errorf("the retry did not run CUSTOM_X again\n%s", section(t, page, "status"))
	}

	// A failed service run: Retry returns the node to active and services
	// it again with the same runbook.
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("active").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	waitState := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			if n["provision_state"] == want && n["target_provision_state"] == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node is %v, want %s", n["provision_state"], want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pat.do("POST", "/nodes/"+id+"/runbook", url.Values{"csrf": {pat.csrf}, "runbook": {rbID}}, "HX-Request", "true")
	waitState("active")
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("service failed").SetLastError("Step power.power_on failed").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, page, _ = pat.do("GET", "/nodes/"+id, nil); !strings.Contains(page, ">Return to active</button>") || !strings.Contains(page, "<button type=\"submit\">Retry</button>") {
		t.Fatalf("service failed: no Retry beside Return to active")
	}
	pat.do("POST", "/nodes/"+id+"/retry", url.Values{"csrf": {pat.csrf}}, "HX-Request", "true")
	waitState("active")
	if _, page, _ = pat.do("GET", "/nodes/"+id+"?history=1", nil); strings.Count(page, "Runbook CUSTOM_X, run by pat: service") != 2 {
		t.Errorf("the retry did not service the node with CUSTOM_X again\n%s", section(t, page, "status"))
	}
}
