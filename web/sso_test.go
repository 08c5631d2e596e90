package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/internal/oidctest"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/oidclogin"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPortalSSO signs in to the portal through zitadel's OpenID provider
// on loopback: the portal's redirect, the provider's form, the callback,
// and a session whose roles came from the groups claim.
// ssoServer starts Anvil with zitadel's OpenID provider on loopback whose
// user carries groups; it returns the server, the provider's URL and the
// user's name there.
func ssoServer(t *testing.T, setting string, groups []string) (srv *servertest.Server, opURL, user string) {
	t.Helper()
	srv = servertest.Start(t, server.Options{Database: setting})
	opSrv := httptest.NewServer(nil)
	t.Cleanup(opSrv.Close)
	redirect := srv.URL + "/auth/oidc/callback"
	opSrv.Config.Handler = oidctest.Handler(opSrv.URL, "anvil-portal", "portal-secret", redirect,
		groups, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, err := oidclogin.New(context.Background(), oidclogin.Config{Issuer: opSrv.URL, ClientID: "anvil-portal", ClientSecret: "portal-secret", RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	srv.Portal.SSO = p
	host := strings.Split(strings.Split(opSrv.URL, "://")[1], ":")[0]
	return srv, opSrv.URL, "test-user@" + host
}

// ssoSignIn walks b through the provider's pages as a browser would and
// returns the callback URL the provider sent it back to.
func ssoSignIn(t *testing.T, srv *servertest.Server, b *browser, opURL, user string) string {
	t.Helper()
	redirect := srv.URL + "/auth/oidc/callback"
	st, _, h := b.do("GET", "/auth/oidc/login", nil)
	if st != 303 || !strings.HasPrefix(h.Get("Location"), opURL) {
		t.Fatalf("SSO start: %d %s", st, h.Get("Location"))
	}
	op := &http.Client{}
	resp, err := op.Get(h.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := regexp.MustCompile(`name="id" value="([^"]+)"`).FindSubmatch(form)
	if id == nil {
		t.Fatalf("no provider login form:\n%s", form)
	}
	noFollow := &http.Client{CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err = noFollow.PostForm(opURL+"/login/username", url.Values{"id": {string(id[1])}, "username": {user}, "password": {oidctest.Password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back := resp.Header.Get("Location")
	if !strings.HasPrefix(back, redirect) {
		t.Fatalf("provider sent the browser to %q", back)
	}
	if st, _, h := b.do("GET", strings.TrimPrefix(back, srv.URL), nil); st != 303 || h.Get("Location") != "/nodes" {
		t.Fatalf("callback: %d %s", st, h.Get("Location"))
	}
	return back
}

// TestPortalSSO signs in to the portal through zitadel's OpenID provider
// on loopback: the portal's redirect, the provider's form, the callback,
// and a session whose roles came from the groups claim.
func TestPortalSSO(t *testing.T) {
	srv, opURL, user := ssoServer(t, storetest.Setting(t, "sqlite"), []string{"anvil:project:blue:reader"})
	b := newBrowser(t, srv.URL)
	_, page, _ := b.do("GET", "/login", nil)
	if !strings.Contains(page, "Sign in with SSO") {
		t.Fatal("no SSO button on the login page")
	}
	// A callback without the state this browser was given is refused.
	if st, _, h := b.do("GET", "/auth/oidc/callback?code=x&state=forged", nil); st != 303 || !strings.Contains(h.Get("Location"), "state") {
		t.Fatalf("forged callback: %d %s", st, h.Get("Location"))
	}
	back := ssoSignIn(t, srv, b, opURL, user)
	st, page, _ := b.do("GET", "/nodes", nil)
	if st != 200 || !strings.Contains(page, user+" · project blue") {
		t.Fatalf("after SSO: %d\n%s", st, page)
	}
	// Replaying the same callback in another browser does not sign it in.
	other := newBrowser(t, srv.URL)
	other.do("GET", "/login", nil)
	if st, _, _ := other.do("GET", strings.TrimPrefix(back, srv.URL), nil); st != 303 {
		t.Fatalf("replayed callback: %d", st)
	}
	if st, _, _ := other.do("GET", "/nodes", nil); st != 303 {
		t.Fatal("a replayed callback signed another browser in")
	}
	// Logging out ends the SSO session on the server too.
	cookie := b.cookie()
	b.do("POST", "/logout", url.Values{"csrf": {b.csrf}})
	if st, _, h := replay(t, srv.URL, cookie).do("GET", "/nodes", nil); st != 303 || !strings.HasPrefix(h.Get("Location"), "/login?error=expired") {
		t.Fatalf("SSO cookie replayed after logout: %d %s", st, h.Get("Location"))
	}
}

// TestSSOUserIsNotTheLocalAccount: an SSO identity whose name equals a
// local system admin's signs in as a system reader. It must not mint an
// admin token (the local account's roles), see the local account's
// tokens, or revoke them.
func TestSSOUserIsNotTheLocalAccount(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv, opURL, user := ssoServer(t, setting, []string{"anvil:system:reader"})
		if err := srv.IDs.CreateUser(ctx, user, "local-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, user, identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"}); err != nil {
			t.Fatal(err)
		}
		_, local, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: user, Scope: identity.Scope{System: true}, Roles: []string{"admin"}, Description: "local-only"})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		ssoSignIn(t, srv, b, opURL, user)
		st, page, _ := b.do("GET", "/account", nil)
		if st != 200 || strings.Contains(page, local.UUID) || strings.Contains(page, "local-only") {
			t.Fatalf("the SSO user sees the local account's tokens: %d\n%s", st, page)
		}
		for _, roles := range []string{"admin", "reader"} {
			_, page, _ = b.do("POST", "/account/tokens", url.Values{"csrf": {b.csrf}, "roles": {roles}}, "HX-Request", "true")
			if regexp.MustCompile(`data-testid="new-token">anvil_`).MatchString(page) || !strings.Contains(page, "SSO identity") {
				t.Fatalf("the SSO user minted a %s token:\n%s", roles, page)
			}
		}
		b.do("POST", "/account/tokens/"+local.UUID+"/revoke", url.Values{"csrf": {b.csrf}}, "HX-Request", "true")
		ts, err := srv.IDs.ListTokens(ctx, user)
		if err != nil || len(ts) != 1 || ts[0].RevokedAt != nil {
			t.Fatalf("the local account's tokens after the SSO user's revoke: %+v, %v", ts, err)
		}
	})
}
