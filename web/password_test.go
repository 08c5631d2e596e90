package web_test

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBootstrapAdminMustChangePassword: the bootstrap admin's generated
// password is refused by the API (Basic and tokens alike, 403 saying how
// to change it) and its portal sign-in leads only to the change-password
// page; once it is changed there, the API takes the new password, not
// the old one, the portal works, and the change is audited. On both
// databases.
func TestBootstrapAdminMustChangePassword(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		var generated string
		srv := servertest.Start(t, server.Options{Database: setting, Bootstrap: func(_, pw string) { generated = pw }})
		if generated == "" {
			t.Fatal("no bootstrap password on a new database")
		}
		ctx := context.Background()
		basic := func(pw string) *servertest.Response {
			c := srv.Client()
			c.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(identity.BootstrapUser+":"+pw)))
			return c.Do(t, "GET", "/v1/nodes", nil)
		}
		refused := func(what string, r *servertest.Response) {
			t.Helper()
			if r.Status != 403 {
				t.Fatalf("%s: %d %s; want 403", what, r.Status, r.Body)
			}
			if f := r.Fault(t); !strings.Contains(f, "must be changed") || !strings.Contains(f, "anvil user set-password admin") ||
				!strings.Contains(f, "sign in to the portal") {
				t.Errorf("%s: fault %q does not say the password must be changed, nor how", what, f)
			}
		}
		refused("Basic with the generated password", basic(generated))
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: identity.BootstrapUser, Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		withToken := func() *servertest.Response {
			c := srv.Client()
			c.Header.Set("X-Auth-Token", tok)
			return c.Do(t, "GET", "/v1/nodes", nil)
		}
		refused("a token of the bootstrap admin", withToken())

		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		if st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {identity.BootstrapUser}, "password": {generated}}); st != 303 ||
			h.Get("Location") != "/account/password?next=%2Fnodes" {
			t.Fatalf("sign-in: %d to %q; want 303 straight to the change-password page", st, h.Get("Location"))
		}
		// Every page, and every action, leads to the change-password page.
		for _, path := range []string{"/nodes", "/admin/users", "/account"} {
			if st, _, h := b.do("GET", path, nil); st != 303 || h.Get("Location") != "/account/password?next="+url.QueryEscape(path) {
				t.Errorf("GET %s before the change: %d to %q; want 303 to the change-password page", path, st, h.Get("Location"))
			}
		}
		st, page, _ := b.do("GET", "/account/password?next=%2Fnodes", nil)
		if st != 200 || !strings.Contains(page, `data-testid="must-change"`) || !strings.Contains(page, `minlength="12"`) {
			t.Fatalf("change-password page: %d\n%s", st, page)
		}
		if st, _, h := b.do("POST", "/account/tokens", url.Values{"csrf": {b.csrf}, "roles": {"admin"}}); st != 303 || !strings.HasPrefix(h.Get("Location"), "/account/password") {
			t.Errorf("creating a token before the change: %d to %q; want 303 to the change-password page", st, h.Get("Location"))
		}
		const chosen = "admin-chose-this-1"
		for _, bad := range []struct {
			name                   string
			current, next, confirm string
			want                   string
		}{
			{"wrong current password", "not-the-password", chosen, chosen, "current password is not right"},
			{"new passwords differ", generated, chosen, chosen + "x", "differ"},
			{"too short", generated, "short-1", "short-1", "at least 12 characters"},
			{"the same password again", generated, generated, generated, "must differ"},
		} {
			st, page, _ := b.do("POST", "/account/password", url.Values{"csrf": {b.csrf}, "current": {bad.current}, "new": {bad.next}, "confirm": {bad.confirm}})
			if st != 400 || !strings.Contains(page, bad.want) {
				t.Errorf("%s: %d; want 400 saying %q", bad.name, st, bad.want)
			}
		}
		refused("Basic after refused changes", basic(generated))
		st, _, h := b.do("POST", "/account/password", url.Values{"csrf": {b.csrf}, "current": {generated}, "new": {chosen}, "confirm": {chosen}, "next": {"/nodes"}})
		if st != 303 || h.Get("Location") != "/nodes" {
			t.Fatalf("change: %d to %q; want 303 to /nodes", st, h.Get("Location"))
		}
		if st, page, _ := b.do("GET", "/nodes", nil); st != 200 || !strings.Contains(page, "Your password was changed.") {
			t.Errorf("the portal after the change: %d", st)
		}
		// Afterwards the page is one the account chooses to visit, from
		// its account page, and says nothing is held back.
		if st, page, _ := b.do("GET", "/account", nil); st != 200 || !strings.Contains(page, `href="/account/password"`) {
			t.Errorf("the account page after the change: %d, or no link to change the password", st)
		}
		if st, page, _ := b.do("GET", "/account/password", nil); st != 200 || strings.Contains(page, `data-testid="must-change"`) {
			t.Errorf("the change-password page after the change: %d, or it still says the password must change", st)
		}

		if r := basic(chosen); r.Status != 200 {
			t.Errorf("Basic with the new password: %d %s", r.Status, r.Body)
		}
		if r := basic(generated); r.Status != 401 {
			t.Errorf("Basic with the generated password after the change: %d %s; want 401", r.Status, r.Body)
		}
		if r := withToken(); r.Status != 200 {
			t.Errorf("the token after the change: %d %s", r.Status, r.Body)
		}
		n, err := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:user:change-password"), auditevent.TargetID(identity.BootstrapUser),
			auditevent.Result("allowed"), auditevent.User(identity.BootstrapUser)).Count(ctx)
		if err != nil || n != 1 {
			t.Errorf("audited changes by admin: %d (%v); want 1", n, err)
		}
	})
}
