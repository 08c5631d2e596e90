package web_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRequestAndReleaseNode walks the self-service allocation pages over
// the demo fleet: of its first 24 nodes tenant-blue leases two free ones,
// demo-00005 (baremetal-large) and demo-00013 (baremetal-small), and
// tenant-green none.
func TestRequestAndReleaseNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 24); err != nil {
			t.Fatal(err)
		}
		for _, u := range []struct{ name, project, role string }{{"tina", "tenant-blue", "member"}, {"rita", "tenant-blue", "reader"}, {"gary", "tenant-green", "member"}} {
			if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: identity.Scope{Project: u.project}, Role: u.role}); err != nil {
				t.Fatal(err)
			}
		}
		held := func() int {
			n, err := srv.DB.Allocation.Query().Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		tina, rita, gary := signInAs(t, srv, "tina"), signInAs(t, srv, "rita"), signInAs(t, srv, "gary")

		_, page, _ := tina.do("GET", "/allocations/new", nil)
		for _, want := range []string{"baremetal-large (1 available)", "baremetal-small (1 available)", "CUSTOM_FIRMWARE_UPDATE (1 available)", `aria-current="page">Request a node<`} {
			if !strings.Contains(page, want) {
				t.Errorf("request page lacks %q", want)
			}
		}
		if strings.Contains(page, ">gpu (") {
			t.Error("the request page offers gpu, of which tenant-blue has no free node")
		}
		if _, page, _ := gary.do("GET", "/allocations/new", nil); !strings.Contains(page, `data-testid="none-free"`) {
			t.Error("tenant-green, with no free node, is not told so")
		}

		// Refusals go back to the form (POST, redirect, GET), which shows
		// the reason and what was asked; a refresh of it sends nothing.
		refused := func(form url.Values) (string, string) {
			t.Helper()
			form.Set("csrf", tina.csrf)
			form.Set("once", newOnce(t, tina))
			st, _, h := tina.do("POST", "/allocations", form)
			if st != 303 || !strings.HasPrefix(h.Get("Location"), "/allocations/new?refused=") {
				t.Fatalf("refused request %v: %d %s", form, st, h.Get("Location"))
			}
			_, page, _ := tina.do("GET", h.Get("Location"), nil)
			return h.Get("Location"), page
		}
		if _, page := refused(url.Values{"resource_class": {""}}); !strings.Contains(page, "resource_class") || !strings.Contains(page, `role="alert"`) {
			t.Errorf("empty class:\n%s", page)
		}
		if _, page := refused(url.Values{"resource_class": {"gpu"}}); !strings.Contains(page, "No node is free") || !strings.Contains(page, `<option value="gpu" selected>`) {
			t.Errorf("a class with no free node:\n%s", page)
		}
		to, page := refused(url.Values{"resource_class": {"baremetal-large"}, "traits": {"CUSTOM_NOPE"}})
		if !strings.Contains(page, "CUSTOM_NOPE") || !strings.Contains(page, `<option value="baremetal-large" selected>`) {
			t.Errorf("a trait no free node has:\n%s", page)
		}
		// Another user cannot read a refusal's record.
		if _, page, _ := gary.do("GET", to, nil); strings.Contains(page, "CUSTOM_NOPE") {
			t.Error("another project reads tina's refusal")
		}
		if n := held(); n != 0 {
			t.Fatalf("%d allocations stored after refusals", n)
		}
		// A form without its one-time token, or another session's, is refused.
		if st, page, _ := tina.do("POST", "/allocations", url.Values{"csrf": {tina.csrf}, "resource_class": {"baremetal-large"}}); st != 400 || !strings.Contains(page, "expired or was not issued") {
			t.Errorf("request without a token: %d", st)
		}
		garys := newOnce(t, gary)
		if st, _, _ := tina.do("POST", "/allocations", url.Values{"csrf": {tina.csrf}, "once": {garys}, "resource_class": {"baremetal-large"}}); st != 400 || held() != 0 {
			t.Errorf("request with another session's token: %d", st)
		}

		// Success redirects to the node, which says once who holds it.
		once := newOnce(t, tina)
		form := url.Values{"csrf": {tina.csrf}, "once": {once}, "resource_class": {"baremetal-large"}, "traits": {"CUSTOM_DEMO", "CUSTOM_FIRMWARE_UPDATE"}}
		st, _, h := tina.do("POST", "/allocations", form)
		node := h.Get("Location")
		if st != 303 || !strings.HasPrefix(node, "/nodes/") {
			t.Fatalf("request: %d %s", st, node)
		}
		if _, page, _ := tina.do("GET", node, nil); !strings.Contains(page, "demo-00005 reserved for project tenant-blue.") {
			t.Error("the node page does not say the node was reserved")
		}
		if _, page, _ := tina.do("GET", node, nil); strings.Contains(page, "reserved for") || held() != 1 {
			t.Errorf("a reload repeats the message or the request (%d allocations)", held())
		}
		// The same form sent again (a refresh of the POST, a replay) gets
		// the first outcome, and no second node.
		form.Set("csrf", tina.csrf)
		if st, _, h := tina.do("POST", "/allocations", form); st != 303 || h.Get("Location") != node || held() != 1 {
			t.Errorf("replayed request: %d %s, %d allocations", st, h.Get("Location"), held())
		}
		if _, page, _ := tina.do("GET", node, nil); !strings.Contains(page, "demo-00005 reserved for project tenant-blue.") {
			t.Error("the replay does not show the first outcome")
		}
		if _, page, _ := tina.do("GET", "/allocations/new", nil); strings.Contains(page, "baremetal-large (") {
			t.Error("the reserved node is still counted free")
		}

		_, page, _ = tina.do("GET", "/allocations", nil)
		if !strings.Contains(page, `aria-current="page">My allocations<`) || !strings.Contains(page, `data-node="demo-00005"`) ||
			!strings.Contains(page, "Release demo-00005? It goes back to the free nodes, and project tenant-blue no longer holds it.") {
			t.Fatalf("my allocations:\n%s", page)
		}
		a, err := srv.DB.Allocation.Query().Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		release := "/allocations/" + a.UUID + "/release"

		// Another project neither sees nor releases it; a reader of the
		// project sees it but may not release it.
		if _, page, _ := gary.do("GET", "/allocations", nil); strings.Contains(page, "demo-00005") {
			t.Error("tenant-green sees tenant-blue's allocation")
		}
		if st, page, _ := gary.do("POST", release, url.Values{"csrf": {gary.csrf}}); st != 404 || strings.Contains(page, "demo-00005") {
			t.Errorf("another project's release: %d", st)
		}
		if _, page, _ := rita.do("GET", "/allocations", nil); !strings.Contains(page, "demo-00005") {
			t.Error("a reader of the project does not see its allocation")
		}
		if st, _, _ := rita.do("POST", release, url.Values{"csrf": {rita.csrf}}); st != 403 {
			t.Errorf("a reader's release: %d", st)
		}
		if held() != 1 {
			t.Fatal("a refused release removed the allocation")
		}

		if st, _, h := tina.do("POST", release, url.Values{"csrf": {tina.csrf}}); st != 303 || h.Get("Location") != "/allocations" {
			t.Fatalf("release: %d %s", st, h.Get("Location"))
		}
		_, page, _ = tina.do("GET", "/allocations", nil)
		if !strings.Contains(page, "Released demo-00005.") || strings.Contains(page, `data-node="demo-00005"`) || held() != 0 {
			t.Errorf("after release the list shows: %s", page)
		}
		n, err := srv.DB.Node.Query().Where(entnode.UUID(strings.TrimPrefix(node, "/nodes/"))).Only(ctx)
		if err != nil || n.InstanceUUID != nil {
			t.Error("the released node keeps its instance UUID")
		}
		if st, _, _ := tina.do("POST", release, url.Values{"csrf": {tina.csrf}}); st != 404 {
			t.Errorf("releasing twice: %d", st)
		}

		// Without JavaScript, the picker's button shows a class's traits
		// and requests nothing.
		if st, _, h := tina.do("POST", "/allocations", url.Values{"csrf": {tina.csrf}, "action": {"traits"}, "resource_class": {"baremetal-small"}}); st != 303 ||
			h.Get("Location") != "/allocations/new?resource_class=baremetal-small" || held() != 0 {
			t.Errorf("the no-script trait picker: %d %s", st, h.Get("Location"))
		}
		// A double click: two submits of one form at once reserve one node,
		// and both land on it.
		form = url.Values{"csrf": {tina.csrf}, "once": {newOnce(t, tina)}, "resource_class": {"baremetal-small"}}
		var wg sync.WaitGroup
		var went [2]string
		for i := range went {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Not tina.do, which remembers the page's CSRF token.
				resp, err := tina.c.PostForm(srv.URL+"/allocations", form)
				if err == nil {
					resp.Body.Close()
					went[i] = resp.Header.Get("Location")
				}
			}()
		}
		wg.Wait()
		if went[0] != went[1] || !strings.HasPrefix(went[0], "/nodes/") || held() != 1 {
			t.Errorf("a double submit went to %q, %d allocations", went, held())
		}
	})
}

// TestRequestRetriedAfterFailure: when the database fails the request
// itself, nothing is allocated and the same form, sent again once it
// is back, allocates rather than waiting on the failed first submit.
func TestRequestRetriedAfterFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 24); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.CreateUser(ctx, "tina", "tina-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "tina", identity.Assignment{Scope: identity.Scope{Project: "tenant-blue"}, Role: "member"}); err != nil {
			t.Fatal(err)
		}
		tina := signInAs(t, srv, "tina")
		once := newOnce(t, tina)
		form := url.Values{"csrf": {tina.csrf}, "once": {once}, "resource_class": {"baremetal-large"}}
		rename := func(from, to string) {
			t.Helper()
			if _, err := srv.DB.SQL.ExecContext(ctx, "ALTER TABLE "+from+" RENAME TO "+to); err != nil {
				t.Fatal(err)
			}
		}
		rename("allocations", "allocations_away")
		st, _, _ := tina.do("POST", "/allocations", form)
		rename("allocations_away", "allocations")
		if st != 500 {
			t.Fatalf("request with the allocations table gone: %d", st)
		}
		form.Set("csrf", tina.csrf)
		st, _, h := tina.do("POST", "/allocations", form)
		if st != 303 || !strings.HasPrefix(h.Get("Location"), "/nodes/") {
			t.Fatalf("the same form sent again: %d %s", st, h.Get("Location"))
		}
		if n, err := srv.DB.Allocation.Query().Count(ctx); err != nil || n != 1 {
			t.Errorf("%d allocations (%v), want 1", n, err)
		}
	})
}

var onceField = regexp.MustCompile(`name="once" value="([^"]+)"`)

// newOnce opens the request form and returns its one-time token.
func newOnce(t *testing.T, b *browser) string {
	t.Helper()
	_, page, _ := b.do("GET", "/allocations/new", nil)
	m := onceField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the request form has no one-time token")
	}
	return m[1]
}
