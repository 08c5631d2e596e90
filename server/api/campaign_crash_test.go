package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestCampaignKillReplica: three anvil serve processes on one PostgreSQL
// database share a campaign; one is killed with SIGKILL while nodes of
// the campaign run. The survivors take its nodes over through the hash
// ring: the runs it had in progress end failed (the node's conductor was
// lost) and are recorded once, the rest run on the survivors, and every
// node's runbook started exactly once.
func TestCampaignKillReplica(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	bin := anvilBinary(t)
	runAnvil(t, bin, "migrate", "--database", setting)
	runAnvil(t, bin, "user", "create", "op", "--database", setting)
	runAnvil(t, bin, "user", "grant", "op", "--system", "--role", "admin", "--database", setting)
	token := runAnvil(t, bin, "token", "create", "--user", "op", "--system", "--roles", "admin", "--database", setting)
	procs := map[string]*process{}
	for _, name := range []string{"kill-a", "kill-b", "kill-c"} {
		procs[name] = serveProcess(t, bin, setting, name)
	}
	admin := &servertest.Client{Base: procs["kill-a"].url, Version: "latest", Header: http.Header{"X-Auth-Token": {token}}}
	deadline := time.Now().Add(30 * time.Second)
	for len(admin.Do(t, "GET", "/v1/conductors", nil).JSON(t)["conductors"].([]any)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the three conductors never registered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_KILL", "public": true,
		"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 3}}}}), 201)
	names := campaignNodes(t, admin, "kill", "CUSTOM_CAMP_KILL", 12)
	r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "kill", "runbook": "CUSTOM_CAMP_KILL", "nodes": names,
		"max_concurrency": 6, "max_failures": "100%"})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	// Kill a replica other than the one we ask, once it runs a node of
	// the campaign.
	victim := ""
	for victim == "" {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("no node of the campaign ran on kill-b or kill-c")
		}
		for _, name := range names {
			n := admin.Do(t, "GET", "/v1/nodes/"+name, nil).JSON(t)
			if c, _ := n["conductor"].(string); n["provision_state"] == "clean wait" && c != "kill-a" {
				victim = c
				break
			}
		}
	}
	p := procs[victim]
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown path runs
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()
	m := waitCampaign(t, admin, id, stateIs("completed"))
	if count(m, "succeeded")+count(m, "failed") != 12 || count(m, "succeeded") == 0 || count(m, "failed") == 0 {
		t.Fatalf("after the kill of %s: %v", victim, m["counts"])
	}
	for _, x := range admin.Do(t, "GET", "/v1/campaigns/"+id+"/nodes", nil).JSON(t)["nodes"].([]any) {
		row := x.(map[string]any)
		if row["status"] == "failed" && !strings.Contains(row["reason"].(string), victim+" was lost") {
			t.Errorf("failed node %v: %v, want the lost conductor named", row["node_uuid"], row["reason"])
		}
	}
	for _, name := range names {
		if n := strings.Count(eventsOf(t, admin, name), "Runbook CUSTOM_CAMP_KILL, run by op"); n != 1 {
			t.Errorf("%s ran the runbook %d times", name, n)
		}
	}
}
