package web_test

import (
	"context"
	"html"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestUsersAdminPage: a system admin creates a user, grants and revokes a
// role and deletes the user from the browser, each change back on the
// page with a message and a bad one refused with the reason; a system
// reader sees the list without forms and may change nothing; a project
// admin may not even see it.
func TestUsersAdminPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		root := signInAs(t, srv, "root")
		st, page, _ := root.do("GET", "/admin/users", nil)
		if st != 200 || !strings.Contains(page, `<tr data-user="pat">`) || !strings.Contains(page, "member on project blue") || !strings.Contains(page, "Create user") {
			t.Fatalf("users page: %d\n%s", st, page)
		}
		form := func(kv ...string) url.Values {
			v := url.Values{"csrf": {root.csrf}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return v
		}
		if st, page, _ := root.do("POST", "/admin/users", form("name", "newbie", "password", "short")); st != 400 || !strings.Contains(page, "password must be at least") {
			t.Errorf("short password: %d", st)
		}
		if st, _, h := root.do("POST", "/admin/users", form("name", "newbie", "password", "newbie-password-1")); st != 303 || h.Get("Location") != "/admin/users?done=created" {
			t.Fatalf("create: %d %s", st, h.Get("Location"))
		}
		if st, page, _ := root.do("POST", "/admin/users", form("name", "newbie", "password", "newbie-password-1")); st != 409 || !strings.Contains(page, "already exists") {
			t.Errorf("create twice: %d", st)
		}
		if st, _, _ := root.do("POST", "/admin/users/newbie/grant", form("scope", "green", "role", "manager")); st != 303 {
			t.Fatalf("grant: %d", st)
		}
		if st, page, _ := root.do("POST", "/admin/users/newbie/grant", form("scope", "green", "role", "overlord")); st != 400 || !strings.Contains(page, "role") {
			t.Errorf("grant an unknown role: %d", st)
		}
		_, page, _ = root.do("GET", "/admin/users?done=granted", nil)
		if !strings.Contains(page, "Role granted.") || !strings.Contains(page, "manager on project green") {
			t.Errorf("after grant:\n%s", page)
		}
		nb := signInAs(t, srv, "newbie")
		if _, page, _ := nb.do("GET", "/nodes", nil); !strings.Contains(page, "newbie · project green") {
			t.Errorf("the new user cannot sign in to green")
		}
		if st, page, _ := root.do("POST", "/admin/users/newbie/password", form("password", "short")); st != 400 || !strings.Contains(page, "password must be at least") {
			t.Errorf("reset to a short password: %d", st)
		}
		if st, _, h := root.do("POST", "/admin/users/newbie/password", form("password", "newbie-password-2")); st != 303 || h.Get("Location") != "/admin/users?done=password" {
			t.Fatalf("reset password: %d %s", st, h.Get("Location"))
		}
		if st, _, _ := nb.do("GET", "/nodes", nil); st != 303 {
			t.Errorf("the session survived a password reset: %d", st)
		}
		if _, err := srv.IDs.Login(ctx, "newbie", "newbie-password-2", "127.0.0.1", nil); err != nil {
			t.Errorf("the new password does not work: %v", err)
		}
		// Back to the password signInAs knows, for the revoke below.
		if err := srv.IDs.SetPassword(ctx, "newbie", "newbie-password-1"); err != nil {
			t.Fatal(err)
		}
		nb = signInAs(t, srv, "newbie")
		if st, _, _ := root.do("POST", "/admin/users/newbie/revoke", form("assignment", "project:green|manager")); st != 303 {
			t.Fatalf("revoke: %d", st)
		}
		if st, _, _ := nb.do("GET", "/nodes", nil); st != 303 {
			t.Errorf("the revoked user's session survived: %d", st)
		}
		if st, _, _ := root.do("POST", "/admin/users/newbie/revoke", form("assignment", "project:green|manager")); st != 404 {
			t.Errorf("revoke a role not held: %d", st)
		}
		if st, page, _ := root.do("POST", "/admin/users/root/delete", form()); st != 400 || !strings.Contains(page, "cannot delete your own account") {
			t.Errorf("delete self: %d", st)
		}
		if st, _, _ := root.do("POST", "/admin/users/newbie/delete", form()); st != 303 {
			t.Fatalf("delete: %d", st)
		}
		if _, page, _ = root.do("GET", "/admin/users", nil); strings.Contains(page, `data-user="newbie"`) {
			t.Errorf("deleted user still listed")
		}

		// A system reader: the list, no forms, no changes.
		rhea := signInAs(t, srv, "rhea")
		if st, page, _ := rhea.do("GET", "/admin/users", nil); st != 200 || strings.Contains(page, "Create user") || strings.Contains(page, ">Grant<") {
			t.Errorf("reader's users page: %d", st)
		}
		for _, path := range []string{"/admin/users", "/admin/users/pat/grant", "/admin/users/pat/revoke", "/admin/users/pat/password", "/admin/users/pat/delete"} {
			if st, _, _ := rhea.do("POST", path, url.Values{"csrf": {rhea.csrf}, "name": {"x"}, "password": {"xxxxxxxxxxxxxxx"}, "scope": {"system"}, "role": {"admin"}, "assignment": {"project:blue|member"}}); st != 403 {
				t.Errorf("reader POST %s: %d", path, st)
			}
		}
		// A project admin: not even the list.
		pam := signInAs(t, srv, "pam")
		if st, page, _ := pam.do("GET", "/admin/users", nil); st != 403 || strings.Contains(page, "pat") && strings.Contains(page, "member on project blue") {
			t.Errorf("project admin's users page: %d", st)
		}
		if st, _, _ := pam.do("POST", "/admin/users/pat/grant", url.Values{"csrf": {pam.csrf}, "scope": {"system"}, "role": {"admin"}}); st != 403 {
			t.Errorf("project admin granting system admin: %d", st)
		}
		if us, _ := srv.IDs.ListUsers(ctx); len(us) == 0 {
			t.Fatal("no users")
		} else {
			for _, u := range us {
				if u.Name == "pat" && len(u.Roles) != 1 {
					t.Errorf("pat's roles changed: %v", u.Roles)
				}
			}
		}
	})
}

// TestAdminTokensPage: user administrators see every user's API tokens a
// page at a time, never a secret; a system admin revokes one (audited
// against its user, and it stops authenticating); a system reader sees
// the list without Revoke and may revoke nothing; a project admin sees
// nothing.
func TestAdminTokensPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		secret, pats, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "pat", Scope: identity.Scope{Project: "blue"}, Roles: []string{"reader"}, Description: "ci runner", Expires: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		root, rhea, pam := signInAs(t, srv, "root"), signInAs(t, srv, "rhea"), signInAs(t, srv, "pam")
		if _, page, _ := root.do("GET", "/admin/users", nil); !strings.Contains(page, `href="/admin/tokens"`) {
			t.Error("the users page does not link the token list")
		}
		st, page, _ := root.do("GET", "/admin/tokens", nil)
		if !strings.Contains(page, `aria-current="page">Users<`) {
			t.Error("the token list is not marked as part of Users in the navigation")
		}
		row := page[strings.Index(page, `data-token="`+pats.UUID+`"`):]
		row = row[:strings.Index(row, "</tr>")]
		if st != 200 || !strings.Contains(row, `data-user="pat"`) || !strings.Contains(row, "project blue") || !strings.Contains(row, "ci runner") ||
			!strings.Contains(row, `<time datetime="`+pats.CreatedAt.UTC().Format(time.RFC3339)+`">`) || !strings.Contains(row, ">Revoke<") {
			t.Fatalf("token list: %d\n%s", st, row)
		}
		if strings.Contains(page, secret) || strings.Contains(page, identity.TokenPrefix) {
			t.Fatal("the token list shows a secret")
		}
		revoke := "/admin/tokens/" + pats.UUID + "/revoke"

		// A reader lists but may not revoke; a project admin does neither.
		if st, page, _ := rhea.do("GET", "/admin/tokens", nil); st != 200 || !strings.Contains(page, pats.UUID) || strings.Contains(page, ">Revoke<") {
			t.Errorf("reader's token list: %d", st)
		}
		if st, _, _ := rhea.do("POST", revoke, url.Values{"csrf": {rhea.csrf}}); st != 403 {
			t.Errorf("reader's revoke: %d", st)
		}
		if st, page, _ := pam.do("GET", "/admin/tokens", nil); st != 403 || strings.Contains(page, pats.UUID) {
			t.Errorf("project admin's token list: %d", st)
		}
		if st, _, _ := pam.do("POST", revoke, url.Values{"csrf": {pam.csrf}}); st != 403 {
			t.Errorf("project admin's revoke: %d", st)
		}
		if _, err := srv.IDs.VerifyToken(ctx, secret); err != nil {
			t.Fatalf("a refused revoke revoked the token: %v", err)
		}
		if st, _, _ := root.do("POST", "/admin/tokens/no-such-token/revoke", url.Values{"csrf": {root.csrf}}); st != 404 {
			t.Errorf("revoke of a missing token: %d", st)
		}
		if st, _, _ := root.do("POST", revoke, url.Values{}); st != 403 {
			t.Errorf("revoke without the CSRF token: %d", st)
		}

		if st, _, h := root.do("POST", revoke, url.Values{"csrf": {root.csrf}}); st != 303 || h.Get("Location") != "/admin/tokens" {
			t.Fatalf("revoke: %d %s", st, h.Get("Location"))
		}
		_, page, _ = root.do("GET", "/admin/tokens", nil)
		row = page[strings.Index(page, `data-token="`+pats.UUID+`"`):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(html.UnescapeString(page), "Revoked pat's token on project blue") || !strings.Contains(row, ">revoked<") || strings.Contains(row, ">Revoke<") {
			t.Errorf("after revoke:\n%s", row)
		}
		if _, err := srv.IDs.VerifyToken(ctx, secret); err == nil {
			t.Error("the revoked token still authenticates")
		}
		if n := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:token:revoke"), auditevent.TargetID("pat"), auditevent.Result("allowed"), auditevent.User("root")).CountX(ctx); n != 1 {
			t.Errorf("%d audit events for the revoke", n)
		}
		if st, _, _ := root.do("POST", revoke, url.Values{"csrf": {root.csrf}}); st != 404 {
			t.Errorf("revoke twice: %d", st)
		}

		// Pages of 50: the newest first, then the rest.
		for range 50 {
			if _, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "pat", Scope: identity.Scope{Project: "blue"}, Roles: []string{"reader"}}); err != nil {
				t.Fatal(err)
			}
		}
		_, page, _ = root.do("GET", "/admin/tokens", nil)
		if n := strings.Count(page, "<tr data-token="); n != 50 || !strings.Contains(page, `href="/admin/tokens?offset=50"`) || strings.Contains(page, pats.UUID) {
			t.Errorf("first page: %d rows", n)
		}
		_, page, _ = root.do("GET", "/admin/tokens?offset=50", nil)
		if n := strings.Count(page, "<tr data-token="); n != 2 || !strings.Contains(page, pats.UUID) || strings.Contains(page, `rel="next"`) {
			t.Errorf("second page: %d rows", n)
		}
		if st, _, _ := root.do("GET", "/admin/tokens?offset=-1", nil); st != 400 {
			t.Errorf("a negative offset: %d", st)
		}
	})
}

// readerAndProjectAdmin adds rhea, a system reader, and pam, an admin of
// project blue: the users pages' onlooker and outsider.
func readerAndProjectAdmin(t *testing.T, srv *servertest.Server) {
	t.Helper()
	for user, a := range map[string]identity.Assignment{
		"rhea": {Scope: identity.Scope{System: true}, Role: "reader"},
		"pam":  {Scope: identity.Scope{Project: "blue"}, Role: "admin"},
	} {
		if err := srv.IDs.CreateUser(context.Background(), user, user+"-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(context.Background(), user, a); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLastAdminPortal: on the users page the last system admin cannot
// revoke their own admin role, and the page says why; making someone a
// system admin is asked first, naming what it gives, and done only once
// confirmed; other grants are not asked; after that, the first admin may
// step down.
func TestLastAdminPortal(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		// root is to be the only system admin: the first start made one.
		if err := srv.IDs.DeleteUser(ctx, identity.BootstrapUser); err != nil {
			t.Fatal(err)
		}
		root := signInAs(t, srv, "root")
		root.do("GET", "/admin/users", nil)
		form := func(kv ...string) url.Values {
			v := url.Values{"csrf": {root.csrf}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return v
		}
		holds := func(name, role string) bool {
			us, err := srv.IDs.ListUsers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range us {
				for _, a := range u.Roles {
					if u.Name == name && a.System && a.Role == role {
						return true
					}
				}
			}
			return false
		}
		st, page, _ := root.do("POST", "/admin/users/root/revoke", form("assignment", "system|admin"))
		if st != 409 || !strings.Contains(page, "root is the last active system admin") || !holds("root", "admin") {
			t.Errorf("the last admin revokes their own admin role: %d, still admin %v\n%s", st, holds("root", "admin"), page)
		}

		st, page, _ = root.do("POST", "/admin/users/pat/grant", form("scope", "system", "role", "admin"))
		if st != 200 || !strings.Contains(page, `data-testid="confirm-grant"`) || !strings.Contains(page, "Make pat a system admin?") ||
			!strings.Contains(page, `name="confirmed" value="yes"`) || holds("pat", "admin") {
			t.Fatalf("grant system admin unconfirmed: %d, granted %v\n%s", st, holds("pat", "admin"), page)
		}
		if st, _, h := root.do("POST", "/admin/users/pat/grant", form("scope", "system", "role", "admin", "confirmed", "yes")); st != 303 ||
			h.Get("Location") != "/admin/users?done=granted" || !holds("pat", "admin") {
			t.Fatalf("grant system admin confirmed: %d %s, granted %v", st, h.Get("Location"), holds("pat", "admin"))
		}
		if st, _, _ := root.do("POST", "/admin/users/gil/grant", form("scope", "system", "role", "reader")); st != 303 || !holds("gil", "reader") {
			t.Errorf("grant system reader: %d, granted %v", st, holds("gil", "reader"))
		}
		if st, _, _ := root.do("POST", "/admin/users/root/revoke", form("assignment", "system|admin")); st != 303 || holds("root", "admin") {
			t.Errorf("an admin steps down while another stays: %d", st)
		}
	})
}

// TestUsersSearch: the users page's search, kept in the URL, narrows the
// list on the server by name or by role as the page writes it, and a
// row's forms sit behind its Manage.
func TestUsersSearch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		readerAndProjectAdmin(t, srv)
		root := signInAs(t, srv, "root")
		for q, want := range map[string][]string{
			"pa":                {"pam", "pat"},
			"member on project": {"gil", "pat"},
			"ADMIN ON PROJECT":  {"pam"},
			"reader":            {"rhea"},
			"nobody":            nil,
		} {
			st, page, _ := root.do("GET", "/admin/users?"+url.Values{"q": {q}}.Encode(), nil)
			var got []string
			for _, u := range []string{"root", "pat", "gil", "rhea", "pam"} {
				if strings.Contains(page, `<tr data-user="`+u+`">`) {
					got = append(got, u)
				}
			}
			slices.Sort(got)
			if st != 200 || !slices.Equal(got, want) || !strings.Contains(page, `value="`+html.EscapeString(q)+`"`) {
				t.Errorf("q=%q: %d %v, want %v", q, st, got, want)
			}
		}
		_, page, _ := root.do("GET", "/admin/users?q=pat", nil)
		if !strings.Contains(page, `<details class="manage"><summary>Manage <span class="sr-only">pat</span></summary>`) ||
			!strings.Contains(page, `action="/admin/users/pat/grant"`) || !strings.Contains(page, "1 of ") {
			t.Errorf("pat's row:\n%s", page)
		}
	})
}

// TestUnknownProjectGrant: granting a role on a project no node, role or
// runbook uses is asked first, naming it, and done only once confirmed
// for that very project; a known project is granted at once, a bad role
// is refused rather than asked about, and a system reader gets 403, not
// the question.
func TestUnknownProjectGrant(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		root := signInAs(t, srv, "root")
		root.do("GET", "/admin/users", nil)
		holds := func(project string) bool {
			us, err := srv.IDs.ListUsers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range us {
				for _, a := range u.Roles {
					if u.Name == "gil" && a.Project == project {
						return true
					}
				}
			}
			return false
		}
		grant := func(b *browser, kv ...string) (int, string) {
			v := url.Values{"csrf": {b.csrf}, "role": {"member"}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			st, page, _ := b.do("POST", "/admin/users/gil/grant", v)
			return st, page
		}
		st, page := grant(root, "scope", "purpel")
		if st != 200 || !strings.Contains(page, "No node, role or runbook uses project purpel yet.") ||
			!strings.Contains(page, `<input type="hidden" name="new_project" value="purpel">`) || !strings.Contains(page, "Yes, create new project purpel and grant member") || holds("purpel") {
			t.Fatalf("unconfirmed grant on a new project: %d, granted %v\n%s", st, holds("purpel"), page)
		}
		if st, _ := grant(root, "scope", "purpel", "new_project", "purple"); st != 200 || holds("purpel") {
			t.Errorf("confirming another project grants this one: %d", st)
		}
		if st, page := grant(root, "scope", "purpel", "role", "overlord"); st != 400 || !strings.Contains(page, "role") {
			t.Errorf("a bad role on a new project: %d", st)
		}
		if st, _ := grant(root, "scope", "purpel", "new_project", "purpel"); st != 303 || !holds("purpel") {
			t.Errorf("confirmed grant on a new project: %d, granted %v", st, holds("purpel"))
		}
		if st, _ := grant(root, "scope", "red"); st != 303 || !holds("red") {
			t.Errorf("a known project (it owns nodes) is asked about: %d", st)
		}
		// A runbook's owner is known though no node or role names it.
		if err := srv.DB.Runbook.Create().SetUUID("11111111-2222-3333-4444-555555555555").SetName("CUSTOM_TEAL").SetOwner("teal").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if st, _ := grant(root, "scope", "teal"); st != 303 || !holds("teal") {
			t.Errorf("a project owning a runbook is asked about: %d", st)
		}
		rhea := signInAs(t, srv, "rhea")
		rhea.do("GET", "/admin/users", nil)
		if st, page := grant(rhea, "scope", "orange"); st != 403 || strings.Contains(page, "new project") {
			t.Errorf("a system reader's grant on a new project: %d", st)
		}
	})
}
