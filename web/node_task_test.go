package web_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodePageTaskFirst: the lessee's member finds the runbooks they may
// run above everything else, those they may not in one collapsed line;
// after Run the runbook section says it started and, once the run ends,
// that it succeeded; the history gathers the run's events under one
// header with its outcome.
func TestNodePageTaskFirst(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		ctx := context.Background()
		id := ids["f-00"] // owner blue, lessee green, trait CUSTOM_X
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("manageable").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		var rb string
		for _, r := range []map[string]any{
			{"name": "CUSTOM_X", "public": true, "steps": []map[string]any{
				{"interface": "power", "step": "power_on", "order": 1},
				{"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 1}, "order": 2}}},
			{"name": "CUSTOM_X_RED", "owner": "red", "traits": []string{"CUSTOM_X"},
				"steps": []map[string]any{{"interface": "power", "step": "power_on", "order": 1}}},
		} {
			res := api.Do(t, "POST", "/v1/runbooks", r)
			if res.Status != 201 {
				t.Fatalf("runbook %v: %d %s", r["name"], res.Status, res.Body)
			}
			if r["name"] == "CUSTOM_X" {
				rb = res.JSON(t)["uuid"].(string)
			}
		}
		root, gil := signInAs(t, srv, "root"), signInAs(t, srv, "gil")
		_, page, _ := root.do("GET", "/nodes/"+id, nil)
		// The order of the page: status, the runnable runbooks, then
		// power, and only below them the history, hardware, operator
		// actions, tenancy and explicit steps, each collapsed.
		order := []string{`id="status"`, `<button type="submit">Run CUSTOM_X (clean)</button>`, `data-testid="runbooks-cannot"`, `id="power"`,
			`id="more-history"`, `id="more-hardware"`, `id="operator"`, `id="more-tenancy"`, `id="more-steps"`}
		last := -1
		for _, o := range order {
			i := strings.Index(page, o)
			if i < 0 || i < last {
				t.Fatalf("%s is missing or out of order (at %d, after %d)", o, i, last)
			}
			last = i
		}
		for _, d := range []string{"more-history", "more-hardware", "more-tenancy", "more-steps"} {
			if !regexp.MustCompile(`<details class="fold" id="` + d + `">`).MatchString(page) {
				t.Errorf("%s is not collapsed", d)
			}
		}
		// red's runbook cannot run on blue's node: one collapsed line.
		if !strings.Contains(page, `<details class="cannot" data-testid="runbooks-cannot"><summary>1 more runbook you cannot run here: open for each one&#39;s reason</summary>`) ||
			strings.Contains(page, "Run CUSTOM_X_RED") {
			t.Errorf("the runbook root may not run here is not one collapsed line")
		}

		// gil (green's member, the lessee) runs CUSTOM_X: the answer's
		// runbook section says it started, where the button was.
		_, page, _ = gil.do("GET", "/nodes/"+id, nil)
		if strings.Contains(page, "CUSTOM_X_RED") || !strings.Contains(page, "Run CUSTOM_X (clean)</button>") {
			t.Fatalf("the lessee's member is not offered CUSTOM_X alone")
		}
		st, frag, _ := gil.do("POST", "/nodes/"+id+"/runbook", url.Values{"csrf": {gil.csrf}, "runbook": {rb}}, "HX-Request", "true")
		if st != 200 || !strings.Contains(frag, `<div id="runbooks" hx-swap-oob="true">`) ||
			!strings.Contains(frag, "<strong>Started runbook CUSTOM_X.</strong>") {
			t.Fatalf("run: %d, no start in the runbook section\n%s", st, frag)
		}
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(frag, `<p class="flash" data-testid="run-result">Runbook CUSTOM_X succeeded.</p>`) {
			if time.Now().After(deadline) {
				t.Fatalf("no success message:\n%s", frag)
			}
			time.Sleep(100 * time.Millisecond)
			_, frag, _ = gil.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		}
		if s := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"]; s != "manageable" {
			t.Errorf("after the run the API says %v", s)
		}
		// The history: the run under one header with its outcome, its
		// events inside, newest first; the events before it outside.
		_, page, _ = gil.do("GET", "/nodes/"+id, nil)
		m := regexp.MustCompile(`(?s)<details class="run" id="run-(\d+)" data-outcome="succeeded"><summary>.*?</time> Runbook CUSTOM_X, run by gil: succeeded in \d+ s</summary>(.*?)</details>`).FindStringSubmatch(page)
		if m == nil {
			i := strings.Index(page, `id="history"`)
			t.Fatalf("no grouped run in the history:\n%s", page[i:i+3000])
		}
		steps := regexp.MustCompile(`<td data-label="Event">(All 2 clean steps done[^<]*|Step deploy\.wait done|Step power\.power_on started \(1 of 2\)|Runbook CUSTOM_X, run by gil: clean with 2 step\(s\))</td>`).FindAllStringSubmatch(m[2], -1)
		if len(steps) != 4 || !strings.HasPrefix(steps[0][1], "All 2") || !strings.HasPrefix(steps[3][1], "Runbook CUSTOM_X") {
			t.Errorf("the run's group lacks its events, newest first: %v", steps)
		}
		if strings.Count(page, `<details class="run"`) != 1 {
			t.Errorf("want one run in the history")
		}
		// The run's own page: who ran it, how it ended, each step.
		st, run, _ := gil.do("GET", "/nodes/"+id+"/runs/"+m[1], nil)
		if st != 200 || !strings.Contains(run, "<h1>Runbook CUSTOM_X on f-00</h1>") || !strings.Contains(run, "<dt>Run by</dt><dd>gil</dd>") ||
			!strings.Contains(run, `<dd data-testid="run-outcome">succeeded</dd>`) ||
			!regexp.MustCompile(`<tr data-step="power.power_on">.*?<td>\d+ s</td><td>done</td></tr><tr data-step="deploy.wait">.*?<td>\d+ s</td><td>done</td></tr></tbody>`).MatchString(run) {
			t.Errorf("the run's page: %d\n%s", st, run)
		}
		if !strings.Contains(page, `href="/nodes/`+id+`/runs/`+m[1]+`"`) {
			t.Errorf("the runbook section does not lead to the run's page")
		}
		if st, _, _ := gil.do("GET", "/nodes/"+id+"/runs/999999", nil); st != 404 {
			t.Errorf("a run not in the history: %d", st)
		}
		if st, _, _ := gil.do("GET", "/nodes/"+id+"/runs/x", nil); st != 400 {
			t.Errorf("a run that is not a number: %d", st)
		}

	})
}
