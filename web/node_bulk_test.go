package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBulkActions: a selection from the list first shows how many nodes
// are eligible and why the others are not, then runs on each eligible
// node through the same services (and rules) as the node page, and shows
// every node's result and state in one table that follows their progress.
// Another project's node ids, unknown ids and garbage in a selection are
// left out and counted alike, never named, never acted on.
func TestBulkActions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		ctx := context.Background()
		for _, n := range []string{"f-00", "f-01", "f-02", "f-06"} {
			if err := srv.DB.Node.Update().Where(node.UUID(ids[n])).SetProvisionState("manageable").Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r := api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_X", "public": true,
			"steps": []map[string]any{{"interface": "power", "step": "power_on", "order": 1}, {"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 1}, "order": 2}}})
		if r.Status != 201 {
			t.Fatalf("runbook: %d %s", r.Status, r.Body)
		}
		before := api.Do(t, "GET", "/v1/nodes/"+ids["f-01"], nil).Body
		pat := signInAs(t, srv, "pat")
		sel := url.Values{"csrf": {pat.csrf}, "action": {"runbook"}, "node": {ids["f-00"], ids["f-02"], ids["f-04"], ids["f-06"],
			ids["f-01"], "00000000-0000-4000-8000-000000000000", "not-a-uuid", ids["f-00"]}}

		// The choice first: no verdicts before a runbook is chosen.
		st, page, _ := pat.do("POST", "/nodes/bulk", sel)
		if st != 200 || !strings.Contains(page, `<option value="CUSTOM_X">CUSTOM_X</option>`) || strings.Contains(page, "are eligible") ||
			!strings.Contains(page, "3 selected nodes were not found: deleted, or not visible to you.") {
			t.Fatalf("bulk page: %d\n%s", st, page)
		}
		sel.Set("runbook", "CUSTOM_X")
		_, page, _ = pat.do("POST", "/nodes/bulk", sel)
		for _, want := range []string{
			`data-testid="bulk-eligible">2 of 4 selected nodes are eligible`,
			"<strong>1:</strong> The node lacks trait CUSTOM_X, which the runbook requires. <small>(f-02)</small>",
			"<strong>1:</strong> Runbooks run on manageable or active nodes; this node is enroll. <small>(f-04)</small>",
			// Whoever confirms is told whose machines these are.
			`data-confirm="Run CUSTOM_X on 2 nodes: f-00, f-06? Leased to green (2)."`,
			`data-testid="bulk-lessees">Leased to green (2).</p>`,
			">Run CUSTOM_X on 2 nodes</button>",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("eligibility lacks %s", want)
			}
		}
		if strings.Contains(page, "f-01") || strings.Contains(page, ids["f-01"]) || strings.Contains(page, "not-a-uuid") {
			t.Errorf("the preview names a node the member may not see")
		}

		// Run: two started, two left alone with their reason, and the
		// hidden node untouched.
		st, page, _ = pat.do("POST", "/nodes/bulk/run", sel)
		if st != 200 || strings.Count(page, `data-result="ok"`) != 2 || strings.Count(page, `data-result="skip"`) != 2 ||
			!strings.Contains(page, "Left alone: Runbooks run on manageable or active nodes; this node is enroll.") || strings.Contains(page, "f-01") {
			t.Fatalf("bulk run: %d\n%s", st, page)
		}
		if !strings.Contains(page, `hx-post="/nodes/bulk/progress"`) {
			t.Errorf("the results do not follow the runs")
		}
		// The table follows the runs until both are done.
		prog := url.Values{"csrf": {pat.csrf}, "node": {ids["f-00"], ids["f-06"], ids["f-01"]}, "result": {"ok|Started", "ok|Started", "ok|Started"}}
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, frag, _ := pat.do("POST", "/nodes/bulk/progress", prog, "HX-Request", "true")
			if strings.Contains(frag, "f-01") || strings.Contains(frag, ids["f-01"]) {
				t.Fatalf("progress shows a hidden node:\n%s", frag)
			}
			if strings.Count(frag, "○</span> manageable") == 2 && !strings.Contains(frag, "hx-trigger") {
				if strings.Count(frag, ">Started<") != 2 {
					t.Errorf("results lost on the way:\n%s", frag)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs never finished:\n%s", frag)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, n := range []string{"f-00", "f-06"} {
			done, err := srv.DB.NodeEvent.Query().Where(nodeevent.HasNodeWith(node.UUID(ids[n])), nodeevent.User("pat"),
				nodeevent.EventHasPrefix("All 2 clean steps done")).Exist(ctx)
			if err != nil || !done {
				t.Errorf("%s: no run by pat in its history (%v)", n, err)
			}
		}

		// Power on "all matching" a filter: blue's gpu nodes.
		all := url.Values{"csrf": {pat.csrf}, "action": {"power"}, "all": {"1"}, "filter": {"class=gpu"}, "power": {"power on"}}
		_, page, _ = pat.do("POST", "/nodes/bulk", all)
		if !strings.Contains(page, "3 of 3 selected nodes are eligible") || !strings.Contains(page, "Power on on 3 nodes") ||
			!strings.Contains(page, `data-confirm="Power on on 3 nodes: f-00, f-04, f-08? Leased to green (1); 2 not leased."`) {
			t.Errorf("power on all gpu:\n%s", page)
		}
		// "All matching" another project's filter is refused as the list refuses it.
		if st, page, _ := pat.do("POST", "/nodes/bulk", url.Values{"csrf": {pat.csrf}, "action": {"power"}, "all": {"1"}, "filter": {"owner=red"}}); st != 403 || strings.Contains(page, "f-01") {
			t.Errorf("all matching owner=red: %d", st)
		}
		// A forged run with only another project's node does nothing.
		st, page, _ = pat.do("POST", "/nodes/bulk/run", url.Values{"csrf": {pat.csrf}, "action": {"power"}, "power": {"power off"}, "node": {ids["f-01"], ids["f-03"]}})
		if st != 200 || strings.Contains(page, "data-result") || strings.Contains(page, "f-01") {
			t.Errorf("forged run on hidden nodes: %d\n%s", st, page)
		}
		if after := api.Do(t, "GET", "/v1/nodes/"+ids["f-01"], nil).Body; string(after) != string(before) {
			t.Errorf("the hidden node changed:\nbefore %s\nafter  %s", before, after)
		}

		// Maintenance as the lessee's member is refused per node with the
		// rule; a system admin puts two nodes in and is told of the one
		// already there.
		gil := signInAs(t, srv, "gil")
		_, page, _ = gil.do("POST", "/nodes/bulk", url.Values{"csrf": {gil.csrf}, "action": {"maintenance"}, "maintenance": {"on"}, "node": {ids["f-00"]}})
		if !strings.Contains(page, "0 of 1 selected nodes are eligible") || !strings.Contains(page, "by rule baremetal:node:set_maintenance") {
			t.Errorf("member maintenance:\n%s", page)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-07"])).SetMaintenance(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		root := signInAs(t, srv, "root")
		m := url.Values{"csrf": {root.csrf}, "action": {"maintenance"}, "maintenance": {"on"}, "reason": {"rack 4 power work"}, "node": {ids["f-05"], ids["f-07"], ids["f-09"]}}
		_, page, _ = root.do("POST", "/nodes/bulk", m)
		if !strings.Contains(page, "2 of 3 selected nodes are eligible") || !strings.Contains(page, "The node is already in maintenance. <small>(f-07)</small>") {
			t.Errorf("root maintenance preview:\n%s", page)
		}
		_, page, _ = root.do("POST", "/nodes/bulk/run", m)
		if strings.Count(page, `data-result="ok"`) != 2 {
			t.Errorf("root maintenance run:\n%s", page)
		}
		for _, n := range []string{"f-05", "f-09"} {
			if v := api.Do(t, "GET", "/v1/nodes/"+ids[n], nil).JSON(t); v["maintenance"] != true || v["maintenance_reason"] != "rack 4 power work" {
				t.Errorf("%s after bulk maintenance: %v %v", n, v["maintenance"], v["maintenance_reason"])
			}
		}
		// Bad input: an unknown action, and too many nodes.
		if st, _, _ := root.do("POST", "/nodes/bulk", url.Values{"csrf": {root.csrf}, "action": {"delete"}}); st != 400 {
			t.Errorf("unknown action: %d", st)
		}
		many := url.Values{"csrf": {root.csrf}, "action": {"power"}}
		for range 1001 {
			many.Add("node", "00000000-0000-4000-8000-"+strings.Repeat("0", 12))
		}
		many["node"][0] = "10000000-0000-4000-8000-000000000000"
		if st, _, _ := root.do("POST", "/nodes/bulk", many); st != 200 {
			t.Errorf("1001 copies of two ids (deduplicated): %d", st)
		}
	})
}
