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
	"github.com/anvilproject/anvil/server/oidclogin"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPortalSSO signs in to the portal through zitadel's OpenID provider
// on loopback: the portal's redirect, the provider's form, the callback,
// and a session whose roles came from the groups claim.
func TestPortalSSO(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	opSrv := httptest.NewServer(nil)
	defer opSrv.Close()
	redirect := srv.URL + "/auth/oidc/callback"
	opSrv.Config.Handler = oidctest.Handler(opSrv.URL, "anvil-portal", "portal-secret", redirect,
		[]string{"anvil:project:blue:reader"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, err := oidclogin.New(ctx, oidclogin.Config{Issuer: opSrv.URL, ClientID: "anvil-portal", ClientSecret: "portal-secret", RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	srv.Portal.SSO = p

	b := newBrowser(t, srv.URL)
	_, page, _ := b.do("GET", "/login", nil)
	if !strings.Contains(page, "Sign in with SSO") {
		t.Fatal("no SSO button on the login page")
	}
	// A callback without the state this browser was given is refused.
	if st, _, h := b.do("GET", "/auth/oidc/callback?code=x&state=forged", nil); st != 303 || !strings.Contains(h.Get("Location"), "state") {
		t.Fatalf("forged callback: %d %s", st, h.Get("Location"))
	}

	st, _, h := b.do("GET", "/auth/oidc/login", nil)
	if st != 303 || !strings.HasPrefix(h.Get("Location"), opSrv.URL) {
		t.Fatalf("SSO start: %d %s", st, h.Get("Location"))
	}
	// The provider's pages, followed as a browser would.
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
	host := strings.Split(strings.Split(opSrv.URL, "://")[1], ":")[0]
	noFollow := &http.Client{CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err = noFollow.PostForm(opSrv.URL+"/login/username", url.Values{"id": {string(id[1])}, "username": {"test-user@" + host}, "password": {"verysecure"}})
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
	st, page, _ = b.do("GET", "/nodes", nil)
	if st != 200 || !strings.Contains(page, "test-user@"+host+" · project blue") {
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
}
