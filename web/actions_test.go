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
	signIn := func(user string) *browser {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}})
		return b
	}
	olly := signIn("olly")
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
	_, page, _ = signIn("rita").do("GET", "/nodes/"+id, nil)
	if strings.Contains(page, ">Return to manageable<") || !strings.Contains(page, "may not abort or recover runs, by rule baremetal:node:set_provision_state") {
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
