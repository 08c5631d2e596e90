package oidclogin

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/anvilproject/anvil/internal/oidctest"
	"github.com/anvilproject/anvil/server/identity"
)

// TestCodeFlowAgainstRealProvider runs zitadel's OpenID provider on
// loopback and signs in through it: authorization code, PKCE, state,
// nonce, ID token verification and userinfo.
func TestCodeFlowAgainstRealProvider(t *testing.T) {
	ctx := context.Background()
	opSrv := httptest.NewUnstartedServer(nil)
	opSrv.Start()
	defer opSrv.Close()
	issuer := opSrv.URL

	codes := make(chan url.Values, 1)
	rp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		codes <- r.URL.Query()
		io.WriteString(w, "ok")
	}))
	defer rp.Close()
	redirect := rp.URL + "/auth/oidc/callback"
	opSrv.Config.Handler = oidctest.Handler(issuer, "anvil-test", "anvil-secret", redirect,
		[]string{"anvil:project:blue:member", "anvil:system:reader", "unrelated"}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	p, err := New(ctx, Config{Issuer: issuer, ClientID: "anvil-test", ClientSecret: "anvil-secret", RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	const state, nonce = "state-123", "nonce-456"
	verifier := oauth2Verifier()
	start, err := p.AuthCodeURL(state, nonce, verifier)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(start, "code_challenge_method=S256") || !strings.Contains(start, "nonce="+nonce) {
		t.Fatalf("authorization URL lacks PKCE or nonce: %s", start)
	}

	// The browser: follow redirects to the provider's login form, sign in,
	// and land on the callback with a code. The example provider keeps no
	// single sign-on session, so every sign-in shows the form.
	host := strings.Split(strings.Split(issuer, "://")[1], ":")[0]
	signIn := func() url.Values {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar}
		resp, err := browser.Get(start)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no login form at %s:\n%s", resp.Request.URL, page)
		}
		resp, err = browser.PostForm(issuer+"/login/username", url.Values{"id": {string(m[1])}, "username": {"test-user@" + host}, "password": {"verysecure"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case back := <-codes:
			if back.Get("state") != state || back.Get("code") == "" {
				t.Fatalf("callback query %v", back)
			}
			return back
		case <-time.After(5 * time.Second):
			t.Fatal("the provider never redirected back")
		}
		return nil
	}

	if _, err := p.Exchange(ctx, signIn().Get("code"), verifier, "another-nonce"); err == nil {
		t.Fatal("a wrong nonce was accepted")
	}
	if _, err := p.Exchange(ctx, signIn().Get("code"), oauth2Verifier(), nonce); err == nil {
		t.Fatal("a wrong PKCE verifier was accepted")
	}
	back := signIn()
	if _, err := p.Exchange(ctx, "forged-code", verifier, nonce); err == nil {
		t.Fatal("a forged code was accepted")
	}
	u, err := p.Exchange(ctx, back.Get("code"), verifier, nonce)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "test-user@"+host || u.Subject == "" || u.Issuer == "" {
		t.Errorf("user %+v: want a name, the subject and the issuer", u)
	}
	as := u.Assignments
	want := []identity.Assignment{{Scope: identity.Scope{Project: "blue"}, Role: "member"}, {Scope: identity.Scope{System: true}, Role: "reader"}}
	if len(as) != 2 || as[0] != want[0] || as[1] != want[1] {
		t.Errorf("assignments %v, want %v", as, want)
	}
}

func oauth2Verifier() string { return oauth2.GenerateVerifier() }

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// issuer is a minimal OpenID issuer on loopback: discovery and a JWKS,
// so tokens can be signed with keys the test controls.
type issuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	is := &issuer{key: key}
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			json.NewEncoder(w).Encode(map[string]any{
				"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
				"authorization_endpoint": is.srv.URL + "/auth", "token_endpoint": is.srv.URL + "/token",
				"id_token_signing_alg_values_supported": []string{"RS256"},
			})
		case "/keys":
			json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func sign(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBearerJWTs(t *testing.T) {
	ctx := context.Background()
	is := newIssuer(t)
	p, err := New(ctx, Config{Issuer: is.srv.URL, ClientID: "anvil"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": is.srv.URL, "aud": "anvil", "sub": "u-1", "preferred_username": "ada",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nonce": "n-1",
			"groups": []string{"anvil:project:p1:member", "anvil:system:reader", "junk", "anvil:project:p2:bogusrole", "anvil:project::admin"}}
		if mod != nil {
			mod(c)
		}
		return c
	}
	good := sign(t, is.key, claims(nil))
	pr, err := p.PrincipalFromJWT(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if pr.User != "ada" || pr.Issuer != is.srv.URL || pr.Subject != "u-1" || pr.Local() || !pr.System || !pr.HasRole("reader") || pr.HasRole("member") {
		t.Errorf("principal %+v", pr)
	}
	projectOnly := sign(t, is.key, claims(func(c map[string]any) { c["groups"] = []string{"anvil:project:p1:manager"} }))
	if pr, err := p.PrincipalFromJWT(ctx, projectOnly); err != nil || pr.Project != "p1" || !pr.HasRole("member") {
		t.Errorf("project principal %+v, %v", pr, err)
	}

	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + b64([]byte(`{"iss":"`+is.srv.URL+`","aud":"anvil","sub":"u-1","groups":["anvil:system:admin"]}`)) + "." + parts[2]
	for name, tok := range map[string]string{
		"tampered":       tampered,
		"expired":        sign(t, is.key, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })),
		"wrong audience": sign(t, is.key, claims(func(c map[string]any) { c["aud"] = "someone-else" })),
		"wrong issuer":   sign(t, is.key, claims(func(c map[string]any) { c["iss"] = "https://evil.example" })),
		"foreign key":    sign(t, other, claims(nil)),
		"not a jwt":      "abc.def.ghi",
	} {
		if _, err := p.PrincipalFromJWT(ctx, tok); err == nil {
			t.Errorf("%s token accepted", name)
		}
	}

	idt, err := p.disc.Load().verifier.Verify(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if checkNonce(idt, "n-1") != nil || checkNonce(idt, "n-2") == nil || checkNonce(idt, "") == nil {
		t.Error("nonce check is wrong")
	}
}

func TestParseGroups(t *testing.T) {
	got := ParseGroups([]string{"anvil:project:p1:member", "anvil:project:p1:member", "anvil:system:admin", "anvil:project:a b:reader", "anvil:system:root", "anvil:project:p2", "other:project:p3:admin"})
	if len(got) != 2 || got[0].Project != "p1" || !got[1].System || got[1].Role != "admin" {
		t.Errorf("ParseGroups = %v", got)
	}
	// Ironic's service role: separate from the ladder, so it grants itself only.
	svc := ParseGroups([]string{"anvil:project:metal3:service", "anvil:system:service"})
	if len(svc) != 2 || svc[0].Project != "metal3" || svc[0].Role != "service" || !svc[1].System || svc[1].Role != "service" {
		t.Errorf("ParseGroups(service) = %v", svc)
	}
	if p, err := Principal(identity.SSOUser{Name: "nova", Assignments: svc[:1]}, nil); err != nil || strings.Join(p.Roles, ",") != "service" || p.Project != "metal3" {
		t.Errorf("service principal = %+v, %v", p, err)
	}
	if _, err := Principal(identity.SSOUser{Name: "ada", Assignments: []identity.Assignment{{Scope: identity.Scope{Project: "a"}, Role: "member"}, {Scope: identity.Scope{Project: "b"}, Role: "member"}}}, nil); err == nil {
		t.Error("several projects without a choice got a principal")
	}
}
