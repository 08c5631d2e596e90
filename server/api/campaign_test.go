package api_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/campaign"
	"github.com/anvilproject/anvil/ent/campaignnode"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// campaignNodes enrolls n manageable fake-hardware nodes of project own,
// leased to les, carrying trait, named prefix-1…n.
func campaignNodes(t *testing.T, admin *servertest.Client, prefix, trait string, n int) []string {
	t.Helper()
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/"+trait, nil), 204)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		names = append(names, name)
	}
	return names
}

// waitCampaign polls a campaign until done says so.
func waitCampaign(t *testing.T, c *servertest.Client, id string, done func(m map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := c.Do(t, "GET", "/v1/campaigns/"+id, nil)
		mustStatus(t, r, 200)
		m := r.JSON(t)
		if done(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("campaign %s did not get there: %s", id, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func count(m map[string]any, status string) int {
	return int(m["counts"].(map[string]any)[status].(float64))
}

// maxOverlap is the most campaign node rows whose [started, finished]
// intervals overlap: how many nodes ran at once.
func maxOverlap(t *testing.T, rows []*ent.CampaignNode) int {
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, x := range rows {
		if x.StartedAt == nil || x.FinishedAt == nil || x.Status != "succeeded" {
			t.Fatalf("row %+v", x)
		}
		edges = append(edges, edge{*x.StartedAt, 1}, edge{*x.FinishedAt, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

func stateIs(want string) func(m map[string]any) bool {
	return func(m map[string]any) bool { return m["state"] == want && m["finished_at"] != nil }
}

// The cap holds: at no moment are more than max_concurrency of the
// campaign's nodes in a run, sampled from the nodes' states while it
// runs and from the rows' start and finish times afterwards; every node
// runs once and succeeds.
func TestCampaignConcurrencyCap(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_WAIT", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 1}}}}), 201)
		names := campaignNodes(t, admin, "cap", "CUSTOM_CAMP_WAIT", 7)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "cap", "runbook": "CUSTOM_CAMP_WAIT", "nodes": names,
			"max_concurrency": 3, "max_failures": "10%"})
		mustStatus(t, r, 201)
		c := r.JSON(t)
		id := c["uuid"].(string)
		if c["state"] != "running" || count(c, "pending") != 7 || c["max_failures"] != 0.0 || c["max_failures_percent"] != 10.0 {
			t.Fatalf("created: %s", r.Body)
		}
		ctx := context.Background()
		peak := 0
		waitCampaign(t, admin, id, func(m map[string]any) bool {
			busy, err := db.Node.Query().Where(node.NameHasPrefix("cap-"), node.ProvisionStateIn("cleaning", "clean wait")).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if busy > 3 || count(m, "running") > 3 {
				t.Fatalf("%d nodes cleaning, %d running, cap 3", busy, count(m, "running"))
			}
			peak = max(peak, busy)
			return m["state"] == "completed"
		})
		if peak == 0 {
			t.Error("no node was ever seen cleaning")
		}
		m := admin.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t)
		if count(m, "succeeded") != 7 || m["finished_at"] == nil {
			t.Fatalf("finished: %v", m)
		}
		rows, err := db.CampaignNode.Query().All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		most := maxOverlap(t, rows)
		if most > 3 {
			t.Errorf("%d nodes ran at once, cap 3", most)
		}
		// Each node ran the runbook exactly once: one history line each.
		for _, name := range names {
			if n := strings.Count(eventsOf(t, admin, name), "Runbook CUSTOM_CAMP_WAIT, run by system-admin"); n != 1 {
				t.Errorf("%s ran the runbook %d times", name, n)
			}
			waitState(t, admin, name, "manageable")
		}
	})
}

// Once more nodes failed than max_failures, the campaign is failed,
// starts no other node and records the rest as skipped.
func TestCampaignFailureBudget(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_FAIL", "public": true,
			"steps": []any{map[string]any{"interface": "firmware", "step": "update", "order": 1,
				"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "https://images.example/fail-bios.bin"}}}}}}), 201)
		names := campaignNodes(t, admin, "bud", "CUSTOM_CAMP_FAIL", 5)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "budget", "runbook": "CUSTOM_CAMP_FAIL", "nodes": names,
			"max_concurrency": 1, "max_failures": 1})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		m := waitCampaign(t, admin, id, stateIs("failed"))
		if count(m, "failed") != 2 || count(m, "skipped") != 3 || count(m, "running") != 0 {
			t.Fatalf("after the budget: %v", m["counts"])
		}
		if n, err := db.AuditEvent.Query().Where(auditevent.Rule("anvil:campaign:failure_budget"), auditevent.TargetID(id)).Count(context.Background()); err != nil || n != 1 {
			t.Errorf("%d audit rows for the spent budget (%v)", n, err)
		}
		ns := admin.Do(t, "GET", "/v1/campaigns/"+id+"/nodes", nil).JSON(t)["nodes"].([]any)
		for i, x := range ns {
			row := x.(map[string]any)
			if i < 2 {
				if row["status"] != "failed" || row["reason"] == nil || row["started_at"] == nil {
					t.Errorf("node %d: %v", i, row)
				}
				continue
			}
			if row["status"] != "skipped" || !strings.Contains(fmt.Sprint(row["reason"]), "failure budget") || row["started_at"] != nil {
				t.Errorf("node %d: %v", i, row)
			}
			// Never started: still manageable, no runbook in its history.
			waitState(t, admin, names[i], "manageable")
			if strings.Contains(eventsOf(t, admin, names[i]), "CUSTOM_CAMP_FAIL") {
				t.Errorf("%s ran after the budget was spent", names[i])
			}
		}
	})
}

// Approval holds a campaign until someone the policy names approves it;
// pause stops new starts and lets the running node finish; cancel skips
// what is left; only a finished campaign is deleted.
func TestCampaignApprovePauseCancel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, reader, lesMember, lesManager := clients["system-admin"], clients["system-reader"], clients["lessee-member"], clients["lessee-manager"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_STEP", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 1}}}}), 201)
		names := campaignNodes(t, admin, "apc", "CUSTOM_CAMP_STEP", 6)
		// A lessee member rolls the public runbook over its leased nodes.
		r := lesMember.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "lessee", "runbook": "CUSTOM_CAMP_STEP", "nodes": names,
			"requires_approval": true})
		mustStatus(t, r, 201)
		c := r.JSON(t)
		id := c["uuid"].(string)
		if c["state"] != "pending_approval" || c["owner"] != "les" || c["created_by"] != "lessee-member" {
			t.Fatalf("created: %s", r.Body)
		}
		// Approval is a manager's: the member who created it may not, nor
		// a system reader.
		mustStatus(t, lesMember.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 403)
		mustStatus(t, reader.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 403)
		time.Sleep(1500 * time.Millisecond) // more than a campaign pass
		if m := lesMember.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); m["state"] != "pending_approval" || count(m, "pending") != 6 {
			t.Fatalf("before approval: %v", m)
		}
		mustStatus(t, lesManager.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 202)
		mustStatus(t, lesManager.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 409)
		m := waitCampaign(t, lesMember, id, func(m map[string]any) bool { return count(m, "running") == 1 })
		if m["approved_by"] != "lessee-manager" || m["state"] != "running" {
			t.Fatalf("approved: %v", m)
		}
		// Pause: the running node finishes, no other starts.
		if f := lesMember.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "stopped"}); f.Status != 400 || !strings.Contains(f.Fault(t), "target") {
			t.Fatalf("bad target: %d %s", f.Status, f.Body)
		}
		mustStatus(t, lesMember.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "paused"}), 202)
		m = waitCampaign(t, lesMember, id, func(m map[string]any) bool { return count(m, "running") == 0 })
		done := count(m, "succeeded")
		time.Sleep(1500 * time.Millisecond)
		if m = lesMember.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); m["state"] != "paused" || count(m, "succeeded") != done || count(m, "running") != 0 || done >= 6 {
			t.Fatalf("paused: %v", m)
		}
		mustStatus(t, lesMember.Do(t, "DELETE", "/v1/campaigns/"+id, nil), 403)  // a manager's
		mustStatus(t, lesManager.Do(t, "DELETE", "/v1/campaigns/"+id, nil), 409) // not finished
		// Resume, then cancel: the rest are skipped, the started finish.
		mustStatus(t, lesMember.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "running"}), 202)
		waitCampaign(t, lesMember, id, func(m map[string]any) bool { return count(m, "succeeded") > done })
		mustStatus(t, lesMember.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "cancelled"}), 202)
		mustStatus(t, lesMember.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "running"}), 409)
		m = waitCampaign(t, lesMember, id, stateIs("cancelled"))
		if count(m, "succeeded")+count(m, "skipped") != 6 || count(m, "skipped") == 0 || count(m, "succeeded") <= done {
			t.Fatalf("cancelled: %v", m["counts"])
		}
		// Scoping: another project sees no such campaign; the list of the
		// lessee holds it, the owner's does not.
		mustStatus(t, clients["other-admin"].Do(t, "GET", "/v1/campaigns/"+id, nil), 404)
		if l := clients["owner-admin"].Do(t, "GET", "/v1/campaigns", nil).JSON(t)["campaigns"].([]any); len(l) != 0 {
			t.Errorf("owner lists %d campaigns", len(l))
		}
		if l := lesMember.Do(t, "GET", "/v1/campaigns", nil).JSON(t)["campaigns"].([]any); len(l) != 1 {
			t.Errorf("lessee lists %d campaigns", len(l))
		}
		mustStatus(t, lesManager.Do(t, "DELETE", "/v1/campaigns/"+id, nil), 204)
		mustStatus(t, admin.Do(t, "GET", "/v1/campaigns/"+id, nil), 404)
		if n, err := db.CampaignNode.Query().Count(context.Background()); err != nil || n != 0 {
			t.Errorf("%d campaign node rows left after delete (%v)", n, err)
		}
	})
}

// A campaign paused while its last nodes run completes once they finish:
// nothing is left to resume, so it does not stay "paused". The conductor
// audits the end, saying it came from paused.
func TestCampaignPausedSettles(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_LAST", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 3}}}}), 201)
		names := campaignNodes(t, admin, "last", "CUSTOM_CAMP_LAST", 2)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "last", "runbook": "CUSTOM_CAMP_LAST", "nodes": names, "max_concurrency": 2})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		waitCampaign(t, admin, id, func(m map[string]any) bool { return count(m, "running") == 2 })
		mustStatus(t, admin.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "paused"}), 202)
		if m := admin.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); m["state"] != "paused" {
			t.Fatalf("after pause: %v", m)
		}
		m := waitCampaign(t, admin, id, stateIs("completed"))
		if count(m, "succeeded") != 2 || count(m, "pending") != 0 || count(m, "running") != 0 {
			t.Errorf("completed with %v", m["counts"])
		}
		ev, err := db.AuditEvent.Query().Where(auditevent.Rule("anvil:campaign:finish"), auditevent.TargetID(id)).Only(context.Background())
		if err != nil || ev.Detail["state"] != "completed" || ev.Detail["from"] != "paused" || ev.Detail["succeeded"] != 2.0 || ev.User != "conductor" {
			t.Errorf("finish event %+v (%v)", ev, err)
		}
		// Finished, it may no longer be resumed.
		mustStatus(t, admin.Do(t, "PUT", "/v1/campaigns/"+id+"/state", map[string]any{"target": "running"}), 409)
	})
}

// A node the caller cannot see makes the whole request a 404 naming it;
// bad fields are 400s naming them; ineligible nodes are a 400 listing
// them unless skip_ineligible. None of these records anything.
func TestCampaignBadRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, lesMember, other := clients["system-admin"], clients["lessee-member"], clients["other-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_BAD", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "bad", "CUSTOM_CAMP_BAD", 2)
		// A node of other's own, which the lessee cannot see.
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bad-hidden", "driver": "fake-hardware", "owner": "oth"})
		mustStatus(t, r, 201)
		// One without the trait, and one in enroll.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bad-notrait", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		provision(t, admin, "bad-notrait", map[string]any{"target": "manage"}, 202)
		waitState(t, admin, "bad-notrait", "manageable")
		base := func(kv ...any) map[string]any {
			m := map[string]any{"name": "x", "runbook": "CUSTOM_CAMP_BAD", "nodes": names}
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(m, kv[i].(string))
				} else {
					m[kv[i].(string)] = kv[i+1]
				}
			}
			return m
		}
		if f := lesMember.Do(t, "POST", "/v1/campaigns", base("nodes", append([]string{"bad-hidden"}, names...))); f.Status != 404 || !strings.Contains(f.Fault(t), "bad-hidden") {
			t.Errorf("hidden node: %d %s", f.Status, f.Body)
		}
		mustStatus(t, other.Do(t, "POST", "/v1/campaigns", base()), 404)
		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{base("name", nil), "name"},
			{base("runbook", nil), "runbook"},
			{base("nodes", nil), "nodes"},
			{base("node_query", map[string]any{"traits": []string{"CUSTOM_CAMP_BAD"}}), "nodes"},
			{base("nodes", []string{names[0], names[0]}), "nodes"},
			{base("max_concurrency", 0), "max_concurrency"},
			{base("max_concurrency", 1001), "max_concurrency"},
			{base("max_concurrency", "two"), "max_concurrency"},
			{base("max_failures", "ten"), "max_failures"},
			{base("max_failures", "150%"), "max_failures"},
			{base("max_failures", -1), "max_failures"},
			{base("start_after", "tomorrow"), "start_after"},
			{base("window", map[string]any{}), "window"},
			{base("nodes", append([]string{"bad-notrait"}, names...)), "bad-notrait"},
			{base("node_query", map[string]any{"traits": []string{"CUSTOM_NOBODY"}}, "nodes", nil), "node_query"},
		} {
			r := lesMember.Do(t, "POST", "/v1/campaigns", tc.body)
			if r.Status != 400 || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("%v: %d %s, want a 400 naming %s", tc.body, r.Status, r.Body, tc.field)
			}
		}
		if n, err := db.Campaign.Query().Count(context.Background()); err != nil || n != 0 {
			t.Fatalf("%d campaigns recorded by refused requests (%v)", n, err)
		}
		// skip_ineligible records the ineligible node as skipped; a
		// node_query picks the caller's visible nodes carrying the trait.
		r = lesMember.Do(t, "POST", "/v1/campaigns", base("nodes", append([]string{"bad-notrait"}, names...), "skip_ineligible", true,
			"start_after", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
		mustStatus(t, r, 201)
		m := r.JSON(t)
		if m["state"] != "scheduled" || count(m, "skipped") != 1 || count(m, "pending") != 2 {
			t.Fatalf("skip_ineligible: %s", r.Body)
		}
		ns := lesMember.Do(t, "GET", "/v1/campaigns/"+m["uuid"].(string)+"/nodes", nil).JSON(t)["nodes"].([]any)
		if row := ns[0].(map[string]any); row["status"] != "skipped" || !strings.Contains(fmt.Sprint(row["reason"]), "CUSTOM_CAMP_BAD") {
			t.Errorf("skipped row: %v", row)
		}
		r = lesMember.Do(t, "POST", "/v1/campaigns", base("nodes", nil, "node_query", map[string]any{"traits": []string{"CUSTOM_CAMP_BAD"}}, "requires_approval", true))
		mustStatus(t, r, 201)
		if m := r.JSON(t); count(m, "pending") != 2 || m["state"] != "pending_approval" {
			t.Errorf("node_query: %s", r.Body)
		}
	})
}

// Each node is authorized again, as the campaign's creator, when its turn
// comes: a node put into maintenance since is skipped with that reason,
// one the creator can no longer see is skipped as not found, and the
// rest run. Creation and approval are audited.
func TestCampaignRecheckAtTurn(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin, lesMember, lesManager := clients["system-admin"], clients["lessee-member"], clients["lessee-manager"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_TURN", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "turn", "CUSTOM_CAMP_TURN", 3)
		r := lesMember.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "turn", "runbook": "CUSTOM_CAMP_TURN", "nodes": names,
			"requires_approval": true, "max_concurrency": 3})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+names[0]+"/maintenance", map[string]any{"reason": "fan swap"}), 202)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+names[1], `[{"op":"replace","path":"/lessee","value":"oth"}]`), 200)
		mustStatus(t, lesManager.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 202)
		m := waitCampaign(t, lesMember, id, stateIs("completed"))
		if count(m, "skipped") != 2 || count(m, "succeeded") != 1 {
			t.Fatalf("counts: %v", m["counts"])
		}
		ns := lesMember.Do(t, "GET", "/v1/campaigns/"+id+"/nodes", nil).JSON(t)["nodes"].([]any)
		for i, want := range []string{"fan swap", "could not be found"} {
			if row := ns[i].(map[string]any); row["status"] != "skipped" || !strings.Contains(fmt.Sprint(row["reason"]), want) {
				t.Errorf("node %d: %v, want skipped for %q", i, row, want)
			}
		}
		if strings.Contains(eventsOf(t, admin, names[1]), "CUSTOM_CAMP_TURN") {
			t.Error("the node the creator lost ran the runbook")
		}
		ctx := context.Background()
		for _, rule := range []string{"baremetal:campaign:create", "baremetal:campaign:approve"} {
			if n, err := db.AuditEvent.Query().Where(auditevent.Rule(rule), auditevent.TargetID(id)).Count(ctx); err != nil || n != 1 {
				t.Errorf("%d audit rows for %s (%v)", n, rule, err)
			}
		}
	})
}

// Three replicas on one PostgreSQL database share a campaign: each starts
// only the nodes its hash ring gives it, yet the cap holds across them,
// sampled while it runs and from the rows' times, and every node runs
// exactly once.
func TestCampaignCapAcrossReplicas(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	opts := func(name string) server.Options {
		return server.Options{Database: setting, Conductor: cond.Config{Name: name, Heartbeat: 200 * time.Millisecond, HeartbeatTimeout: 3 * time.Second}}
	}
	srvA, clients := startLocal(t, setting, opts("camp-a"))
	servertest.Start(t, opts("camp-b"))
	servertest.Start(t, opts("camp-c"))
	waitRegistered(t, srvA, "camp-a", "camp-b", "camp-c")
	admin := clients["system-admin"]
	mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_RING", "public": true,
		"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 1}}}}), 201)
	names := campaignNodes(t, admin, "ring", "CUSTOM_CAMP_RING", 12)
	r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "ring", "runbook": "CUSTOM_CAMP_RING", "nodes": names, "max_concurrency": 4})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	ctx := context.Background()
	waitCampaign(t, admin, id, func(m map[string]any) bool {
		busy, err := srvA.DB.Node.Query().Where(node.NameHasPrefix("ring-"), node.ProvisionStateIn("cleaning", "clean wait")).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if busy > 4 || count(m, "running") > 4 {
			t.Fatalf("%d nodes cleaning, %d running, cap 4", busy, count(m, "running"))
		}
		return m["state"] == "completed"
	})
	rows, err := srvA.DB.CampaignNode.Query().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if most := maxOverlap(t, rows); most > 4 || len(rows) != 12 {
		t.Errorf("%d rows, %d ran at once, cap 4", len(rows), most)
	}
	for _, name := range names {
		if n := strings.Count(eventsOf(t, admin, name), "Runbook CUSTOM_CAMP_RING, run by system-admin"); n != 1 {
			t.Errorf("%s ran the runbook %d times", name, n)
		}
	}
	// The ring spread the starts: more than one replica started nodes.
	evs, err := srvA.DB.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Runbook CUSTOM_CAMP_RING")).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for _, e := range evs {
		by[e.Conductor]++
	}
	if len(evs) != 12 || len(by) < 2 {
		t.Errorf("%d runbook starts by conductor: %v", len(evs), by)
	}
}

// A campaign with start_after waits, scheduled, until then; started_at is
// never before it.
func TestCampaignStartAfter(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_LATER", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "later", "CUSTOM_CAMP_LATER", 2)
		at := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "later", "runbook": "CUSTOM_CAMP_LATER", "nodes": names,
			"start_after": at.Format(time.RFC3339), "max_concurrency": 2})
		mustStatus(t, r, 201)
		m := r.JSON(t)
		if m["state"] != "scheduled" || m["started_at"] != nil {
			t.Fatalf("created: %s", r.Body)
		}
		m = waitCampaign(t, admin, m["uuid"].(string), stateIs("completed"))
		started, err := time.Parse("2006-01-02T15:04:05.000000+00:00", m["started_at"].(string))
		if err != nil || started.Before(at) || count(m, "succeeded") != 2 {
			t.Errorf("started at %v (%v), start_after %v; counts %v", started, err, at, m["counts"])
		}
		rows, err := db.CampaignNode.Query().All(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rows {
			if x.StartedAt == nil || x.StartedAt.Before(at) {
				t.Errorf("node %s started at %v, before %v", x.NodeUUID, x.StartedAt, at)
			}
		}
	})
}

// A conductor that stopped between taking a node's place and starting its
// run leaves a running row whose run never began: after a minute the row
// goes back to pending and its place is freed, and the node then runs,
// once.
func TestCampaignLostStart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_LOST", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "lost", "CUSTOM_CAMP_LOST", 2)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "lost", "runbook": "CUSTOM_CAMP_LOST", "nodes": names,
			"requires_approval": true})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		// What the stopped conductor left: the first node's row running
		// since two minutes, the campaign's one place taken, the node
		// untouched since before then.
		ctx := context.Background()
		long := time.Now().Add(-2 * time.Minute)
		c, err := db.Campaign.Query().Where(campaign.UUID(id)).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n0, err := db.Node.Query().Where(node.Name(names[0])).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Node.UpdateOne(n0).SetProvisionUpdatedAt(long.Add(-time.Minute)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.CampaignNode.Update().Where(campaignnode.CampaignID(c.ID), campaignnode.NodeUUID(n0.UUID)).
			SetStatus("running").SetStartedAt(long).SetRun("clean").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.Campaign.UpdateOne(c).SetRunning(1).SetState("running").SetStartedAt(long).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		m := waitCampaign(t, admin, id, stateIs("completed"))
		if count(m, "succeeded") != 2 {
			t.Fatalf("counts: %v", m["counts"])
		}
		for _, name := range names {
			if n := strings.Count(eventsOf(t, admin, name), "Runbook CUSTOM_CAMP_LOST, run by system-admin"); n != 1 {
				t.Errorf("%s ran the runbook %d times", name, n)
			}
		}
		if c, err = db.Campaign.Get(ctx, c.ID); err != nil || c.Running != 0 {
			t.Errorf("running count %d after the end (%v)", c.Running, err)
		}
	})
}
