package web_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/web"
)

var droppedForm = regexp.MustCompile(`(?s)data-testid="dropped-action".*?</div>`)

// TestDroppedActionOfferedAfterSignIn: a form sent from a page whose
// session had timed out is not done; once the same person has signed in
// again, the page names it and offers it once, with a button that does it
// under the new session. A form with a password is named without its
// values, and someone else signing in on that browser is offered nothing.
func TestDroppedActionOfferedAfterSignIn(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		const secret = "dropped-test-secret"
		srv := servertest.Start(t, server.Options{Database: setting, SessionSecret: secret})
		ctx := context.Background()
		for _, u := range []string{"pat", "sam"} {
			if err := srv.IDs.CreateUser(ctx, u, u+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u, identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "member"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := srv.IDs.SetPassword(ctx, identity.BootstrapUser, "admin-password-1"); err != nil {
			t.Fatal(err)
		}
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: identity.BootstrapUser, Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		admin := srv.Client()
		admin.Header.Set("X-Auth-Token", tok)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "blue-1", "driver": "fake", "owner": "blue"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		node := r.JSON(t)["uuid"].(string)
		nodePage := "/nodes/" + node
		power := func() any { return admin.Do(t, "GET", "/v1/nodes/"+node, nil).JSON(t)["power_state"] }
		before := power()

		// timedOut is a browser of user's whose session timed out on the
		// node page, and the CSRF token that page holds.
		timedOut := func(user string) (*browser, string) {
			b := signInAs(t, srv, user)
			if st, _, _ := b.do("GET", nodePage, nil); st != 200 {
				t.Fatalf("node page: %d", st)
			}
			old := replay(t, srv.URL, aged(t, secret, b.cookie(), func(s *web.Session) { s.Seen = time.Now().Add(-web.IdleTimeout - time.Minute).Unix() }))
			return old, b.csrf
		}
		signInTo := func(b *browser, user, next string) {
			t.Helper()
			b.do("GET", "/login", nil)
			if st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}, "next": {next}}); st != 303 || h.Get("Location") != next {
				t.Fatalf("sign in %s: %d %s", user, st, h.Get("Location"))
			}
		}

		old, csrf := timedOut("pat")
		target := "power on"
		if before == "power on" {
			target = "power off"
		}
		if st, _, h := old.do("POST", nodePage+"/power", url.Values{"csrf": {csrf}, "target": {target}}, "Referer", srv.URL+nodePage); st != 303 || !strings.HasPrefix(h.Get("Location"), "/login?error=expired") {
			t.Fatalf("the timed-out POST: %d %s", st, h.Get("Location"))
		}
		time.Sleep(200 * time.Millisecond)
		if got := power(); got != before {
			t.Fatalf("the timed-out POST acted: power %v, was %v", got, before)
		}
		signInTo(old, "pat", nodePage)
		_, page, _ := old.do("GET", nodePage, nil)
		note := droppedForm.FindString(page)
		if !strings.Contains(note, "Your session had ended, so the power action was not done.") || !strings.Contains(note, `action="`+nodePage+`/power"`) ||
			!strings.Contains(note, `name="target" value="`+target+`"`) || !strings.Contains(note, `name="csrf" value="`+old.csrf+`"`) {
			t.Fatalf("the node page after signing in again does not offer the power action:\n%s", note)
		}
		if _, again, _ := old.do("GET", nodePage, nil); strings.Contains(again, "dropped-action") {
			t.Errorf("the dropped action is offered twice")
		}
		if st, _, _ := old.do("POST", nodePage+"/power", url.Values{"csrf": {old.csrf}, "target": {target}}); st != 303 {
			t.Fatalf("Do it now: %d", st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for power() != target && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if got := power(); got != target {
			t.Errorf("after Do it now: power %v, want %v", got, target)
		}

		// A form with a password: named, its values not kept.
		old, csrf = timedOut("pat")
		old.do("POST", nodePage+"/bmc", url.Values{"csrf": {csrf}, "driver": {"ipmi"}, "ipmi_address": {"10.0.0.9"}, "ipmi_password": {"s3cret-value"}}, "Referer", srv.URL+nodePage)
		signInTo(old, "pat", nodePage)
		_, page, _ = old.do("GET", nodePage, nil)
		note = droppedForm.FindString(page)
		if !strings.Contains(note, "the BMC change") || !strings.Contains(note, "fill in the form again") || strings.Contains(note, "<form") || strings.Contains(page, "s3cret-value") {
			t.Errorf("a dropped form with a password:\n%s", note)
		}

		// Someone else signing in on the same browser is offered nothing.
		old, csrf = timedOut("pat")
		old.do("POST", nodePage+"/power", url.Values{"csrf": {csrf}, "target": {target}}, "Referer", srv.URL+nodePage)
		signInTo(old, "sam", nodePage)
		if _, page, _ = old.do("GET", nodePage, nil); strings.Contains(page, "dropped-action") {
			t.Errorf("sam is offered pat's dropped action")
		}
	})
}
