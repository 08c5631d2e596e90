package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/identity"
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
		for user, a := range map[string]identity.Assignment{
			"rhea": {Scope: identity.Scope{System: true}, Role: "reader"},
			"pam":  {Scope: identity.Scope{Project: "blue"}, Role: "admin"},
		} {
			if err := srv.IDs.CreateUser(ctx, user, user+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, user, a); err != nil {
				t.Fatal(err)
			}
		}
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
