package keystone_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/user"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/keystone"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

const adminPassword = "keystone-admin-password"

// login posts a password token request with scope (nil: none) and
// returns the response.
func login(t *testing.T, srv *servertest.Server, name, password string, scope any) *servertest.Response {
	t.Helper()
	auth := map[string]any{"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
		"user": map[string]any{"name": name, "password": password, "domain": map[string]any{"name": "Default"}}}}}
	if scope != nil {
		auth["scope"] = scope
	}
	c := &servertest.Client{Base: srv.URL, Header: http.Header{}}
	return c.Do(t, "POST", "/identity/v3/auth/tokens", map[string]any{"auth": auth})
}

// keystoneError reads Keystone's error body and checks its code.
func keystoneError(t *testing.T, r *servertest.Response, status int) string {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var body struct {
		Error struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Error.Code != status || body.Error.Message == "" {
		t.Fatalf("not a Keystone error body with code %d: %s", status, r.Body)
	}
	return body.Error.Message
}

// TestIdentityV3Tokens: an OpenStack client signs in with a password and
// a project or system scope, gets an Anvil token in X-Subject-Token that
// the Ironic API takes, a catalog naming Anvil's endpoints, and no more
// than the account holds there; every refusal is Keystone's 401 or 400.
func TestIdentityV3Tokens(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv := servertest.Start(t, server.Options{Database: setting})
		if err := srv.IDs.SetPassword(ctx, identity.BootstrapUser, adminPassword); err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"alice", "carol"} {
			if err := srv.IDs.CreateUser(ctx, u, u+"-password"); err != nil {
				t.Fatal(err)
			}
		}
		if err := srv.IDs.Grant(ctx, "alice", identity.Assignment{Scope: identity.Scope{Project: "p1"}, Role: "member"}); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "carol", identity.Assignment{Scope: identity.Scope{Project: "p2"}, Role: "reader"}); err != nil {
			t.Fatal(err)
		}

		// Discovery: keystoneauth follows the root's 300 to v3.
		c := &servertest.Client{Base: srv.URL, Header: http.Header{}}
		r := c.Do(t, "GET", "/identity", nil)
		if r.Status != http.StatusMultipleChoices || !strings.Contains(string(r.Body), srv.URL+"/identity/v3/") {
			t.Fatalf("GET /identity: %d %s", r.Status, r.Body)
		}
		for _, path := range []string{"/identity/v3", "/identity/v3/"} {
			if r = c.Do(t, "GET", path, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"id":"v3.14"`) {
				t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
			}
		}
		if r = c.Do(t, "GET", "/identity/", nil); r.Status != http.StatusMultipleChoices {
			t.Fatalf("GET /identity/: %d %s", r.Status, r.Body)
		}

		// The system admin, system scope.
		r = login(t, srv, identity.BootstrapUser, adminPassword, map[string]any{"system": map[string]any{"all": true}})
		if r.Status != http.StatusCreated {
			t.Fatalf("admin sign-in: %d %s", r.Status, r.Body)
		}
		var tok struct {
			Token struct {
				System  map[string]bool
				Project struct{ ID, Name string }
				Roles   []struct{ Name string }
				Catalog []struct {
					Type      string
					Endpoints []struct{ Interface, URL string }
				}
				ExpiresAt string `json:"expires_at"`
			}
		}
		if err := json.Unmarshal(r.Body, &tok); err != nil {
			t.Fatal(err)
		}
		if !tok.Token.System["all"] || tok.Token.Project.ID != "" {
			t.Errorf("admin's token scope: system %v, project %q", tok.Token.System, tok.Token.Project.ID)
		}
		public := map[string]string{}
		for _, s := range tok.Token.Catalog {
			for _, e := range s.Endpoints {
				if e.Interface == "public" {
					public[s.Type] = e.URL
				}
			}
		}
		for typ, want := range map[string]string{"baremetal": srv.URL + "/", "lease": srv.URL + "/leasing", "identity": srv.URL + "/identity/v3"} {
			if public[typ] != want {
				t.Errorf("catalog's public %s endpoint %q, want %q", typ, public[typ], want)
			}
		}
		if exp, err := time.Parse("2006-01-02T15:04:05.000000Z", tok.Token.ExpiresAt); err != nil || time.Until(exp) > keystone.TokenLifetime || time.Until(exp) < keystone.TokenLifetime-time.Minute {
			t.Errorf("expires_at %q (%v): want an hour from now", tok.Token.ExpiresAt, err)
		}
		admin := srv.Client()
		admin.Header.Set("X-Auth-Token", r.Header.Get("X-Subject-Token"))
		for _, n := range []map[string]any{{"name": "kn-p1", "driver": "fake-hardware", "owner": "p1"}, {"name": "kn-p2", "driver": "fake-hardware", "owner": "p2"}} {
			if r := admin.Do(t, "POST", "/v1/nodes", n); r.Status != http.StatusCreated {
				t.Fatalf("create %v with the admin's token: %d %s", n["name"], r.Status, r.Body)
			}
		}

		// A project member, its project by name: its token sees its nodes only.
		r = login(t, srv, "alice", "alice-password", map[string]any{"project": map[string]any{"name": "p1", "domain": map[string]any{"id": "default"}}})
		if r.Status != http.StatusCreated {
			t.Fatalf("alice's sign-in: %d %s", r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, &tok); err != nil {
			t.Fatal(err)
		}
		var roles []string
		for _, ro := range tok.Token.Roles {
			roles = append(roles, ro.Name)
		}
		if tok.Token.Project.ID != "p1" || tok.Token.Project.Name != "p1" || slices.Contains(roles, "admin") || !slices.Contains(roles, "member") {
			t.Errorf("alice's token: project %+v, roles %v", tok.Token.Project, roles)
		}
		alice := srv.Client()
		alice.Header.Set("X-Auth-Token", r.Header.Get("X-Subject-Token"))
		r = alice.Do(t, "GET", "/v1/nodes", nil)
		if r.Status != 200 || !strings.Contains(string(r.Body), "kn-p1") || strings.Contains(string(r.Body), "kn-p2") {
			t.Errorf("alice's node list: %d %s", r.Status, r.Body)
		}
		// No scope named: the user's only project.
		if r = login(t, srv, "carol", "carol-password", nil); r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"id":"p2"`) {
			t.Errorf("carol's unscoped sign-in: %d %s", r.Status, r.Body)
		}

		// Refusals, in Keystone's shape.
		keystoneError(t, login(t, srv, "alice", "wrong", nil), http.StatusUnauthorized)
		keystoneError(t, login(t, srv, "nobody", "wrong", nil), http.StatusUnauthorized)
		keystoneError(t, login(t, srv, "alice", "alice-password", map[string]any{"project": map[string]any{"name": "p2"}}), http.StatusUnauthorized)
		keystoneError(t, login(t, srv, "alice", "alice-password", map[string]any{"system": map[string]any{"all": true}}), http.StatusUnauthorized)
		keystoneError(t, login(t, srv, "alice", "alice-password", map[string]any{"domain": map[string]any{"name": "Default"}}), http.StatusUnauthorized)
		keystoneError(t, login(t, srv, "alice", "alice-password", map[string]any{"project": map[string]any{"name": "p1", "domain": map[string]any{"name": "Other"}}}), http.StatusUnauthorized)
		if msg := keystoneError(t, c.Do(t, "POST", "/identity/v3/auth/tokens", "{"), http.StatusBadRequest); !strings.Contains(msg, "auth") {
			t.Errorf("a broken body: %q does not name auth", msg)
		}
		if msg := keystoneError(t, login(t, srv, "alice", "alice-password", map[string]any{"project": map[string]any{}}), http.StatusBadRequest); !strings.Contains(msg, "auth.scope.project") {
			t.Errorf("a project scope without a project: %q", msg)
		}
		token := map[string]any{"auth": map[string]any{"identity": map[string]any{"methods": []string{"token"}, "token": map[string]any{"id": "x"}}}}
		keystoneError(t, c.Do(t, "POST", "/identity/v3/auth/tokens", token), http.StatusUnauthorized)

		// An account that must change its password first gets no token.
		if err := srv.DB.User.Update().Where(user.Name("carol")).SetMustChangePassword(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if msg := keystoneError(t, login(t, srv, "carol", "carol-password", nil), http.StatusForbidden); !strings.Contains(msg, "password") {
			t.Errorf("must change password: %q", msg)
		}

		// Each sign-in's token stays until it expires; the next sign-in
		// drops the user's expired ones, and only those.
		pAlice := &policies.Principal{User: "alice", Project: "p1", Roles: policies.ExpandRoles([]string{"member"}), Method: "password"}
		if _, _, err := srv.IDs.LoginToken(ctx, pAlice, time.Nanosecond, keystone.TokenDescription); err != nil {
			t.Fatal(err)
		}
		count := func() (all, expired int) {
			ts, err := srv.IDs.ListTokens(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				if tk.Description != keystone.TokenDescription {
					t.Errorf("token %s: description %q", tk.UUID, tk.Description)
				}
				all++
				if tk.ExpiresAt != nil && tk.ExpiresAt.Before(time.Now()) {
					expired++
				}
			}
			return all, expired
		}
		if all, expired := count(); all != 2 || expired != 1 {
			t.Fatalf("before the sign-in: %d tokens, %d expired; want 2, 1", all, expired)
		}
		if r = login(t, srv, "alice", "alice-password", nil); r.Status != http.StatusCreated {
			t.Fatalf("alice's second sign-in: %d %s", r.Status, r.Body)
		}
		if all, expired := count(); all != 2 || expired != 0 {
			t.Errorf("after the sign-in: %d tokens, %d expired; want 2, 0", all, expired)
		}
	})
}
