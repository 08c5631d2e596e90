package cli_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
)

// TestCampaignCommands drives a campaign through the CLI beside a running
// server, whose conductor starts the nodes: create (by trait, awaiting
// approval), list, a refused pause, approve, show until it completes;
// a bad window names the flag's field; cancel, and a refused resume.
func TestCampaignCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anvil.db")
	srv := servertest.Start(t, server.Options{Database: db, AuthNone: true})
	api := srv.Client()
	do := func(method, path string, body any, want int) map[string]any {
		t.Helper()
		r := api.Do(t, method, path, body)
		if r.Status != want {
			t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
		}
		if !strings.HasPrefix(string(r.Body), "{") {
			return nil
		}
		return r.JSON(t)
	}
	do("POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CLI_ROLL", "public": true,
		"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}, 201)
	for _, name := range []string{"cli-1", "cli-2"} {
		do("POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware"}, 201)
		do("PUT", "/v1/nodes/"+name+"/traits/CUSTOM_CLI_ROLL", nil, 204)
		do("PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "manage"}, 202)
	}
	deadline := time.Now().Add(time.Minute)
	for _, name := range []string{"cli-1", "cli-2"} {
		for do("GET", "/v1/nodes/"+name, nil, 200)["provision_state"] != "manageable" {
			if time.Now().After(deadline) {
				t.Fatalf("%s never became manageable", name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	anvil := func(args ...string) (string, error) {
		return run(t, "", append(args, "--database", db)...)
	}
	out, err := anvil("campaign", "create", "roll", "CUSTOM_CLI_ROLL", "--trait", "CUSTOM_CLI_ROLL", "--max-concurrency", "2", "--requires-approval")
	id := regexp.MustCompile(`[0-9a-f-]{36}`).FindString(out)
	if err != nil || id == "" || !strings.Contains(out, "pending_approval: 2 node(s) pending") {
		t.Fatalf("create: %v\n%s", err, out)
	}
	if out, err := anvil("campaign", "list"); err != nil || !strings.Contains(out, id) || !strings.Contains(out, "pending_approval") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, err := anvil("campaign", "pause", id); err == nil || !strings.Contains(err.Error(), "cannot become paused") {
		t.Errorf("pause before approval: %v", err)
	}
	// The operator who created it does not approve it
	// (baremetal:campaign:approve:own); someone else does, here through
	// the API.
	if _, err := anvil("campaign", "approve", id); err == nil || !strings.Contains(err.Error(), "someone else approves it") {
		t.Fatalf("approve by its creator: %v", err)
	}
	do("POST", "/v1/campaigns/"+id+"/approve", nil, 202)
	for {
		out, err = anvil("campaign", "show", id)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`state\s+completed`).MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never completed:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if strings.Count(out, "succeeded") != 3 || !strings.Contains(out, "CUSTOM_CLI_ROLL") { // the counts line and two nodes
		t.Errorf("show:\n%s", out)
	}
	if _, err := anvil("campaign", "create", "x", "CUSTOM_CLI_ROLL", "cli-1", "--window-from", "25:00", "--window-to", "06:00"); err == nil ||
		!strings.Contains(err.Error(), "window.from") {
		t.Errorf("bad window: %v", err)
	}
	out, err = anvil("campaign", "create", "later", "CUSTOM_CLI_ROLL", "cli-1", "cli-2", "--requires-approval", "--window-from", "22:00",
		"--window-to", "06:00", "--window-days", "sat,sun", "--batch-pause", "60", "--max-failures", "50%")
	later := regexp.MustCompile(`[0-9a-f-]{36}`).FindString(out)
	if err != nil || later == "" {
		t.Fatalf("create later: %v\n%s", err, out)
	}
	if out, err := anvil("campaign", "show", later); err != nil || !strings.Contains(out, "sat,sun 22:00–06:00 UTC") || !strings.Contains(out, "60s") {
		t.Errorf("show later: %v\n%s", err, out)
	}
	if out, err := anvil("campaign", "cancel", later); err != nil || !strings.Contains(out, "cancelled") {
		t.Errorf("cancel: %v\n%s", err, out)
	}
	if _, err := anvil("campaign", "resume", later); err == nil || !strings.Contains(err.Error(), "cannot become running") {
		t.Errorf("resume after cancel: %v", err)
	}
	n, err := srv.DB.AuditEvent.Query().Where(auditevent.Rule("baremetal:campaign:create"), auditevent.UserHasPrefix("cli"),
		auditevent.ResultEQ("allowed")).Count(context.Background())
	if err != nil || n != 2 {
		t.Errorf("%d audited creations by the CLI (%v)", n, err)
	}
}
