package web_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/allocation"
	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRequestSeveralNodes: a request for several nodes is all or
// nothing under one once-token, names them name-1…name-N and records
// their lease's end; then a lessee manager deploys one of them (a demo
// fake-hardware node, which writes nothing and says so) with the demo's
// published image and releases it. Of the 40 demo nodes tenant-blue
// leases two free baremetal-large ones, demo-00005 and demo-00029.
func TestRequestSeveralNodes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 40); err != nil {
			t.Fatal(err)
		}
		imgs, err := demo.DeployImages(srv.Firmware)
		if err != nil {
			t.Fatal(err)
		}
		srv.Portal.DeployImages = imgs
		for _, u := range []struct{ name, role string }{{"tina", "member"}, {"mark", "manager"}} {
			if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: identity.Scope{Project: "tenant-blue"}, Role: u.role}); err != nil {
				t.Fatal(err)
			}
		}
		held := func() int { return srv.DB.Allocation.Query().CountX(ctx) }
		tina, mark := signInAs(t, srv, "tina"), signInAs(t, srv, "mark")
		request := func(b *browser, form url.Values) (int, string, string) {
			t.Helper()
			form.Set("csrf", b.csrf)
			form.Set("resource_class", "baremetal-large")
			if form.Get("once") == "" {
				form.Set("once", newOnce(t, b))
			}
			st, page, h := b.do("POST", "/allocations", form)
			return st, page, h.Get("Location")
		}

		// Bad quantity or lease length: 400 naming it, the form as asked.
		for _, bad := range []struct{ field, value string }{{"quantity", "0"}, {"quantity", "11"}, {"quantity", "two"}, {"lease_hours", "0"}, {"lease_hours", "1.5"}} {
			form := url.Values{"name": {"web"}, "quantity": {"2"}, "lease_hours": {"3"}}
			form.Set(bad.field, bad.value)
			st, page, _ := request(tina, form)
			if st != 400 || !strings.Contains(page, bad.field+":") || !strings.Contains(page, `name="name" value="web"`) || held() != 0 {
				t.Errorf("%s=%s: %d, %d held", bad.field, bad.value, st, held())
			}
		}
		// A name the API refuses: nothing is held.
		if st, _, to := request(tina, url.Values{"name": {"no spaces"}, "quantity": {"2"}}); st != 303 || !strings.Contains(to, "refused=") || held() != 0 {
			t.Errorf("a bad name: %d %s, %d held", st, to, held())
		} else if _, page, _ := tina.do("GET", to, nil); !strings.Contains(page, "name") || !strings.Contains(page, `value="no spaces"`) {
			t.Errorf("the refused page does not show the name asked for:\n%s", page)
		}
		// Three asked, two free: the two made are released.
		st, _, to := request(tina, url.Values{"name": {"web"}, "quantity": {"3"}})
		if st != 303 || !strings.Contains(to, "refused=") || held() != 0 {
			t.Fatalf("three of two: %d %s, %d held", st, to, held())
		}
		if _, page, _ := tina.do("GET", to, nil); !strings.Contains(page, "Only 2 of the 3 nodes asked for could be reserved, so none is held") ||
			!strings.Contains(page, `name="quantity" type="number" min="1" max="10" required value="3"`) {
			t.Errorf("the refusal does not say what was asked:\n%s", page)
		}
		if n := srv.DB.Node.Query().Where(entnode.InstanceUUIDNotNil()).CountX(ctx); n != 0 {
			t.Errorf("%d nodes still reserved after the refusal", n)
		}

		// Two asked, two free: both, named, with their lease's end.
		before := time.Now().UTC().Truncate(time.Second)
		form := url.Values{"name": {"web"}, "quantity": {"2"}, "lease_hours": {"3"}}
		st, _, to = request(tina, form)
		after := time.Now().UTC()
		if st != 303 || to != "/allocations" {
			t.Fatalf("two of two: %d %s", st, to)
		}
		as := srv.DB.Allocation.Query().Order(allocation.ByName()).AllX(ctx)
		if len(as) != 2 || deref(as[0].Name) != "web-1" || deref(as[1].Name) != "web-2" {
			t.Fatalf("allocations %v", as)
		}
		for _, a := range as {
			end, err := time.Parse(time.RFC3339, fmt.Sprint(a.Extra["anvil_expires_at"]))
			if err != nil || end.Before(before.Add(3*time.Hour)) || end.After(after.Add(3*time.Hour)) || a.State != "active" {
				t.Errorf("%s: state %s extra %v", deref(a.Name), a.State, a.Extra)
			}
		}
		_, page, _ := tina.do("GET", "/allocations", nil)
		flash := regexp.MustCompile(`Reserved 2 nodes for project tenant-blue: web-1 on (demo-000\d\d), web-2 on (demo-000\d\d)\.`).FindStringSubmatch(page)
		if flash == nil || strings.Count(page, "ends in 3 h") != 2 || strings.Count(page, ">Deploy</a>") != 2 {
			t.Fatalf("My allocations after the request:\n%s", page)
		}
		// The same form again: the first outcome, no more nodes.
		form.Set("csrf", tina.csrf)
		if st, _, h := tina.do("POST", "/allocations", form); st != 303 || h.Get("Location") != "/allocations" || held() != 2 {
			t.Errorf("replayed batch: %d %s, %d held", st, h.Get("Location"), held())
		}

		// The manager deploys web-1's node: fake hardware, active at once.
		n := srv.DB.Node.Query().Where(entnode.Name(flash[1])).OnlyX(ctx)
		path := "/nodes/" + n.UUID
		_, page, _ = mark.do("GET", path, nil)
		if !strings.Contains(page, `data-testid="deploy-fake"`) || !strings.Contains(page, `value="Demo disk 1.0"`) {
			t.Fatalf("the demo node's deploy panel:\n%s", page)
		}
		if _, page, _ := tina.do("GET", path, nil); !strings.Contains(page, "You cannot deploy this node.") || !strings.Contains(page, "a manager of project tenant-blue (the lessee)") {
			t.Errorf("a lessee member is not told who may deploy:\n%s", page)
		}
		st, _, h := mark.do("POST", path+"/deploy", url.Values{"csrf": {mark.csrf}, "image": {"Demo disk 1.0"}, "ssh_key": {sshKey(t)}, "hostname": {"web-1"}})
		if st != 303 || h.Get("Location") != path+"#deploy" {
			t.Fatalf("deploy: %d %s", st, h.Get("Location"))
		}
		waitSettled(t, srv, n.UUID, "active")
		if _, page, _ := mark.do("GET", path, nil); !strings.Contains(page, `data-stage="running"`) || !strings.Contains(page, "Demo disk 1.0") {
			t.Errorf("the deployed demo node's panel:\n%s", page)
		}
		if st, _, _ := mark.do("POST", path+"/undeploy", url.Values{"csrf": {mark.csrf}, "confirmed": {"yes"}}); st != 303 {
			t.Fatalf("release: %d", st)
		}
		waitSettled(t, srv, n.UUID, "available")
		if held() != 1 {
			t.Errorf("%d allocations after releasing one of two", held())
		}
		// The other goes from My allocations.
		rest := srv.DB.Allocation.Query().Where(allocation.Name("web-2")).OnlyX(ctx)
		if st, _, _ := tina.do("POST", "/allocations/"+rest.UUID+"/release", url.Values{"csrf": {tina.csrf}}); st != 303 || held() != 0 {
			t.Errorf("releasing the other: %d, %d held", st, held())
		}
	})
}

// waitSettled waits for the conductor to leave the node in state.
func waitSettled(t *testing.T, srv *servertest.Server, uuid, state string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := srv.DB.Node.Query().Where(entnode.UUID(uuid)).OnlyX(context.Background())
		if n.ProvisionState == state && n.TargetProvisionState == nil && n.Reservation == nil {
			return
		}
	}
	t.Fatalf("node %s did not reach %s", uuid, state)
}
