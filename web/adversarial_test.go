package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/sessions"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/web"
)

// TestPortalCrossProjectIDs is the portal's standing adversarial table: a
// signed-in member of one project sends every form and htmx endpoint
// another project's ids. Each is refused as not found (or forbidden where
// the object is the caller's own but the act is not) and changes nothing.
func TestPortalCrossProjectIDs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		ids := srv.IDs
		for user, grant := range map[string]identity.Assignment{
			"root":    {Scope: identity.Scope{System: true}, Role: "admin"},
			"mallory": {Scope: identity.Scope{Project: "evil"}, Role: "admin"},
			"victim":  {Scope: identity.Scope{Project: "blue"}, Role: "manager"},
		} {
			if err := ids.CreateUser(ctx, user, user+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := ids.Grant(ctx, user, grant); err != nil {
				t.Fatal(err)
			}
		}
		tok, _, err := ids.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		admin := srv.Client()
		admin.Header.Set("X-Auth-Token", tok)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "blue-1", "driver": "fake", "owner": "blue", "lessee": "blue-tenant", "extra": map[string]any{"k": "v"}})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		node := r.JSON(t)["uuid"].(string)
		victimTok, victimInfo, err := ids.CreateToken(ctx, identity.TokenRequest{User: "victim", Scope: identity.Scope{Project: "blue"}, Roles: []string{"member"}})
		if err != nil {
			t.Fatal(err)
		}
		r = admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_BLUE", "owner": "blue", "steps": []any{map[string]any{"interface": "power", "step": "power_on", "args": map[string]any{}, "order": 1}}})
		if r.Status != 201 {
			t.Fatalf("runbook: %d %s", r.Status, r.Body)
		}
		runbook := r.JSON(t)["uuid"].(string)
		before := admin.Do(t, "GET", "/v1/nodes/"+node, nil).Body

		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		if st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"mallory"}, "password": {"mallory-password-1"}}); st != 303 {
			t.Fatalf("login: %d", st)
		}
		b.do("GET", "/nodes", nil)
		for _, row := range []struct {
			method, path string
			form         url.Values
			want         int
		}{
			{"GET", "/nodes/" + node, nil, 404},
			{"GET", "/nodes/blue-1", nil, 404},
			{"GET", "/nodes/" + node + "/status", nil, 404},
			{"POST", "/nodes/" + node + "/power", url.Values{"target": {"power on"}}, 404},
			{"POST", "/nodes/" + node + "/clean", url.Values{"steps": {`[{"interface":"power","step":"power_on"}]`}}, 404},
			{"POST", "/nodes/" + node + "/runbook", url.Values{"runbook": {runbook}, "target": {"clean"}}, 404},
			{"POST", "/nodes/" + node + "/tenancy", url.Values{"owner": {"evil"}, "lessee": {"evil"}}, 404},
			{"GET", "/runbooks/" + runbook + "/edit", nil, 404},
			{"GET", "/runbooks/CUSTOM_BLUE/edit", nil, 404},
			{"POST", "/runbooks/CUSTOM_BLUE/edit", url.Values{"name": {"CUSTOM_BLUE"}, "steps": {`[]`}}, 404},
			{"POST", "/scope", url.Values{"scope": {"project:blue"}}, 403},
			{"POST", "/scope", url.Values{"scope": {"system"}}, 403},
		} {
			if row.form != nil {
				row.form.Set("csrf", b.csrf)
			}
			st, page, _ := b.do(row.method, row.path, row.form)
			if st != row.want {
				t.Errorf("%s %s as another project: %d, want %d", row.method, row.path, st, row.want)
			}
			if strings.Contains(page, node) && !strings.Contains(row.path, node) || strings.Contains(page, "blue-tenant") {
				t.Errorf("%s %s shows the hidden node", row.method, row.path)
			}
		}
		// Another user's token answers as one that does not exist.
		st1, page1, _ := b.do("POST", "/account/tokens/"+victimInfo.UUID+"/revoke", url.Values{"csrf": {b.csrf}})
		st2, page2, _ := b.do("POST", "/account/tokens/00000000-0000-4000-8000-000000000000/revoke", url.Values{"csrf": {b.csrf}})
		if st1 != st2 || st1 < 400 || strings.ReplaceAll(page1, victimInfo.UUID, "X") != strings.ReplaceAll(page2, "00000000-0000-4000-8000-000000000000", "X") {
			t.Errorf("revoking another user's token answers %d, a missing one %d", st1, st2)
		}
		if after := admin.Do(t, "GET", "/v1/nodes/"+node, nil).Body; string(after) != string(before) {
			t.Errorf("the hidden node changed:\nbefore %s\nafter  %s", before, after)
		}
		victim := srv.Client()
		victim.Header.Set("X-Auth-Token", victimTok)
		if r := victim.Do(t, "GET", "/v1/nodes", nil); r.Status != 200 {
			t.Errorf("the victim's token stopped working: %d", r.Status)
		}
		if r := admin.Do(t, "GET", "/v1/runbooks/"+runbook, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"owner":"blue"`) {
			t.Errorf("the victim's runbook changed: %d %s", r.Status, r.Body)
		}
	})
}

// TestBrowserErrorPages: a browser gets an HTML page that says whether a
// thing is missing or not its to open; API clients keep Ironic's JSON.
func TestBrowserErrorPages(t *testing.T) {
	srv := withMember(t)
	b := newBrowser(t, srv.URL)
	st, page, h := b.do("GET", "/no-such-page", nil)
	if st != 404 || !strings.Contains(h.Get("Content-Type"), "text/html") || !strings.Contains(page, "Not found") || !strings.Contains(page, "There is no page at /no-such-page.") {
		t.Errorf("unknown URL in a browser: %d %s\n%s", st, h.Get("Content-Type"), page)
	}
	if r := srv.Client().Do(t, "GET", "/no-such-page", nil); r.Status != 404 || !strings.Contains(string(r.Body), "error_message") {
		t.Errorf("unknown URL for an API client: %d %s", r.Status, r.Body)
	}
	b.do("GET", "/login", nil)
	if st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}}); st != 303 {
		t.Fatalf("login: %d", st)
	}
	// Pages of the portal keep the viewer's header, and so does a URL the
	// portal does not have (issue #44: a 404 with no way on).
	for _, c := range []struct {
		path, heading string
		status        int
		header        bool
	}{
		{"/nodes/00000000-0000-4000-8000-000000000000", "Not found", 404, true},
		{"/no-such-page", "Not found", 404, true},
		{"/admin/policy", "Not allowed", 403, true},
	} {
		st, page, _ := b.do("GET", c.path, nil)
		if st != c.status || !strings.Contains(page, `<h1 id="error-title">`+c.heading) || strings.Contains(page, "pat · project blue") != c.header {
			t.Errorf("GET %s signed in: %d\n%s", c.path, st, page)
		}
	}
}

// TestSessionExpiryReturnsToThePage: a browser whose session ended is sent
// to sign in with the reason, an htmx poll makes the whole page go there,
// and signing in returns to the page; "next" never leaves the site.
func TestSessionExpiryReturnsToThePage(t *testing.T) {
	srv := withMember(t)
	ctx := context.Background()
	signIn := func(b *browser, next string) (int, string) {
		b.do("GET", "/login", nil)
		st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}, "next": {next}})
		return st, h.Get("Location")
	}
	// Never signed in: to the sign-in page with the way back, no reason.
	fresh := newBrowser(t, srv.URL)
	if st, _, h := fresh.do("GET", "/runbooks?x=1", nil); st != 303 || h.Get("Location") != "/login?next=%2Frunbooks%3Fx%3D1" {
		t.Errorf("signed out: %d %s", st, h.Get("Location"))
	}
	b := newBrowser(t, srv.URL)
	if st, loc := signIn(b, ""); st != 303 || loc != "/nodes" {
		t.Fatalf("login: %d %s", st, loc)
	}
	b.do("GET", "/nodes", nil)
	cookie := b.cookie()
	if err := srv.IDs.SetPassword(ctx, "pat", "pat-password-1"); err != nil {
		t.Fatal(err)
	}
	// A poll from the node page after the session ended.
	old := replay(t, srv.URL, cookie)
	st, _, h := old.do("GET", "/nodes/some-node/status", nil, "HX-Request", "true", "HX-Current-URL", srv.URL+"/nodes/some-node")
	if st != 401 || h.Get("HX-Redirect") != "/login?error=expired&next=%2Fnodes%2Fsome-node" {
		t.Errorf("htmx poll on an ended session: %d HX-Redirect %q", st, h.Get("HX-Redirect"))
	}
	st, page, _ := old.do("GET", h.Get("HX-Redirect"), nil)
	if st != 200 || !strings.Contains(page, "Your session expired") || !strings.Contains(page, `name="next" value="/nodes/some-node"`) {
		t.Errorf("sign-in page after expiry: %d\n%s", st, page)
	}
	for next, want := range map[string]string{
		"/nodes/some-node":      "/nodes/some-node",
		"//evil.example/x":      "/nodes",
		"/\\evil.example":       "/nodes",
		"https://evil.example/": "/nodes",
		"/login?next=/x":        "/nodes",
	} {
		if st, loc := signIn(newBrowser(t, srv.URL), next); st != 303 || loc != want {
			t.Errorf("next %q: %d %s, want %s", next, st, loc, want)
		}
	}
}

// withMember serves a fresh portal with pat, a member of project blue.
func withMember(t *testing.T) *servertest.Server {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	if err := srv.IDs.CreateUser(ctx, "pat", "pat-password-1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "member"}); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestExpiredSessionPostsSignIn: a form or htmx request from a page whose
// session timed out (idle or absolute) or was ended on the server is not
// performed; it sends the browser to sign in, saying why, with the way
// back to the page the user was on, and signing in lands there. The same
// request with a wrong CSRF token stays refused, live session or not.
func TestExpiredSessionPostsSignIn(t *testing.T) {
	const secret = "expiry-test-secret"
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), SessionSecret: secret})
	ctx := context.Background()
	if err := srv.IDs.CreateUser(ctx, "pat", "pat-password-1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "member"}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "pat", Scope: identity.Scope{Project: "blue"}, Roles: []string{"member"}})
	if err != nil {
		t.Fatal(err)
	}
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	if err := srv.IDs.CreateUser(ctx, "root", "root-password-1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	rootTok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Client()
	admin.Header.Set("X-Auth-Token", rootTok)
	resp := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "blue-1", "driver": "fake", "owner": "blue"})
	if resp.Status != 201 {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	node := resp.JSON(t)["uuid"].(string)
	nodePage := "/nodes/" + node
	before := api.Do(t, "GET", "/v1/nodes/"+node, nil).Body

	signIn := func(b *browser, next string) (int, string) {
		b.do("GET", "/login", nil)
		st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}, "next": {next}})
		return st, h.Get("Location")
	}
	// live signs pat in and returns the browser with its session's cookie
	// and CSRF token, as the node page shows them.
	live := func() (*browser, string) {
		b := newBrowser(t, srv.URL)
		if st, _ := signIn(b, ""); st != 303 {
			t.Fatalf("login: %d", st)
		}
		if st, _, _ := b.do("GET", nodePage, nil); st != 200 {
			t.Fatalf("node page: %d", st)
		}
		return b, b.cookie()
	}
	ends := map[string]func(cookie string) string{
		"idle": func(c string) string {
			return aged(t, secret, c, func(s *web.Session) { s.Seen = time.Now().Add(-web.IdleTimeout - time.Minute).Unix() })
		},
		"absolute": func(c string) string {
			return aged(t, secret, c, func(s *web.Session) {
				s.Created, s.Seen = time.Now().Add(-web.AbsoluteTimeout-time.Minute).Unix(), time.Now().Unix()
			})
		},
		"ended on the server": func(c string) string {
			if err := srv.IDs.SetPassword(ctx, "pat", "pat-password-1"); err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
	for how, end := range ends {
		b, cookie := live()
		csrf := b.csrf
		old := replay(t, srv.URL, end(cookie))
		expired := func(next string) string {
			return "/login?" + url.Values{"error": {"expired"}, "next": {next}}.Encode()
		}
		// A forged request with the expired cookie: still refused.
		if st, _, h := old.do("POST", nodePage+"/power", url.Values{"target": {"power on"}}, "HX-Request", "true", "X-CSRF-Token", "forged"); st != 403 || h.Get("HX-Redirect") != "" {
			t.Errorf("%s: forged htmx POST: %d %q", how, st, h.Get("HX-Redirect"))
		}
		// The power button of the node page (htmx).
		st, _, h := old.do("POST", nodePage+"/power", url.Values{"target": {"power on"}}, "HX-Request", "true", "X-CSRF-Token", csrf,
			"HX-Current-URL", srv.URL+nodePage)
		if st != 401 || h.Get("HX-Redirect") != expired(nodePage) {
			t.Errorf("%s: htmx power: %d HX-Redirect %q", how, st, h.Get("HX-Redirect"))
		}
		// The bulk results' poll: the way back leads to the results, which
		// have their own address.
		results := "/nodes/bulk/results/AAAAAAAAAAAAAAAAAAAAAA"
		st, _, h = old.do("GET", results+"/progress", nil, "HX-Request", "true", "X-CSRF-Token", csrf, "HX-Current-URL", srv.URL+results)
		if st != 401 || h.Get("HX-Redirect") != expired(results) {
			t.Errorf("%s: bulk poll: %d HX-Redirect %q", how, st, h.Get("HX-Redirect"))
		}
		// A plain form: back to the page it was posted from when that is
		// this site, else to the start.
		st, _, h = old.do("POST", "/allocations", url.Values{"csrf": {csrf}}, "Referer", srv.URL+"/allocations/new?x=1")
		if st != 303 || h.Get("Location") != expired("/allocations/new?x=1") {
			t.Errorf("%s: plain POST: %d %s", how, st, h.Get("Location"))
		}
		st, _, h = old.do("POST", nodePage+"/power", url.Values{"csrf": {csrf}, "target": {"power on"}}, "Referer", "https://evil.example"+nodePage)
		if st != 303 || h.Get("Location") != expired("/") {
			t.Errorf("%s: plain POST from elsewhere: %d %s", how, st, h.Get("Location"))
		}
		// The sign-in page says why, and signing in returns to the page.
		st, page, _ := old.do("GET", expired(nodePage), nil)
		if st != 200 || !strings.Contains(page, "Your session expired") || !strings.Contains(page, `name="next" value="`+nodePage+`"`) {
			t.Errorf("%s: sign-in page: %d\n%s", how, st, page)
		}
		if st, loc := signIn(old, nodePage); st != 303 || loc != nodePage {
			t.Errorf("%s: sign in again: %d %s", how, st, loc)
		}
		if st, _, _ := old.do("GET", "/nodes/bulk/run", nil); st != 303 {
			t.Errorf("%s: GET of a bulk page: %d", how, st)
		}
	}
	// Nothing of it was performed.
	time.Sleep(300 * time.Millisecond)
	if after := api.Do(t, "GET", "/v1/nodes/"+node, nil).Body; string(after) != string(before) {
		t.Errorf("an expired session's POST acted:\nbefore %s\nafter  %s", before, after)
	}
	// A live session with a wrong token is refused, not sent to sign in.
	b, _ := live()
	if st, _, h := b.do("POST", nodePage+"/power", url.Values{"target": {"power on"}}, "HX-Request", "true", "X-CSRF-Token", "forged"); st != 403 || h.Get("HX-Redirect") != "" {
		t.Errorf("forged POST on a live session: %d %q", st, h.Get("HX-Redirect"))
	}
	if st, _, _ := b.do("POST", "/allocations", url.Values{"csrf": {"forged"}}, "Referer", srv.URL+"/allocations/new"); st != 403 {
		t.Errorf("forged form on a live session: %d", st)
	}
}

// aged re-signs a session cookie with the server's keys after change
// moved its clock: a cookie exactly as a browser would hold it once that
// much time had passed.
func aged(t *testing.T, secret, cookie string, change func(*web.Session)) string {
	t.Helper()
	hash, block, err := web.LoadKeys(context.Background(), nil, secret)
	if err != nil {
		t.Fatal(err)
	}
	cs := sessions.NewCookieStore(hash, block)
	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(&http.Cookie{Name: "anvil_session", Value: cookie})
	gs, err := cs.Get(req, "anvil_session")
	if err != nil {
		t.Fatal(err)
	}
	var s web.Session
	if err := json.Unmarshal([]byte(gs.Values["s"].(string)), &s); err != nil {
		t.Fatal(err)
	}
	change(&s)
	raw, _ := json.Marshal(s)
	gs.Values["s"] = string(raw)
	rec := httptest.NewRecorder()
	if err := cs.Save(req, rec, gs); err != nil {
		t.Fatal(err)
	}
	return rec.Result().Cookies()[0].Value
}
