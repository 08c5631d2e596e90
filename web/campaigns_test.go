package web_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// campaignRunbook adds a public runbook CUSTOM_X (power on, a second's
// wait) and makes the given nodes manageable, so it may run on them.
func campaignRunbook(t *testing.T, srv *servertest.Server, api *servertest.Client, ids map[string]string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := srv.DB.Node.Update().Where(node.UUID(ids[n])).SetProvisionState("manageable").Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_X", "public": true,
		"steps": []map[string]any{{"interface": "power", "step": "power_on", "order": 1}, {"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 1}, "order": 2}}})
	if r.Status != 201 {
		t.Fatalf("runbook: %d %s", r.Status, r.Body)
	}
}

// rollOut posts the node list's runbook action as b with the rollout's
// settings and returns the campaign's page address, or the status and
// page of a refusal.
func rollOut(t *testing.T, b *browser, form url.Values) (string, int, string) {
	t.Helper()
	form.Set("csrf", b.csrf)
	form.Set("action", "runbook")
	st, page, h := b.do("POST", "/nodes/bulk/run", form)
	if st == 303 && strings.HasPrefix(h.Get("Location"), "/campaigns/") {
		return h.Get("Location"), st, page
	}
	return "", st, page
}

// campaignState reads a campaign's state and counts through the API.
func campaignState(t *testing.T, api *servertest.Client, camp string) (string, map[string]any) {
	t.Helper()
	r := api.Do(t, "GET", "/v1"+camp, nil)
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", camp, r.Status, r.Body)
	}
	m := r.JSON(t)
	return m["state"].(string), m["counts"].(map[string]any)
}

// TestCampaignPortalApproval: a project member rolls a runbook out from
// the node list with the approval box ticked; the campaign waits, the
// member's page offers no Approve button and a forged approval is
// refused; a system admin sees it in the list, approves it, and it runs
// to completion. Its state reads in words, and the node it skipped (f-02,
// not manageable) is counted apart, never as progress. Only those the
// delete rule names get the Delete button.
func TestCampaignPortalApproval(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		campaignRunbook(t, srv, api, ids, "f-00", "f-06")
		pat, root := signInAs(t, srv, "pat"), signInAs(t, srv, "root")

		camp, st, page := rollOut(t, pat, url.Values{"runbook": {"CUSTOM_X"}, "node": {ids["f-00"], ids["f-02"], ids["f-06"]}, "name": {"firmware wave 1"},
			"max_concurrency": {"1"}, "max_failures": {"50%"}, "requires_approval": {"1"}})
		if camp == "" {
			t.Fatalf("roll out: %d\n%s", st, page)
		}
		if s, counts := campaignState(t, api, camp); s != "pending_approval" || counts["pending"] != float64(2) || counts["skipped"] != float64(1) {
			t.Fatalf("after creation: %s %v", s, counts)
		}
		_, page, _ = pat.do("GET", camp, nil)
		for _, want := range []string{"<h1>firmware wave 1</h1>", `data-testid="awaiting-approval"`, ">Cancel</button>",
			"1 at a time; stops starting nodes after more than 50% (1) failures", `hx-trigger="every 2s"`,
			`</span> waiting for approval</span>`, `<span data-testid="campaign-done">0 of 2 finished, 1 skipped</span>`,
			`<progress max="2" value="0"`, `data-testid="count-skipped"><strong>1</strong> skipped</li>`} {
			if !strings.Contains(page, want) {
				t.Errorf("member's page lacks %s", want)
			}
		}
		if strings.Contains(page, "pending_approval") {
			t.Errorf("member's page names the raw state:\n%s", page)
		}
		if strings.Contains(page, ">Approve</button>") || strings.Contains(page, ">Delete record</button>") {
			t.Errorf("a member is offered approve or delete:\n%s", page)
		}
		if st, _, _ := pat.do("POST", camp+"/approve", url.Values{"csrf": {pat.csrf}}); st != 403 {
			t.Errorf("member approves: %d", st)
		}
		if s, _ := campaignState(t, api, camp); s != "pending_approval" {
			t.Errorf("after the member's refused approval: %s", s)
		}

		// The system admin finds it in the list and approves it.
		_, page, _ = root.do("GET", "/campaigns", nil)
		if !strings.Contains(page, `<a href="`+camp+`">firmware wave 1</a>`) || !strings.Contains(page, `href="/campaigns" aria-current="page"`) {
			t.Errorf("campaign list:\n%s", page)
		}
		_, page, _ = root.do("GET", camp, nil)
		if !strings.Contains(page, ">Approve</button>") {
			t.Fatalf("root is not offered Approve:\n%s", page)
		}
		st, _, h := root.do("POST", camp+"/approve", url.Values{"csrf": {root.csrf}})
		if st != 303 || h.Get("Location") != camp {
			t.Fatalf("approve: %d %q", st, h.Get("Location"))
		}
		if _, page, _ = root.do("GET", camp, nil); !strings.Contains(page, "Approved.") || !strings.Contains(page, "<dd>root</dd>") {
			t.Errorf("after approval:\n%s", page)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			s, counts := campaignState(t, api, camp)
			if s == "completed" {
				if counts["succeeded"] != float64(2) {
					t.Errorf("completed with %v", counts)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("never completed: %s %v", s, counts)
			}
			time.Sleep(300 * time.Millisecond)
		}
		// Finished, the page stops polling; the member may not delete the
		// record, the admin may.
		_, page, _ = pat.do("GET", camp, nil)
		if strings.Contains(page, "hx-trigger") || strings.Contains(page, ">Delete record</button>") || strings.Count(page, `data-status="succeeded"`) != 2 {
			t.Errorf("member's page once finished:\n%s", page)
		}
		for _, want := range []string{`</span> completed</span>`, `<span data-testid="campaign-done">2 of 2 finished, 1 skipped</span>`,
			`<progress max="2" value="2"`, `data-testid="count-succeeded"><strong>2</strong> succeeded</li>`,
			`data-testid="count-skipped"><strong>1</strong> skipped</li>`, `data-testid="count-failed"><strong>0</strong> failed</li>`} {
			if !strings.Contains(page, want) {
				t.Errorf("member's page once finished lacks %s", want)
			}
		}
		// The list counts them apart too.
		_, page, _ = pat.do("GET", "/campaigns", nil)
		for _, want := range []string{`<td data-label="Succeeded" class="num">2</td>`, `<td data-label="Failed" class="num">0</td>`,
			`<td data-label="Skipped" class="num">1</td>`, "2 of 2 finished, 1 skipped"} {
			if !strings.Contains(page, want) {
				t.Errorf("campaign list once finished lacks %s", want)
			}
		}
		if _, page, _ = root.do("GET", camp, nil); !strings.Contains(page, ">Delete record</button>") {
			t.Errorf("admin is not offered delete")
		}
		if st, _, h := root.do("POST", camp+"/delete", url.Values{"csrf": {root.csrf}}); st != 303 || h.Get("Location") != "/campaigns" {
			t.Errorf("delete: %d %q", st, h.Get("Location"))
		}
		if r := api.Do(t, "GET", "/v1"+camp, nil); r.Status != 404 {
			t.Errorf("deleted campaign: %d", r.Status)
		}
	})
}

// TestCampaignPortalSteering: a scheduled campaign over every node the
// admin sees is paused, resumed and cancelled from its page; the status
// filter and paging show the right nodes; bad settings show the form
// again naming the field, and create nothing; another project's member
// gets a 404 for the page and its buttons.
func TestCampaignPortalSteering(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		campaignRunbook(t, srv, api, ids, "f-00", "f-03", "f-06", "f-09")
		// Enough enrolled nodes (none eligible) for a second page of skipped ones.
		for i := range 50 {
			if r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("e-%02d", i), "driver": "fake"}); r.Status != 201 {
				t.Fatalf("enrol: %d %s", r.Status, r.Body)
			}
		}
		if err := srv.IDs.CreateUser(context.Background(), "rex", "rex-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(context.Background(), "rex", identity.Assignment{Scope: identity.Scope{Project: "red"}, Role: "manager"}); err != nil {
			t.Fatal(err)
		}
		// One eligible node goes into maintenance: the preview and the
		// campaign both leave it out.
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-09"])).SetMaintenance(true).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		root := signInAs(t, srv, "root")
		later := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
		all := url.Values{"runbook": {"CUSTOM_X"}, "all": {"1"}, "filter": {""}, "max_concurrency": {"2"}, "start_after": {later},
			"batch_pause": {"30"}, "window_days": {"mon", "fri"}, "window_from": {"22:00"}, "window_to": {"06:00"}, "window_timezone": {"Europe/Berlin"}}

		// Bad settings: the form again, naming the field; nothing created.
		for _, c := range []struct{ field, v, named string }{{"max_concurrency", "many", "max_concurrency"}, {"start_after", "tomorrow", "start_after"},
			{"max_failures", "lots", "max_failures"}, {"batch_pause", "soon", "batch_pause"}, {"window_from", "25:00", "window.from"},
			{"window_timezone", "Mars/Olympus", "window.timezone"}, {"window_days", "someday", "window.days"}} {
			bad := url.Values{}
			for k, vs := range all {
				bad[k] = vs
			}
			bad.Set(c.field, c.v)
			if camp, st, page := rollOut(t, root, bad); camp != "" || st != 400 || !strings.Contains(page, c.named) || !strings.Contains(page, `data-testid="bulk-run"`) {
				t.Errorf("%s=%s: %d %q", c.field, c.v, st, camp)
			}
		}
		if r := api.Do(t, "GET", "/v1/campaigns", nil); len(r.JSON(t)["campaigns"].([]any)) != 0 {
			t.Errorf("a refused rollout created a campaign: %s", r.Body)
		}

		preview := url.Values{"csrf": {root.csrf}, "action": {"runbook"}}
		for k, vs := range all {
			preview[k] = vs
		}
		if _, page, _ := root.do("POST", "/nodes/bulk", preview); !strings.Contains(page, "3 of 62 selected nodes are eligible") ||
			!strings.Contains(page, "<span>The node is in maintenance.</span> <small>(f-09)</small>") {
			t.Errorf("preview:\n%s", page)
		}
		camp, st, page := rollOut(t, root, all)
		if camp == "" {
			t.Fatalf("roll out: %d\n%s", st, page)
		}
		if m := api.Do(t, "GET", "/v1"+camp, nil).JSON(t); m["batch_pause"] != 30.0 ||
			fmt.Sprint(m["window"]) != "map[days:[mon fri] from:22:00 timezone:Europe/Berlin to:06:00]" {
			t.Errorf("the campaign's batch pause and window: %v %v", m["batch_pause"], m["window"])
		}
		if _, page, _ := root.do("GET", camp, nil); !strings.Contains(page, "starts nodes only mon,fri 22:00–06:00 Europe/Berlin") ||
			!strings.Contains(page, "2 nodes each, 30 s apart") {
			t.Errorf("the campaign page does not show its window and batches:\n%s", page)
		}
		if s, counts := campaignState(t, api, camp); s != "scheduled" || counts["pending"] != float64(3) || counts["skipped"] != float64(59) {
			t.Fatalf("scheduled campaign: %s %v", s, counts)
		}
		_, page, _ = root.do("GET", camp+"?status=skipped", nil)
		if strings.Count(page, `data-status="skipped"`) != 50 || !strings.Contains(page, "Page 1 of 2") || !strings.Contains(page, `<option value="skipped" selected>skipped (59)</option>`) {
			t.Errorf("skipped, first page:\n%s", page)
		}
		_, page, _ = root.do("GET", camp+"/live?status=skipped&page=2", nil, "HX-Request", "true")
		if strings.Count(page, `data-status="skipped"`) != 9 || strings.Contains(page, `data-status="pending"`) || !strings.Contains(page, "Page 2 of 2") {
			t.Errorf("skipped, second page:\n%s", page)
		}
		_, page, _ = root.do("GET", camp+"?status=pending", nil)
		// The 59 skipped nodes are no progress: none of the 3 to run has.
		if strings.Count(page, `data-status="pending"`) != 3 || !strings.Contains(page, ">f-03</a>") || !strings.Contains(page, ">Pause</button>") ||
			!strings.Contains(page, `<span data-testid="campaign-done">0 of 3 finished, 59 skipped</span>`) {
			t.Errorf("pending:\n%s", page)
		}

		// Another project's manager: the campaign is not found.
		rex := signInAs(t, srv, "rex")
		for _, try := range []struct{ method, path string }{{"GET", camp}, {"GET", camp + "/live"}, {"POST", camp + "/state"}, {"POST", camp + "/delete"}} {
			if st, page, _ := rex.do(try.method, try.path, url.Values{"csrf": {rex.csrf}, "target": {"cancelled"}}); st != 404 || strings.Contains(page, "f-03") {
				t.Errorf("rex %s %s: %d", try.method, try.path, st)
			}
		}
		if _, page, _ := rex.do("GET", "/campaigns", nil); strings.Contains(page, camp) {
			t.Errorf("rex's list shows the system's campaign")
		}

		// Pause, resume (scheduled again: its start is ahead), cancel.
		for _, step := range []struct{ target, want, button string }{
			{"paused", "paused", ">Resume</button>"}, {"running", "scheduled", ">Pause</button>"}, {"cancelled", "cancelled", ">Delete record</button>"},
		} {
			if st, _, h := root.do("POST", camp+"/state", url.Values{"csrf": {root.csrf}, "target": {step.target}}); st != 303 || h.Get("Location") != camp {
				t.Fatalf("%s: %d", step.target, st)
			}
			if s, _ := campaignState(t, api, camp); s != step.want {
				t.Errorf("after %s: %s", step.target, s)
			}
			if _, page, _ := root.do("GET", camp, nil); !strings.Contains(page, step.button) || !strings.Contains(page, "</span> "+step.want+"</span>") {
				t.Errorf("after %s the page lacks %s or the state %s", step.target, step.button, step.want)
			}
		}
		if _, counts := campaignState(t, api, camp); counts["skipped"] != float64(62) {
			t.Errorf("cancelled: %v", counts)
		}
		// Steering a finished campaign is refused, said on its page.
		st, _, h := root.do("POST", camp+"/state", url.Values{"csrf": {root.csrf}, "target": {"paused"}})
		if _, page, _ := root.do("GET", h.Get("Location"), nil); st != 303 || !strings.Contains(page, "is cancelled; it cannot become paused") {
			t.Errorf("pause a cancelled campaign: %d\n%s", st, page)
		}
	})
}

// TestCampaignPortalRetry: once a campaign has failed (its failure budget
// of 0 spent, said in words; both nodes started together, so both count
// as failed and none as skipped),
// whoever may create campaigns gets "Retry failed nodes" (a system reader
// does not); pressed while the failures still hold the nodes in
// maintenance it is refused on the campaign's page, naming them; once
// they are recovered it creates a new campaign over exactly the failed
// nodes and opens it.
func TestCampaignPortalRetry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		readerAndProjectAdmin(t, srv)
		campaignRunbook(t, srv, api, ids, "f-00", "f-06")
		if r := api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_FAILS", "public": true,
			"steps": []map[string]any{{"interface": "firmware", "step": "update", "order": 1,
				"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "https://images.example/fail-bios.bin"}}}}}}); r.Status != 201 {
			t.Fatalf("runbook: %d %s", r.Status, r.Body)
		}
		for _, n := range []string{"f-00", "f-06"} {
			if r := api.Do(t, "PUT", "/v1/nodes/"+ids[n]+"/traits/CUSTOM_FAILS", nil); r.Status != 204 {
				t.Fatalf("trait: %d %s", r.Status, r.Body)
			}
		}
		root, rhea := signInAs(t, srv, "root"), signInAs(t, srv, "rhea")
		camp, st, page := rollOut(t, root, url.Values{"runbook": {"CUSTOM_FAILS"}, "node": {ids["f-00"], ids["f-06"]}, "name": {"bios wave"},
			"max_concurrency": {"2"}, "max_failures": {"0"}})
		if camp == "" {
			t.Fatalf("roll out: %d\n%s", st, page)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if s, counts := campaignState(t, api, camp); s == "failed" && counts["failed"] == float64(2) {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the campaign never failed with two failures: %s %v", s, counts)
			}
		}
		retry := `action="` + camp + `/retry"`
		if _, page, _ := rhea.do("GET", camp, nil); strings.Contains(page, retry) {
			t.Errorf("a system reader is offered Retry")
		}
		_, page, _ = root.do("GET", camp, nil)
		if !strings.Contains(page, retry) || !strings.Contains(page, ">Retry failed nodes</button>") {
			t.Fatalf("no Retry for the admin:\n%s", page)
		}
		for _, want := range []string{"</span> failed: failure budget exceeded</span>", `<span data-testid="campaign-done">2 of 2 finished</span>`,
			`data-testid="count-failed"><strong>2</strong> failed</li>`, `data-testid="count-succeeded"><strong>0</strong> succeeded</li>`} {
			if !strings.Contains(page, want) {
				t.Errorf("the failed campaign's page lacks %s", want)
			}
		}
		st, _, h := root.do("POST", camp+"/retry", url.Values{"csrf": {root.csrf}})
		if st != 303 || h.Get("Location") != camp {
			t.Fatalf("retry of nodes still in maintenance: %d %s", st, h.Get("Location"))
		}
		if _, page, _ = root.do("GET", camp, nil); !strings.Contains(page, "maintenance") {
			t.Errorf("the refusal does not say the nodes are in maintenance:\n%s", page)
		}
		for _, n := range []string{"f-00", "f-06"} {
			if err := srv.DB.Node.Update().Where(node.UUID(ids[n])).SetProvisionState("manageable").SetMaintenance(false).
				ClearMaintenanceReason().ClearFault().ClearLastError().Exec(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		st, _, h = root.do("POST", camp+"/retry", url.Values{"csrf": {root.csrf}})
		again := h.Get("Location")
		if st != 303 || !strings.HasPrefix(again, "/campaigns/") || again == camp {
			t.Fatalf("retry: %d %s", st, again)
		}
		m := api.Do(t, "GET", "/v1"+again, nil).JSON(t)
		counts, _ := m["counts"].(map[string]any)
		total := 0.0
		for _, n := range counts {
			total += n.(float64)
		}
		if m["retry_of"] != strings.TrimPrefix(camp, "/campaigns/") || m["name"] != "bios wave (retry)" || total != 2 {
			t.Errorf("the new campaign: %v", m)
		}
	})
}
