package web_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// browser is an HTTP client with cookies that remembers the last CSRF
// token a page showed it, as a person's browser would.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, header ...string) (int, string, http.Header) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if m := csrfField.FindStringSubmatch(string(raw)); m != nil {
		b.csrf = m[1]
	}
	return resp.StatusCode, string(raw), resp.Header
}

func (b *browser) cookie() string {
	u, _ := url.Parse(b.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "anvil_session" {
			return c.Value
		}
	}
	return ""
}

func TestPortalSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		ids := srv.IDs
		if err := ids.CreateUser(ctx, "pat", "pat-password-1"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"blue", "green"} {
			if err := ids.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: p}, Role: "manager"}); err != nil {
				t.Fatal(err)
			}
		}
		admin := srv.Client()
		if err := ids.CreateUser(ctx, "root", "root-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := ids.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := ids.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		admin.Header.Set("X-Auth-Token", tok)
		for _, n := range []map[string]any{{"name": "blue-1", "driver": "fake", "owner": "blue"}, {"name": "green-1", "driver": "fake", "lessee": "green"}} {
			if r := admin.Do(t, "POST", "/v1/nodes", n); r.Status != 201 {
				t.Fatalf("create: %d %s", r.Status, r.Body)
			}
		}

		b := newBrowser(t, srv.URL)
		// Unauthenticated pages send the browser to the login form; API
		// clients at / still get version discovery.
		if st, _, h := b.do("GET", "/nodes", nil); st != 303 || h.Get("Location") != "/login?next=%2Fnodes" {
			t.Fatalf("GET /nodes signed out: %d %s", st, h.Get("Location"))
		}
		if r := srv.Client().Do(t, "GET", "/", nil); r.Status != 200 || !strings.Contains(string(r.Body), "versions") {
			t.Fatalf("GET / for API clients: %d %s", r.Status, r.Body)
		}
		st, page, _ := b.do("GET", "/login", nil)
		if st != 200 || !strings.Contains(page, "Sign in to Anvil") || b.csrf == "" {
			t.Fatalf("login page: %d", st)
		}
		anon := b.cookie()

		// Without the CSRF token the login is refused, even with the right password.
		if st, _, _ := b.do("POST", "/login", url.Values{"username": {"pat"}, "password": {"pat-password-1"}}); st != 403 {
			t.Fatalf("login without CSRF: %d", st)
		}
		if st, page, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"wrong-password"}}); st != 401 || !strings.Contains(page, "invalid username or password") {
			t.Fatalf("bad password: %d", st)
		}
		if st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}}); st != 303 || h.Get("Location") != "/nodes" {
			t.Fatalf("login: %d %s", st, h.Get("Location"))
		}
		if b.cookie() == anon {
			t.Fatal("the session cookie did not change at login (fixation)")
		}
		st, page, _ = b.do("GET", "/nodes", nil)
		if st != 200 || !strings.Contains(page, "pat · project blue") || !strings.Contains(page, "blue-1") || strings.Contains(page, "green-1") {
			t.Fatalf("nodes page as blue: %d\n%s", st, page)
		}

		// The project switcher: to a project the user belongs to, and not
		// to one it does not.
		if st, _, _ := b.do("POST", "/scope", url.Values{"csrf": {b.csrf}, "scope": {"project:red"}}); st != 403 {
			t.Fatalf("switch to a foreign project: %d", st)
		}
		if st, _, _ := b.do("POST", "/scope", url.Values{"csrf": {b.csrf}, "scope": {"project:green"}}); st != 303 {
			t.Fatalf("switch: %d", st)
		}
		if _, page, _ = b.do("GET", "/nodes", nil); !strings.Contains(page, "green-1") || strings.Contains(page, "blue-1") {
			t.Fatalf("nodes page as green:\n%s", page)
		}

		// Tokens minted in the portal work on the API and can be revoked there.
		st, page, _ = b.do("POST", "/account/tokens", url.Values{"csrf": {b.csrf}, "roles": {"member"}, "expires": {"24h"}, "description": {"ci"}}, "HX-Request", "true")
		m := regexp.MustCompile(`data-testid="new-token">(anvil_[^<]+)<`).FindStringSubmatch(page)
		if st != 200 || m == nil {
			t.Fatalf("create token: %d\n%s", st, page)
		}
		api := srv.Client()
		api.Header.Set("X-Auth-Token", m[1])
		if r := api.Do(t, "GET", "/v1/nodes", nil); r.Status != 200 || !strings.Contains(string(r.Body), "green-1") || strings.Contains(string(r.Body), "blue-1") {
			t.Fatalf("portal token on the API: %d %s", r.Status, r.Body)
		}
		if _, page, _ = b.do("POST", "/account/tokens", url.Values{"csrf": {b.csrf}, "roles": {"admin"}}, "HX-Request", "true"); !strings.Contains(page, "does not hold role admin") {
			t.Fatalf("token with a role not held:\n%s", page)
		}
		id := regexp.MustCompile(`data-token="([^"]+)"`).FindStringSubmatch(page)
		if id == nil {
			t.Fatal("token row missing")
		}
		if st, _, _ := b.do("POST", "/account/tokens/"+id[1]+"/revoke", url.Values{"csrf": {b.csrf}}, "HX-Request", "true"); st != 200 {
			t.Fatalf("revoke: %d", st)
		}
		if r := api.Do(t, "GET", "/v1/nodes", nil); r.Status != 401 {
			t.Fatalf("revoked portal token: %d", r.Status)
		}

		// A tampered cookie is an anonymous visitor.
		u, _ := url.Parse(srv.URL)
		forged := newBrowser(t, srv.URL)
		c := b.cookie()
		forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "anvil_session", Value: c[:len(c)-4] + "AAAA"}})
		if st, _, _ := forged.do("GET", "/nodes", nil); st != 303 {
			t.Fatalf("tampered cookie: %d", st)
		}

		// Losing every role ends the session on the next request.
		if err := ids.Revoke(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: "green"}, Role: "manager"}); err != nil {
			t.Fatal(err)
		}
		if st, _, _ := b.do("GET", "/nodes", nil); st != 303 {
			t.Fatalf("session survived losing its scope's role: %d", st)
		}

		// Logout clears the cookie.
		b2 := newBrowser(t, srv.URL)
		b2.do("GET", "/login", nil)
		b2.do("POST", "/login", url.Values{"csrf": {b2.csrf}, "username": {"root"}, "password": {"root-password-1"}})
		if st, page, _ := b2.do("GET", "/nodes", nil); st != 200 || !strings.Contains(page, "root · system") {
			t.Fatalf("system login: %d", st)
		}
		if st, _, _ := b2.do("POST", "/logout", url.Values{"csrf": {b2.csrf}}); st != 303 {
			t.Fatalf("logout: %d", st)
		}
		if b2.cookie() != "" {
			t.Fatal("logout left the session cookie")
		}
	})
}

func TestStaticAssetsAreHashedAndCached(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	b := newBrowser(t, srv.URL)
	_, page, _ := b.do("GET", "/login", nil)
	m := regexp.MustCompile(`href="(/static/[0-9a-f]{12}/anvil\.css)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no hashed stylesheet link:\n%s", page)
	}
	st, css, h := b.do("GET", m[1], nil)
	if st != 200 || !strings.Contains(h.Get("Cache-Control"), "immutable") || !strings.Contains(css, "font") {
		t.Fatalf("stylesheet: %d %q", st, h.Get("Cache-Control"))
	}
	if st, _, _ := b.do("GET", "/static/000000000000/anvil.css", nil); st != 404 {
		t.Errorf("a stale hash answered %d", st)
	}
}

func TestNodeListPages(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	tok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	for i := 0; i < 60; i++ {
		api.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("pg-%02d", i), "driver": "fake"})
	}
	b := newBrowser(t, srv.URL)
	b.do("GET", "/login", nil)
	b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"root"}, "password": {"root-password-1"}})
	_, page, _ := b.do("GET", "/nodes", nil)
	next := regexp.MustCompile(`href="(/nodes\?page=2)" rel="next"`).FindStringSubmatch(page)
	if strings.Count(page, "<tr data-node=") != 50 || next == nil || !strings.Contains(page, "pg-49") || strings.Contains(page, "pg-50") ||
		!strings.Contains(page, "1–50 of 60") {
		t.Fatalf("first page: %d rows, next %v", strings.Count(page, "<tr data-node="), next)
	}
	_, page, _ = b.do("GET", next[1], nil)
	if strings.Count(page, "<tr data-node=") != 10 || strings.Contains(page, `rel="next"`) || !strings.Contains(page, "pg-59") ||
		!strings.Contains(page, "51–60 of 60") || !strings.Contains(page, `href="/nodes" rel="prev"`) {
		t.Errorf("second page: %d rows", strings.Count(page, "<tr data-node="))
	}
}

// replay is a new browser that carries only a captured session cookie.
func replay(t *testing.T, base, cookie string) *browser {
	r := newBrowser(t, base)
	u, _ := url.Parse(base)
	r.c.Jar.SetCookies(u, []*http.Cookie{{Name: "anvil_session", Value: cookie}})
	return r
}

// TestSessionsEndOnTheServer: a copy of a session cookie stops working
// once its session ends, by logout, a password change, a revoked role or
// a deleted account, on SQLite and PostgreSQL.
func TestSessionsEndOnTheServer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		ids := srv.IDs
		ends := map[string]func(b *browser, name string){
			"logout": func(b *browser, _ string) {
				if st, _, _ := b.do("POST", "/logout", url.Values{"csrf": {b.csrf}}); st != 303 {
					t.Fatalf("logout: %d", st)
				}
			},
			"set-password": func(_ *browser, name string) {
				if err := ids.SetPassword(ctx, name, "another-password-2"); err != nil {
					t.Fatal(err)
				}
			},
			"revoke": func(_ *browser, name string) {
				// A role outside the scope the session acts in: the session ends anyway.
				if err := ids.Revoke(ctx, name, identity.Assignment{Scope: identity.Scope{Project: "green"}, Role: "reader"}); err != nil {
					t.Fatal(err)
				}
			},
			"delete": func(_ *browser, name string) {
				if err := ids.DeleteUser(ctx, name); err != nil {
					t.Fatal(err)
				}
			},
		}
		for how, end := range ends {
			name := "user-" + how
			if err := ids.CreateUser(ctx, name, "first-password-1"); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"blue", "green"} {
				if err := ids.Grant(ctx, name, identity.Assignment{Scope: identity.Scope{Project: p}, Role: "reader"}); err != nil {
					t.Fatal(err)
				}
			}
			b := newBrowser(t, srv.URL)
			b.do("GET", "/login", nil)
			if st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {name}, "password": {"first-password-1"}}); st != 303 {
				t.Fatalf("%s: login: %d", how, st)
			}
			b.do("GET", "/nodes", nil) // for the signed-in session's CSRF token
			cookie := b.cookie()
			if st, _, _ := replay(t, srv.URL, cookie).do("GET", "/nodes", nil); st != 200 {
				t.Fatalf("%s: the captured cookie does not work before: %d", how, st)
			}
			end(b, name)
			if st, _, h := replay(t, srv.URL, cookie).do("GET", "/nodes", nil); st != 303 || !strings.HasPrefix(h.Get("Location"), "/login?error=expired") {
				t.Errorf("%s: the captured cookie still works: %d %s", how, st, h.Get("Location"))
			}
		}
	})
}

// TestLoginErrorCodes: the login page shows fixed messages for known
// codes and nothing of an unknown one.
func TestLoginErrorCodes(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	b := newBrowser(t, srv.URL)
	if _, page, _ := b.do("GET", "/login?error=norole", nil); !strings.Contains(page, "holds no Anvil role") {
		t.Errorf("known code: no message\n%s", page)
	}
	_, page, _ := b.do("GET", "/login?error="+url.QueryEscape("Your password expired; call +1-555-0100"), nil)
	if strings.Contains(page, "555-0100") || strings.Contains(page, `class="error"`) {
		t.Errorf("an unknown code's text was shown:\n%s", page)
	}
}

// TestLoginThrottleBehindProxy: behind a trusted proxy the throttle keys
// on the address the proxy saw, so one guessing address does not lock
// the account's owner out elsewhere; the message says how long to wait
// and reads the same for an unknown account; without a trusted proxy a
// forged X-Forwarded-For changes nothing; a burst over HTTP Basic reaches
// the password check only as often as the limit allows.
func TestLoginThrottleBehindProxy(t *testing.T) {
	ctx := context.Background()
	_, loopback, _ := net.ParseCIDR("127.0.0.1/32")
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), TrustedProxies: []net.IPNet{*loopback}})
	if err := srv.IDs.CreateUser(ctx, "pat", "pat-password-1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "reader"}); err != nil {
		t.Fatal(err)
	}
	login := func(from, name, pw string) (int, string) {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		st, page, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {name}, "password": {pw}}, "X-Forwarded-For", from)
		return st, page
	}
	wait := regexp.MustCompile(`too many failed sign-in attempts; try again in \d+ minutes`)
	var msgs []string
	for _, name := range []string{"pat", "nobody-here"} {
		for range 5 {
			if st, _ := login("203.0.113.5", name, "wrong-password"); st != 401 {
				t.Fatalf("%s: a failure answered %d", name, st)
			}
		}
		st, page := login("203.0.113.5", name, "pat-password-1")
		m := wait.FindString(page)
		if st != 429 || m == "" {
			t.Fatalf("%s after 5 failures: %d\n%s", name, st, page)
		}
		msgs = append(msgs, m)
	}
	if msgs[0] != msgs[1] {
		t.Errorf("the lockout reads differently for a real account (%q) and an unknown one (%q)", msgs[0], msgs[1])
	}
	if st, _ := login("203.0.113.6", "pat", "pat-password-1"); st != 303 {
		t.Errorf("the owner from another address: %d", st)
	}

	// Without a trusted proxy, a client rotating X-Forwarded-For is
	// still one address.
	direct := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	direct.IDs.CreateUser(ctx, "pat", "pat-password-1")
	direct.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "reader"})
	srv = direct
	for i := range 5 {
		login(fmt.Sprintf("198.51.100.%d", i), "pat", "wrong-password")
	}
	if st, _ := login("198.51.100.99", "pat", "pat-password-1"); st != 429 {
		t.Errorf("forged X-Forwarded-For escaped the throttle: %d", st)
	}

	// A burst of 40 wrong passwords over HTTP Basic.
	direct.IDs.CreateUser(ctx, "lee", "lee-password-1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]int{}
	for range 40 {
		wg.Go(func() {
			c := direct.Client()
			c.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("lee:wrong-password")))
			st := c.Do(t, "GET", "/v1/nodes", nil).Status
			mu.Lock()
			got[st]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got[401] != 5 || got[429] != 35 {
		t.Errorf("40 parallel Basic failures: %v; want 5 checked, 35 refused", got)
	}
}

// TestPortalSecurityHeaders: every portal page forbids framing, sniffing
// and inline script or style, and carries nothing the policy would
// block: no inline <script>, style attribute or event handler attribute.
func TestPortalSecurityHeaders(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "admin"})
	tok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "n1", "driver": "fake", "owner": "blue"})
	if r.Status != 201 {
		t.Fatalf("create node: %d %s", r.Status, r.Body)
	}
	uuid, _ := r.JSON(t)["uuid"].(string)
	b := newBrowser(t, srv.URL)
	b.do("GET", "/login", nil)
	b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"root"}, "password": {"root-password-1"}})
	scripts := regexp.MustCompile(`(?i)<script[^>]*>[^<]*</script>`)
	inline := regexp.MustCompile(`(?i)<style|\sstyle=|\son[a-z]+=|hx-on|javascript:`)
	for _, path := range []string{"/login?error=state", "/nodes", "/nodes/" + uuid, "/runbooks", "/runbooks/new", "/account", "/admin/policy", "/allocations/new"} {
		st, page, h := b.do("GET", path, nil)
		if path == "/login?error=state" {
			st, page, h = newBrowser(t, srv.URL).do("GET", path, nil)
		}
		if st != 200 {
			t.Errorf("%s: %d", path, st)
			continue
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
			t.Errorf("%s: headers %v", path, h)
		}
		if m := inline.FindString(page); m != "" {
			t.Errorf("%s: %q would be blocked by the Content-Security-Policy", path, m)
		}
		if strings.Count(page, "<script") != len(scripts.FindAllString(page, -1)) {
			t.Errorf("%s: a script element the test cannot read", path)
		}
		for _, sc := range scripts.FindAllString(page, -1) {
			if !strings.Contains(sc, ` src="/static/`) || !strings.HasSuffix(sc, "></script>") {
				t.Errorf("%s: inline script %q", path, sc)
			}
		}
	}
}

// TestPortalPolish: the main navigation marks the section a page belongs
// to; instants are machine-readable UTC; UUIDs and a new token carry the
// text their Copy button takes; an error page answering an htmx request
// carries the message anvil.js shows.
func TestPortalPolish(t *testing.T) {
	srv := withMember(t)
	ctx := context.Background()
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "pat", Scope: identity.Scope{Project: "blue"}, Roles: []string{"member"}, Expires: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	rootTok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	admin := srv.Client()
	admin.Header.Set("X-Auth-Token", rootTok)
	var uuids []string
	for _, n := range []map[string]any{{"name": "blue-1", "driver": "fake", "owner": "blue"}, {"name": "red-1", "driver": "fake", "owner": "red"}} {
		r := admin.Do(t, "POST", "/v1/nodes", n)
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		uuids = append(uuids, r.JSON(t)["uuid"].(string))
	}
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	api.Do(t, "GET", "/v1/nodes", nil) // the token's last use
	b := newBrowser(t, srv.URL)
	b.do("GET", "/login", nil)
	b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}})
	current := regexp.MustCompile(`aria-current="page">([^<]+)<`)
	for _, c := range []struct {
		method, path string
		form         url.Values
		status       int
		want         string
	}{
		{"GET", "/nodes", nil, 200, "Nodes"},
		{"GET", "/nodes/" + uuids[0], nil, 200, "Nodes"},
		{"GET", "/nodes/" + uuids[1], nil, 404, "Nodes"},
		{"POST", "/nodes/bulk", url.Values{"action": {"power"}, "node": {uuids[0]}}, 200, "Nodes"},
		// A member may not write runbooks: the editor's refusal is still under Runbooks.
		{"GET", "/runbooks/new", nil, 403, "Runbooks"},
		{"GET", "/allocations/new", nil, 200, "Request a node"},
		{"GET", "/allocations", nil, 200, "My allocations"},
		// The request form shown again with its error, at /allocations.
		{"POST", "/allocations", url.Values{"resource_class": {"no-such-class"}}, 0, "Request a node"},
		{"GET", "/account", nil, 200, "API tokens"},
	} {
		if c.form != nil {
			c.form.Set("csrf", b.csrf)
		}
		st, page, _ := b.do(c.method, c.path, c.form)
		m := current.FindAllStringSubmatch(page, -1)
		if c.status != 0 && st != c.status || len(m) != 1 || m[0][1] != c.want {
			t.Errorf("%s %s: %d, current %v, want %s", c.method, c.path, st, m, c.want)
		}
	}

	_, page, _ := b.do("GET", "/account", nil)
	stamp := regexp.MustCompile(`<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC</time>`)
	times := stamp.FindAllStringSubmatch(page, -1)
	if len(times) != 3 { // created, expires, last used
		t.Fatalf("token times: %v\n%s", times, page)
	}
	for _, m := range times {
		if strings.Replace(strings.TrimSuffix(m[1], "Z"), "T", " ", 1) != m[2] {
			t.Errorf("the datetime %s and the text %s differ", m[1], m[2])
		}
	}
	_, page, _ = b.do("POST", "/account/tokens", url.Values{"csrf": {b.csrf}, "roles": {"member"}}, "HX-Request", "true")
	if !regexp.MustCompile(`<code data-copy="(anvil_[^"]+)" data-copy-what="the new token" data-testid="new-token">anvil_`).MatchString(page) {
		t.Errorf("the new token has no copy text:\n%s", page)
	}
	_, page, _ = b.do("GET", "/nodes", nil)
	if !strings.Contains(page, `<span class="row-copy" data-copy="`+uuids[0]+`" data-copy-what="UUID of blue-1"></span>`) {
		t.Errorf("the list's UUID has no copy text")
	}

	// Another project's node from an htmx button: the 404 page's message.
	st, page, _ := b.do("POST", "/nodes/"+uuids[1]+"/power", url.Values{"target": {"power on"}}, "HX-Request", "true", "X-CSRF-Token", b.csrf)
	if st != 404 || !regexp.MustCompile(`<p data-error-message>[^<]+</p>`).MatchString(page) || strings.Contains(page, "red-1") {
		t.Errorf("htmx POST to a hidden node: %d\n%s", st, page)
	}
}
