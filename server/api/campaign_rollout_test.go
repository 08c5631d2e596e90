package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// fakeClock makes the campaign service of srv read the time from the
// returned setter's last value, so a test moves time instead of waiting.
func fakeClock(srv *servertest.Server, at time.Time) func(time.Time) {
	var cur atomic.Pointer[time.Time]
	cur.Store(&at)
	srv.Campaigns.SetClock(func() time.Time { return *cur.Load() })
	return func(t time.Time) { cur.Store(&t) }
}

// auditCount counts the audit rows of rule on campaign id.
func auditCount(t *testing.T, db *store.DB, rule, id string) int {
	t.Helper()
	n, err := db.AuditEvent.Query().Where(auditevent.Rule(rule), auditevent.TargetID(id)).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A window holds a campaign: outside it the campaign is running but no
// node starts; inside it (an overnight window, in its time zone, on the
// morning after the day it opens) the nodes run. Bad windows and batch
// pauses are 400s naming the field.
func TestCampaignWindow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		// Monday noon in Berlin: outside mon 22:00–06:00.
		setClock := fakeClock(srv, time.Date(2026, 11, 23, 12, 0, 0, 0, berlin))
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_NIGHT", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "night", "CUSTOM_CAMP_NIGHT", 2)
		window := map[string]any{"days": []string{"mon"}, "from": "22:00", "to": "06:00", "timezone": "Europe/Berlin"}
		body := func(kv ...any) map[string]any {
			m := map[string]any{"name": "night", "runbook": "CUSTOM_CAMP_NIGHT", "nodes": names, "max_concurrency": 2, "window": window}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			return m
		}
		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{body("window", map[string]any{"days": []string{"someday"}, "from": "22:00", "to": "06:00"}), "window.days"},
			{body("window", map[string]any{"days": []string{"mon", "mon"}, "from": "22:00", "to": "06:00"}), "window.days"},
			{body("window", map[string]any{"from": "25:00", "to": "06:00"}), "window.from"},
			{body("window", map[string]any{"from": "22:00", "to": "6"}), "window.to"},
			{body("window", map[string]any{"from": "22:00", "to": "22:00"}), "window.to"},
			{body("window", map[string]any{"from": "22:00", "to": "06:00", "timezone": "Mars/Olympus"}), "window.timezone"},
			{body("window", "nightly"), "window"},
			{body("batch_pause", -1), "batch_pause"},
			{body("batch_pause", 86401), "batch_pause"},
		} {
			r := admin.Do(t, "POST", "/v1/campaigns", tc.body)
			if r.Status != 400 || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("%v: %d %s, want a 400 naming %s", tc.body, r.Status, r.Body, tc.field)
			}
		}
		r := admin.Do(t, "POST", "/v1/campaigns", body())
		mustStatus(t, r, 201)
		m := r.JSON(t)
		id := m["uuid"].(string)
		w, _ := m["window"].(map[string]any)
		if m["state"] != "running" || w["from"] != "22:00" || w["timezone"] != "Europe/Berlin" || fmt.Sprint(w["days"]) != "[mon]" {
			t.Fatalf("created: %s", r.Body)
		}
		time.Sleep(1500 * time.Millisecond) // more than a campaign pass
		if m = admin.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); m["state"] != "running" || count(m, "pending") != 2 {
			t.Fatalf("outside the window: %v", m)
		}
		// Tuesday 03:00 in Berlin: inside Monday's overnight window.
		setClock(time.Date(2026, 11, 24, 3, 0, 0, 0, berlin))
		m = waitCampaign(t, admin, id, stateIs("completed"))
		if count(m, "succeeded") != 2 {
			t.Fatalf("inside the window: %v", m["counts"])
		}
	})
}

// With batch_pause the nodes run in batches of max_concurrency, the next
// starting only once the last one's nodes all finished and the pause
// passed (on the service's clock); each node records its batch; the
// campaign's start, each batch and its end are in the audit log.
func TestCampaignBatchPause(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
		setClock := fakeClock(srv, t0)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_BATCH", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "batch", "CUSTOM_CAMP_BATCH", 5)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "batches", "runbook": "CUSTOM_CAMP_BATCH", "nodes": names,
			"max_concurrency": 2, "batch_pause": 600})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		for batch, done := range []int{2, 4} {
			waitCampaign(t, admin, id, func(m map[string]any) bool { return count(m, "succeeded") == done })
			time.Sleep(1500 * time.Millisecond) // more than a campaign pass: the pause holds
			if m := admin.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); count(m, "succeeded") != done || count(m, "running") != 0 ||
				m["batch"] != float64(batch+1) {
				t.Fatalf("after batch %d: batch %v, %v", batch+1, m["batch"], m["counts"])
			}
			setClock(t0.Add(time.Duration(batch+1) * 601 * time.Second))
		}
		m := waitCampaign(t, admin, id, stateIs("completed"))
		if count(m, "succeeded") != 5 || m["batch"] != 3.0 {
			t.Fatalf("finished: %v", m)
		}
		ns := admin.Do(t, "GET", "/v1/campaigns/"+id+"/nodes", nil).JSON(t)["nodes"].([]any)
		for i, want := range []float64{1, 1, 2, 2, 3} {
			if b := ns[i].(map[string]any)["batch"]; b != want {
				t.Errorf("node %d in batch %v, want %v", i, b, want)
			}
		}
		for rule, want := range map[string]int{"anvil:campaign:start": 1, "anvil:campaign:batch": 3, "anvil:campaign:finish": 1} {
			if n := auditCount(t, db, rule, id); n != want {
				t.Errorf("%d audit rows for %s, want %d", n, rule, want)
			}
		}
		ev, err := db.AuditEvent.Query().Where(auditevent.Rule("anvil:campaign:finish"), auditevent.TargetID(id)).Only(context.Background())
		if err != nil || ev.Detail["state"] != "completed" || ev.Detail["succeeded"] != 5.0 {
			t.Errorf("finish event %+v (%v)", ev, err)
		}
	})
}

// Retry makes a new campaign, as the caller, over a campaign's failed
// nodes with its runbook and settings; a node its failure left in
// maintenance is refused until it is recovered; a campaign without failures is a 409.
func TestCampaignRetryFailed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_RETRY", "public": true,
			"steps": []any{map[string]any{"interface": "firmware", "step": "update", "order": 1,
				"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "https://images.example/fail-bios.bin"}}}}}}), 201)
		names := campaignNodes(t, admin, "retry", "CUSTOM_CAMP_RETRY", 3)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "first", "runbook": "CUSTOM_CAMP_RETRY", "nodes": names[:2],
			"max_concurrency": 2, "max_failures": 5, "batch_pause": 1, "requires_approval": true})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "POST", "/v1/campaigns/"+id+"/retry", nil), 409) // nothing failed yet
		// Another person approves (baremetal:campaign:approve:own).
		mustStatus(t, clients["system-member"].Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 202)
		m := waitCampaign(t, admin, id, stateIs("completed"))
		if count(m, "failed") != 2 {
			t.Fatalf("first: %v", m["counts"])
		}
		mustStatus(t, clients["other-admin"].Do(t, "POST", "/v1/campaigns/"+id+"/retry", nil), 404)
		mustStatus(t, clients["system-reader"].Do(t, "POST", "/v1/campaigns/"+id+"/retry", nil), 403)
		// The failed runs left the nodes in maintenance: refused, naming
		// them, until they are recovered.
		if f := admin.Do(t, "POST", "/v1/campaigns/"+id+"/retry", nil); f.Status != 400 || !strings.Contains(f.Fault(t), "maintenance") {
			t.Fatalf("unrecovered: %d %s", f.Status, f.Body)
		}
		for _, n := range names[:2] {
			provision(t, admin, n, map[string]any{"target": "manage"}, 202)
			waitState(t, admin, n, "manageable")
			mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+n+"/maintenance", nil), 202)
		}
		r = admin.Do(t, "POST", "/v1/campaigns/"+id+"/retry", nil)
		mustStatus(t, r, 201)
		m = r.JSON(t)
		if m["retry_of"] != id || m["name"] != "first (retry)" || m["runbook_name"] != "CUSTOM_CAMP_RETRY" || m["max_concurrency"] != 2.0 ||
			m["max_failures"] != 5.0 || m["batch_pause"] != 1.0 || m["state"] != "pending_approval" || count(m, "pending") != 2 {
			t.Fatalf("retry: %s", r.Body)
		}
		if n, err := db.CampaignNode.Query().Count(context.Background()); err != nil || n != 4 {
			t.Errorf("%d campaign node rows, want 2 + 2 (%v)", n, err)
		}
		if n := auditCount(t, db, "baremetal:campaign:create", m["uuid"].(string)); n != 1 {
			t.Errorf("%d audit rows for the retry", n)
		}
	})
}

// When the owner's policy asks for it, a lessee's campaign over the
// owner's nodes waits in pending_approval for the owner's manager: the
// lessee's manager may not approve in its place, the owner's member may
// not either; the owner's readers see the campaign; a system campaign
// needs no such approval.
func TestCampaignOwnerApproval(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "10-campaigns.yaml"), []byte(`"baremetal:campaign:owner_approval": "'own':%(node.owner)s"`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, clients := startLocal(t, setting, server.Options{PolicyDir: dir, PolicyOverrideEnabled: true})
		admin, lesMember, lesManager := clients["system-admin"], clients["lessee-member"], clients["lessee-manager"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_OWNER", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "ownap", "CUSTOM_CAMP_OWNER", 2)
		r := lesMember.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "leased", "runbook": "CUSTOM_CAMP_OWNER", "nodes": names, "max_concurrency": 2})
		mustStatus(t, r, 201)
		m := r.JSON(t)
		id := m["uuid"].(string)
		ap, _ := m["owner_approvals"].([]any)
		if m["state"] != "pending_approval" || m["requires_approval"] != false || len(ap) != 1 || ap[0].(map[string]any)["project"] != "own" {
			t.Fatalf("created: %s", r.Body)
		}
		if f := lesManager.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil); f.Status != 409 || !strings.Contains(f.Fault(t), "own") {
			t.Fatalf("lessee manager: %d %s", f.Status, f.Body)
		}
		mustStatus(t, clients["owner-member"].Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 403)
		mustStatus(t, clients["other-manager"].Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 404)
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/campaigns/"+id+"/nodes", nil), 200)
		if l := clients["owner-reader"].Do(t, "GET", "/v1/campaigns", nil).JSON(t)["campaigns"].([]any); len(l) != 1 {
			t.Errorf("the owner lists %d campaigns", len(l))
		}
		mustStatus(t, clients["owner-manager"].Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 202)
		m = waitCampaign(t, lesMember, id, stateIs("completed"))
		ap = m["owner_approvals"].([]any)
		if count(m, "succeeded") != 2 || ap[0].(map[string]any)["approved_by"] != "owner-manager" || m["approved_by"] != nil {
			t.Fatalf("approved: %v", m)
		}
		ev, err := db.AuditEvent.Query().Where(auditevent.Rule("baremetal:campaign:approve"), auditevent.TargetID(id), auditevent.Result("allowed")).Only(context.Background())
		if err != nil || fmt.Sprint(ev.Detail["owners"]) != "[own]" {
			t.Errorf("approval audit %+v (%v)", ev, err)
		}
		// The system's campaign over the same nodes starts at once.
		r = admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "system", "runbook": "CUSTOM_CAMP_OWNER", "nodes": names})
		mustStatus(t, r, 201)
		if m := r.JSON(t); m["state"] != "running" || len(m["owner_approvals"].([]any)) != 0 {
			t.Errorf("system campaign: %s", r.Body)
		}
	})
}
