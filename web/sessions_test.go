package web_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/portalsession"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSessionsPage: a system reader sees every signed-in browser (user,
// kind, address) without Revoke and without any cookie; a system admin
// ends another user's session, whose next request goes to sign in while
// the others go on, and the ending is audited; a project admin may do
// neither.
func TestSessionsPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		root, pat, rhea, pam := signInAs(t, srv, "root"), signInAs(t, srv, "pat"), signInAs(t, srv, "rhea"), signInAs(t, srv, "pam")
		st, page, _ := rhea.do("GET", "/admin/sessions", nil)
		for _, u := range []string{"root", "pat", "rhea", "pam"} {
			if !strings.Contains(page, `data-user="`+u+`"`) {
				t.Errorf("%s's session is not listed", u)
			}
		}
		if st != 200 || strings.Contains(page, "/revoke") || !strings.Contains(page, "Only a system admin") || !strings.Contains(page, "127.0.0.1") ||
			!strings.Contains(page, "(this session)") {
			t.Fatalf("reader's view: %d\n%s", st, page)
		}
		for _, b := range []*browser{root, pat, rhea, pam} {
			if strings.Contains(page, b.cookie()) {
				t.Errorf("the page shows a session cookie")
			}
		}
		_, page, _ = root.do("GET", "/admin/sessions", nil)
		m := regexp.MustCompile(`<tr data-session="(\d+)" data-user="pat">`).FindStringSubmatch(page)
		if m == nil || !strings.Contains(page, `action="/admin/sessions/`+m[1]+`/revoke"`) {
			t.Fatalf("root gets no Revoke for pat's session\n%s", page)
		}
		if own := regexp.MustCompile(`data-user="root">[\s\S]*?</tr>`).FindString(page); !strings.Contains(own, "(this session)") || strings.Contains(own, "/revoke") {
			t.Errorf("root's own session is not marked, or offers Revoke: %s", own)
		}
		if st, _, _ := rhea.do("POST", "/admin/sessions/"+m[1]+"/revoke", url.Values{"csrf": {rhea.csrf}}); st != 403 {
			t.Errorf("a system reader ends a session: %d", st)
		}
		pam.do("GET", "/nodes", nil)
		if st, _, _ := pam.do("POST", "/admin/sessions/"+m[1]+"/revoke", url.Values{"csrf": {pam.csrf}}); st != 403 {
			t.Errorf("a project admin ends a session: %d", st)
		}
		if st, _, _ := pam.do("GET", "/admin/sessions", nil); st != 403 {
			t.Errorf("a project admin lists sessions: %d", st)
		}
		if st, _, _ := pat.do("GET", "/nodes", nil); st != 200 {
			t.Fatalf("pat's session ended before it was revoked: %d", st)
		}
		if st, _, h := root.do("POST", "/admin/sessions/"+m[1]+"/revoke", url.Values{"csrf": {root.csrf}}); st != 303 || h.Get("Location") != "/admin/sessions" {
			t.Fatalf("revoke: %d %s", st, h.Get("Location"))
		}
		_, page, _ = root.do("GET", "/admin/sessions", nil)
		if !strings.Contains(page, "Session ended") || strings.Contains(page, `data-user="pat"`) {
			t.Errorf("after revoke:\n%s", page)
		}
		if st, _, h := pat.do("GET", "/nodes", nil); st != 303 || !strings.HasPrefix(h.Get("Location"), "/login") {
			t.Errorf("pat's revoked session goes on: %d %s", st, h.Get("Location"))
		}
		if n, _ := srv.DB.PortalSession.Query().Where(portalsession.Principal("pat")).Count(ctx); n != 0 {
			t.Errorf("pat's session record stays")
		}
		for _, b := range []*browser{root, rhea} {
			if st, _, _ := b.do("GET", "/nodes", nil); st != 200 {
				t.Errorf("another session ended with pat's: %d", st)
			}
		}
		if st, _, _ := root.do("POST", "/admin/sessions/"+m[1]+"/revoke", url.Values{"csrf": {root.csrf}}); st != 404 {
			t.Errorf("revoke an ended session: %d", st)
		}
		if n, _ := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:user:manage"), auditevent.TargetID("pat"), auditevent.User("root"),
			auditevent.Result("allowed")).Count(ctx); n != 1 {
			t.Errorf("audit rows of the revocation by root: %d", n)
		}
	})
}

// TestSessionsPagesAndFilter: with more sessions than a page holds, the
// list says how many there are, pages through them with Previous/Next
// (every session on exactly one page), and filters by user in any case.
func TestSessionsPagesAndFilter(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		ctx := context.Background()
		root := signInAs(t, srv, "root")
		for i := 0; i < 60; i++ {
			if _, err := srv.IDs.StartSession(ctx, fmt.Sprintf("user-%02d", i), "10.0.0.9", time.Hour, nil); err != nil {
				t.Fatal(err)
			}
		}
		row := regexp.MustCompile(`<tr data-session="(\d+)"`)
		seen := map[string]int{}
		_, page, _ := root.do("GET", "/admin/sessions", nil)
		if !strings.Contains(page, "61 active sessions") || !strings.Contains(page, "page 1 of 2") || strings.Contains(page, `rel="prev"`) {
			t.Fatalf("first page:\n%s", page)
		}
		for _, m := range row.FindAllStringSubmatch(page, -1) {
			seen[m[1]]++
		}
		next := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(page)
		if next == nil {
			t.Fatalf("no Next link on the first page")
		}
		_, page, _ = root.do("GET", strings.ReplaceAll(next[1], "&amp;", "&"), nil)
		if !strings.Contains(page, "page 2 of 2") || strings.Contains(page, `rel="next"`) || !strings.Contains(page, `rel="prev"`) {
			t.Fatalf("second page:\n%s", page)
		}
		for _, m := range row.FindAllStringSubmatch(page, -1) {
			seen[m[1]]++
		}
		n, err := srv.DB.PortalSession.Query().Count(ctx)
		if err != nil || len(seen) != n {
			t.Errorf("the pages list %d sessions, the database holds %d (%v)", len(seen), n, err)
		}
		for ref, times := range seen {
			if times != 1 {
				t.Errorf("session %s listed %d times", ref, times)
			}
		}
		_, page, _ = root.do("GET", "/admin/sessions?user=USER-0", nil)
		if got := len(row.FindAllString(page, -1)); got != 10 || !strings.Contains(page, "10 active sessions") || strings.Contains(page, `data-user="root"`) {
			t.Errorf("filtered by USER-0: %d rows\n%s", got, page)
		}
	})
}
