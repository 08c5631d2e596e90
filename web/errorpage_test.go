package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/internal/version"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestErrorPagesNavigateAndSpeakPlainly: a signed-in person who follows a
// dead link or opens a page that is not theirs keeps the portal's
// navigation, reads a sentence, and finds a policy rule only behind
// Details; someone not signed in gets no navigation.
func TestErrorPagesNavigateAndSpeakPlainly(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if err := srv.IDs.CreateUser(ctx, "tess", "tess-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "tess", identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "member"}); err != nil {
			t.Fatal(err)
		}
		b := signInAs(t, srv, "tess")
		nav := `<nav aria-label="Main">`

		st, page, _ := b.do("GET", "/no/such/page", nil)
		if st != 404 || !strings.Contains(page, nav) || !strings.Contains(page, "tess") || !strings.Contains(page, "There is no page at /no/such/page.") {
			t.Errorf("unknown address: %d, navigation %v, signed-in name %v:\n%s", st, strings.Contains(page, nav), strings.Contains(page, "tess"), page)
		}

		st, page, _ = b.do("GET", "/admin/users", nil)
		if st != 403 || !strings.Contains(page, nav) {
			t.Fatalf("admin page as a project member: %d, navigation %v:\n%s", st, strings.Contains(page, nav), page)
		}
		msg := page[strings.Index(page, "data-error-message"):]
		msg = msg[:strings.Index(msg, "</p>")]
		if strings.Contains(msg, "baremetal:") || strings.Contains(msg, "anvil:") || strings.Contains(msg, "policy ") {
			t.Errorf("the refusal names a rule outside Details: %s", msg)
		}
		if !strings.Contains(msg, "Your role (member of blue) is not allowed to open this page.") {
			t.Errorf("the refusal does not say whose role: %s", msg)
		}
		if d := strings.Index(page, "<summary>Details</summary>"); d < 0 || !strings.Contains(page[d:], "anvil:user:list") {
			t.Errorf("the rule is not behind Details:\n%s", page)
		}

		anon := newBrowser(t, srv.URL)
		if st, page, _ := anon.do("GET", "/no/such/page", nil); st != 404 || strings.Contains(page, nav) {
			t.Errorf("unknown address, not signed in: %d, navigation %v", st, strings.Contains(page, nav))
		}
		// A forged or stale cookie shows no navigation either.
		forged := newBrowser(t, srv.URL)
		if st, page, _ := forged.do("GET", "/no/such/page", nil, "Cookie", "anvil_session="+b.cookie()+"x"); st != 404 || strings.Contains(page, nav) {
			t.Errorf("unknown address with a forged cookie: %d, navigation %v", st, strings.Contains(page, nav))
		}
	})
}

// TestFooterNamesTheBuild: every page, signed in or not, names the build
// that served it.
func TestFooterNamesTheBuild(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	want := `<footer class="about" data-testid="build">Anvil ` + version.Get().Version + `</footer>`
	b := newBrowser(t, srv.URL)
	for _, path := range []string{"/login", "/no/such/page"} {
		if _, page, _ := b.do("GET", path, nil); !strings.Contains(page, want) {
			t.Errorf("%s lacks %s", path, want)
		}
	}
}
