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
	"time"

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
	srv, _, opSrv, user := ssoProvider(t, setting, groups)
	return srv, opSrv.URL, user
}

// ssoProvider is ssoServer with the provider itself, whose groups, grants
// and logout tokens a test drives, and its listener.
func ssoProvider(t *testing.T, setting string, groups []string) (srv *servertest.Server, op *oidctest.Provider, opSrv *httptest.Server, user string) {
	t.Helper()
	srv = servertest.Start(t, server.Options{Database: setting})
	opSrv = httptest.NewServer(nil)
	t.Cleanup(opSrv.Close)
	redirect := srv.URL + "/auth/oidc/callback"
	op = oidctest.New(opSrv.URL, "anvil-portal", "portal-secret", redirect,
		groups, slog.New(slog.NewTextHandler(io.Discard, nil)))
	opSrv.Config.Handler = op
	p, err := oidclogin.New(context.Background(), oidclogin.Config{Issuer: opSrv.URL, ClientID: "anvil-portal", ClientSecret: "portal-secret", RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	srv.Portal.SSO = p
	host := strings.Split(strings.Split(opSrv.URL, "://")[1], ":")[0]
	return srv, op, opSrv, "test-user@" + host
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

// signedOut asserts that b's next page is the sign-in page, saying the
// session ended.
func signedOut(t *testing.T, b *browser, why string) {
	t.Helper()
	if st, _, h := b.do("GET", "/nodes", nil); st != 303 || !strings.HasPrefix(h.Get("Location"), "/login?error=expired") {
		t.Fatalf("%s: the session goes on: %d %s", why, st, h.Get("Location"))
	}
}

// TestSSORolesFollowTheProvider: a role the provider takes away is gone
// from the portal session once its roles are due to be read again (here
// on every request), and losing the last one ends the session.
func TestSSORolesFollowTheProvider(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, op, opSrv, user := ssoProvider(t, setting, []string{"anvil:project:blue:reader", "anvil:project:green:reader"})
		srv.Portal.RolesMaxAge = time.Nanosecond
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		ssoSignIn(t, srv, b, opSrv.URL, user)
		// Each request refreshes; the rotated refresh token keeps working.
		for range 2 {
			if st, page, _ := b.do("GET", "/nodes", nil); st != 200 || !strings.Contains(page, "project green") {
				t.Fatalf("before the change: %d, green shown: %v", st, strings.Contains(page, "project green"))
			}
		}
		op.SetGroups("anvil:project:blue:reader")
		st, page, _ := b.do("GET", "/nodes", nil)
		if st != 200 || !strings.Contains(page, user+" · project blue") {
			t.Fatalf("after green was taken away: %d\n%s", st, page)
		}
		if strings.Contains(page, "project green") {
			t.Fatal("the session still offers the project the provider took away")
		}
		if st, _, _ := b.do("POST", "/scope", url.Values{"csrf": {b.csrf}, "scope": {"project:green"}}); st != 403 {
			t.Fatalf("switching to the project taken away: %d", st)
		}
		op.SetGroups()
		signedOut(t, b, "no role left at the provider")
	})
}

// TestSSORevokedGrantEndsSession: once the provider revokes the grant,
// the next refresh is refused and the session ends.
func TestSSORevokedGrantEndsSession(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, op, opSrv, user := ssoProvider(t, setting, []string{"anvil:project:blue:reader"})
		srv.Portal.RolesMaxAge = time.Nanosecond
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		ssoSignIn(t, srv, b, opSrv.URL, user)
		if st, _, _ := b.do("GET", "/nodes", nil); st != 200 {
			t.Fatalf("signed in: %d", st)
		}
		if err := op.RevokeGrants(); err != nil {
			t.Fatal(err)
		}
		signedOut(t, b, "grant revoked at the provider")
	})
}

// TestSSOProviderDownFailsClosed: roles due to be read again while the
// provider does not answer refuse the request rather than trust the old
// ones.
func TestSSOProviderDownFailsClosed(t *testing.T) {
	srv, _, opSrv, user := ssoProvider(t, storetest.Setting(t, "sqlite"), []string{"anvil:project:blue:reader"})
	srv.Portal.RolesMaxAge = time.Nanosecond
	b := newBrowser(t, srv.URL)
	b.do("GET", "/login", nil)
	ssoSignIn(t, srv, b, opSrv.URL, user)
	opSrv.Close()
	if st, page, _ := b.do("GET", "/nodes", nil); st != 503 || strings.Contains(page, "project blue") {
		t.Fatalf("provider down: %d\n%s", st, page)
	}
}

// TestSSOBackchannelLogout: a logout token the provider signed ends the
// user's sessions at once; forged or malformed ones are refused with 400
// and end nothing.
func TestSSOBackchannelLogout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, op, opSrv, user := ssoProvider(t, setting, []string{"anvil:project:blue:reader"})
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		ssoSignIn(t, srv, b, opSrv.URL, user)
		post := func(token string) int {
			t.Helper()
			resp, err := http.PostForm(srv.URL+"/auth/oidc/backchannel-logout", url.Values{"logout_token": {token}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		forged, err := op.ForgedLogoutToken(nil)
		if err != nil {
			t.Fatal(err)
		}
		refused := map[string]string{"signed with another key": forged, "empty": "", "garbage": "not.a.jwt"}
		for why, claims := range map[string]map[string]any{
			"no logout event":     {"events": nil},
			"another event":       {"events": map[string]any{"http://schemas.openid.net/event/other": map[string]any{}}},
			"a nonce":             {"nonce": "n"},
			"neither sub nor sid": {"sub": nil},
			"another audience":    {"aud": "someone-else"},
			"expired":             {"exp": time.Now().Add(-time.Hour).Unix()},
			"another issuer":      {"iss": "https://idp.example"},
		} {
			if refused[why], err = op.LogoutToken(claims); err != nil {
				t.Fatal(err)
			}
		}
		for why, tok := range refused {
			if st := post(tok); st != 400 {
				t.Errorf("logout token with %s: %d, want 400", why, st)
			}
		}
		if st, _, _ := b.do("GET", "/nodes", nil); st != 200 {
			t.Fatalf("a refused logout token ended the session: %d", st)
		}
		// A logout for another subject ends nobody else's session.
		other, _ := op.LogoutToken(map[string]any{"sub": "id2"})
		if st := post(other); st != 200 {
			t.Fatalf("logout of another subject: %d", st)
		}
		if st, _, _ := b.do("GET", "/nodes", nil); st != 200 {
			t.Fatalf("another subject's logout ended this session: %d", st)
		}
		good, _ := op.LogoutToken(nil)
		if st := post(good); st != 200 {
			t.Fatalf("valid logout token: %d", st)
		}
		signedOut(t, b, "back-channel logout")
	})
}
