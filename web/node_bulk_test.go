package web_test

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// namesF01 finds the hidden node f-01's name as a name, not inside a
// random UUID or token ("…bedf-0156…" holds "f-01").
var namesF01 = regexp.MustCompile(`\bf-01\b`)

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
		if st != 200 || !strings.Contains(page, `<option value="CUSTOM_X">CUSTOM_X — runs on 2 of your nodes</option>`) || strings.Contains(page, "are eligible") ||
			!strings.Contains(page, "3 selected nodes were not found: deleted, or not visible to you.") {
			t.Fatalf("bulk page: %d\n%s", st, page)
		}
		sel.Set("runbook", "CUSTOM_X")
		_, page, _ = pat.do("POST", "/nodes/bulk", sel)
		for _, want := range []string{
			`data-testid="bulk-eligible">2 of 4 selected nodes are eligible`,
			"<strong>1:</strong> <span>The node lacks trait CUSTOM_X, which the runbook requires.</span> <small>(f-02)</small>",
			"<strong>1:</strong> <span>Runbooks run on manageable or active nodes; this node is enroll.</span> <small>(f-04)</small>",
			// Whoever confirms is told whose machines these are.
			`data-confirm="Run CUSTOM_X on 2 nodes: f-00, f-06? Leased to green (2)."`,
			`data-testid="bulk-lessees">Leased to green (2).</p>`,
			">Run CUSTOM_X on 2 nodes</button>",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("eligibility lacks %s", want)
			}
		}
		if namesF01.MatchString(page) || strings.Contains(page, ids["f-01"]) || strings.Contains(page, "not-a-uuid") {
			t.Errorf("the preview names a node the member may not see")
		}

		// Run: the runbook is rolled out as a campaign, which keeps every
		// selected node's outcome: two run, two are skipped with their
		// reason, and the hidden node is not part of it.
		sel.Set("max_concurrency", "2")
		st, _, h := pat.do("POST", "/nodes/bulk/run", sel)
		camp := h.Get("Location")
		if st != 303 || !strings.HasPrefix(camp, "/campaigns/") {
			t.Fatalf("bulk run: %d to %q", st, camp)
		}
		st, page, _ = pat.do("GET", camp, nil)
		if st != 200 || strings.Count(page, `data-status="skipped"`) != 2 ||
			!strings.Contains(page, "runbooks run on manageable or active nodes; this node is enroll") || namesF01.MatchString(page) ||
			!strings.Contains(page, `hx-get="`+camp+`/live?status="`) {
			t.Fatalf("campaign page: %d\n%s", st, page)
		}
		// The page follows the runs until both are done, and says so.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, frag, _ := pat.do("GET", camp+"/live", nil, "HX-Request", "true")
			if namesF01.MatchString(frag) || strings.Contains(frag, ids["f-01"]) {
				t.Fatalf("progress shows a hidden node:\n%s", frag)
			}
			if !strings.Contains(frag, "hx-trigger") {
				if strings.Count(frag, `data-status="succeeded"`) != 2 || strings.Count(frag, `data-status="skipped"`) != 2 ||
					!strings.Contains(frag, "completed</span>") {
					t.Errorf("results lost on the way:\n%s", frag)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs never finished:\n%s", frag)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// Someone else cannot see the campaign.
		if st, page, _ := signInAs(t, srv, "gil").do("GET", camp, nil); st != 404 || strings.Contains(page, "f-00") {
			t.Errorf("another project's view of the campaign: %d", st)
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
		if st, page, _ := pat.do("POST", "/nodes/bulk", url.Values{"csrf": {pat.csrf}, "action": {"power"}, "all": {"1"}, "filter": {"owner=red"}}); st != 403 || namesF01.MatchString(page) {
			t.Errorf("all matching owner=red: %d", st)
		}
		// A forged run with only another project's node does nothing.
		_, _, h = pat.do("POST", "/nodes/bulk/run", url.Values{"csrf": {pat.csrf}, "action": {"power"}, "power": {"power off"}, "node": {ids["f-01"], ids["f-03"]}})
		st, page, _ = pat.do("GET", h.Get("Location"), nil)
		if st != 200 || strings.Contains(page, "data-result") || namesF01.MatchString(page) {
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
		if !strings.Contains(page, "0 of 1 selected nodes are eligible") || !strings.Contains(page, ruleHTML("baremetal:node:set_maintenance")) {
			t.Errorf("member maintenance:\n%s", page)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-07"])).SetMaintenance(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		root := signInAs(t, srv, "root")
		m := url.Values{"csrf": {root.csrf}, "action": {"maintenance"}, "maintenance": {"on"}, "reason": {"rack 4 power work"}, "node": {ids["f-05"], ids["f-07"], ids["f-09"]}}
		_, page, _ = root.do("POST", "/nodes/bulk", m)
		if !strings.Contains(page, "2 of 3 selected nodes are eligible") || !strings.Contains(page, "<span>The node is already in maintenance.</span> <small>(f-07)</small>") {
			t.Errorf("root maintenance preview:\n%s", page)
		}
		_, _, h = root.do("POST", "/nodes/bulk/run", m)
		_, page, _ = root.do("GET", h.Get("Location"), nil)
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

// TestBulkResultsSayWhatHappened: a power action the BMC fails is shown
// as failed with the reason once the node is done, not as started, next
// to one that succeeded; the outcome is kept, so a reload still shows it.
func TestBulkResultsSayWhatHappened(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		// A BMC address nothing listens on: the power action fails.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		l.Close()
		srv, api, ids := fleetWith(t, server.Options{Database: setting, Conductor: conductor.Config{BMC: bmc.Options{Timeout: time.Second, Retries: 1}}})
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "dead", "driver": "redfish", "owner": "blue",
			"driver_info": map[string]any{"redfish_address": "http://" + dead, "redfish_system_id": "/redfish/v1/Systems/1",
				"redfish_username": "u", "redfish_password": "p"}})
		if r.Status != 201 {
			t.Fatalf("enrol: %d %s", r.Status, r.Body)
		}
		deadID := r.JSON(t)["uuid"].(string)
		pat := signInAs(t, srv, "pat")
		st, _, h := pat.do("POST", "/nodes/bulk/run", url.Values{"csrf": {pat.csrf}, "action": {"power"}, "power": {"power on"}, "node": {deadID, ids["f-00"]}})
		results := h.Get("Location")
		if st != 303 || results == "" {
			t.Fatalf("bulk run: %d", st)
		}
		failed := regexp.MustCompile(`<tr data-node="` + deadID + `" data-result="bad">.*?data-testid="bulk-result">Failed: Power on failed: [^<]+<`)
		done := regexp.MustCompile(`<tr data-node="` + ids["f-00"] + `" data-result="ok">.*?data-testid="bulk-result">Done<`)
		var page string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, page, _ = pat.do("GET", results, nil)
			if !strings.Contains(page, "hx-trigger") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the power actions never finished:\n%s", page)
			}
		}
		if !failed.MatchString(page) || !done.MatchString(page) || strings.Contains(page, "Started") {
			t.Errorf("outcomes once done:\n%s", page)
		}
		// The failed row says its error once, in its result.
		if row := regexp.MustCompile(`(?s)<tr data-node="` + deadID + `".*?</tr>`).FindString(page); strings.Count(row, "Power on failed") != 1 {
			t.Errorf("the failed row says its error %d times:\n%s", strings.Count(row, "Power on failed"), row)
		}
		// The node's record agrees: its last error says the power on failed.
		n, err := srv.DB.Node.Query().Where(node.UUID(deadID)).Only(context.Background())
		if err != nil || n.LastError == nil || !strings.HasPrefix(*n.LastError, "Power on failed") {
			t.Fatalf("the dead node: %v %v", n, err)
		}
		// The outcome is kept: clearing the error does not turn it into Done.
		if err := srv.DB.Node.Update().Where(node.UUID(deadID)).ClearLastError().Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, page, _ := pat.do("GET", results, nil); !failed.MatchString(page) {
			t.Errorf("reloaded results lost the failure:\n%s", page)
		}
	})
}
