package api_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// addConductors registers conductors beside the server's own, as other
// replicas would: alive ones heartbeat now, dead ones went offline.
func addConductors(t *testing.T, db *store.DB, alive map[string]string, dead ...string) {
	t.Helper()
	ctx := context.Background()
	for h, g := range alive {
		if err := db.Conductor.Create().SetHostname(h).SetConductorGroup(g).SetDrivers([]string{"ipmi"}).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range dead {
		if err := db.Conductor.Create().SetHostname(h).SetOnline(false).SetHeartbeatAt(time.Now().Add(-time.Hour)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// follow lists path page by page through its next links and returns every
// page's items under key.
func follow(t *testing.T, c *servertest.Client, path, key string) [][]map[string]any {
	t.Helper()
	var pages [][]map[string]any
	for path != "" && len(pages) < 100 {
		r := c.Do(t, "GET", path, nil)
		mustStatus(t, r, 200)
		body := r.JSON(t)
		var page []map[string]any
		for _, x := range body[key].([]any) {
			page = append(page, x.(map[string]any))
		}
		pages = append(pages, page)
		path = ""
		if next, ok := body["next"].(string); ok {
			u, err := url.Parse(next)
			if err != nil {
				t.Fatal(err)
			}
			path = u.RequestURI()
		}
	}
	return pages
}

// TestConductorListQuery: GET /v1/conductors takes Ironic's limit, marker
// (a hostname), sort_key, sort_dir, fields and detail; the default shows
// hostname, conductor_group and alive; detail every field and Anvil's
// node_count; bad values are 400 naming the parameter, an unknown marker
// Ironic's 404. Debian's baremetal CLI lists with --long and --limit.
func TestConductorListQuery(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		waitRegistered(t, srv, srv.Cond.Name())
		addConductors(t, db, map[string]string{"cl-b": "rack2", "cl-a": ""}, "cl-dead")
		reader := clients["system-reader"]
		self := srv.Cond.Name()

		list := reader.Do(t, "GET", "/v1/conductors", nil).JSON(t)["conductors"].([]any)
		var order []string
		for _, x := range list {
			c := x.(map[string]any)
			order = append(order, c["hostname"].(string))
			if strings.Join(keysOf(c), ",") != "alive,conductor_group,hostname,links" {
				t.Errorf("default fields %v, want Ironic's hostname, conductor_group, alive and links", keysOf(c))
			}
			if want := c["hostname"] != "cl-dead"; c["alive"] != want {
				t.Errorf("%v: alive %v, want %v", c["hostname"], c["alive"], want)
			}
		}
		// Ironic's default order is registration (id): this server's
		// conductor registered first, the others in the order added.
		if order[0] != self || len(order) != 4 || order[3] != "cl-dead" {
			t.Errorf("default order %v, want %s first and cl-dead last", order, self)
		}

		d := reader.Do(t, "GET", "/v1/conductors?detail=true", nil).JSON(t)["conductors"].([]any)[0].(map[string]any)
		if strings.Join(keysOf(d), ",") != "alive,conductor_group,created_at,drivers,hostname,links,node_count,updated_at" {
			t.Errorf("detail fields %v", keysOf(d))
		}
		f := reader.Do(t, "GET", "/v1/conductors?fields=hostname,drivers", nil).JSON(t)["conductors"].([]any)[0].(map[string]any)
		if strings.Join(keysOf(f), ",") != "drivers,hostname,links" {
			t.Errorf("fields=hostname,drivers gives %v", keysOf(f))
		}

		// Pages of two follow the hostname markers, in any sort order.
		for _, q := range []string{"", "&sort_key=hostname", "&sort_key=hostname&sort_dir=desc", "&sort_key=conductor_group", "&sort_key=online&sort_dir=desc"} {
			pages := follow(t, reader, "/v1/conductors?limit=2"+q, "conductors")
			var got []string
			for i, p := range pages {
				if i < len(pages)-1 && len(p) != 2 {
					t.Errorf("%s: page %d has %d conductors, want 2", q, i, len(p))
				}
				for _, c := range p {
					got = append(got, c["hostname"].(string))
				}
			}
			whole := reader.Do(t, "GET", "/v1/conductors?limit=10"+q, nil).JSON(t)["conductors"].([]any)
			var want []string
			for _, x := range whole {
				want = append(want, x.(map[string]any)["hostname"].(string))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") || len(got) != 4 {
				t.Errorf("%s: pages give %v, one list %v", q, got, want)
			}
			if q == "&sort_key=hostname&sort_dir=desc" && !slices.IsSortedFunc(got, func(a, b string) int { return strings.Compare(b, a) }) {
				t.Errorf("sort_dir=desc gives %v", got)
			}
		}
		if r := reader.Do(t, "GET", "/v1/conductors?limit=1", nil).JSON(t); !strings.Contains(fmt.Sprint(r["next"]), "marker="+url.QueryEscape(self)) {
			t.Errorf("next link %v does not carry the hostname marker", r["next"])
		}

		for q, want := range map[string]struct {
			status int
			field  string
		}{
			"sort_key=alive":           {400, "sort_key"},
			"sort_key=drivers":         {400, "sort_key"},
			"sort_key=colour":          {400, "sort_key"},
			"sort_dir=up":              {400, "sort direction"},
			"limit=0":                  {400, "limit"},
			"limit=x":                  {400, "limit"},
			"detail=maybe":             {400, "detail"},
			"fields=colour":            {400, "colour"},
			"fields=hostname&detail=1": {400, "detail"},
			"colour=blue":              {400, "colour"},
			"marker=no-such-host":      {404, "no-such-host"},
		} {
			r := reader.Do(t, "GET", "/v1/conductors?"+q, nil)
			if r.Status != want.status || !strings.Contains(strings.ToLower(r.Fault(t)), want.field) {
				t.Errorf("?%s: %d %s, want %d naming %s", q, r.Status, r.Body, want.status, want.field)
			}
		}
		mustStatus(t, clients["owner-admin"].Do(t, "GET", "/v1/conductors?detail=true", nil), 403)
		mustStatus(t, at(reader, "1.48").Do(t, "GET", "/v1/conductors?limit=1", nil), 404)

		bm := newCLI(t, srv.URL, "--os-auth-type", "http_basic", "--os-username", "system-reader", "--os-password", "password-system-reader")
		long := bm.json("conductor", "list", "--long").([]any)
		if len(long) != 4 {
			t.Fatalf("conductor list --long: %v", long)
		}
		row := long[0].(map[string]any)
		if row["Hostname"] != self || row["Alive"] != true || !strings.Contains(fmt.Sprint(row["Drivers"]), "ipmi") || row["Created At"] == nil {
			t.Errorf("conductor list --long row %v", row)
		}
		if short := bm.json("conductor", "list", "--limit", "2").([]any); len(short) != 2 {
			t.Errorf("conductor list --limit 2: %v", short)
		}
		if rows := bm.json("conductor", "list", "--marker", self, "--sort", "hostname").([]any); len(rows) != 3 {
			t.Errorf("conductor list --marker %s: %v", self, rows)
		}
	})
}

// TestNodeConductorFilter: ?conductor= (1.49) lists the nodes whose
// conductor field is that host, as Ironic computes it from the hash ring,
// in full pages whatever the sort, within the caller's projects; an unknown
// or dead conductor has no nodes; below 1.49 it is a 406.
func TestNodeConductorFilter(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		waitRegistered(t, srv, srv.Cond.Name())
		// Registered before any node is shown, so the API's cached ring
		// already holds them.
		addConductors(t, db, map[string]string{"cf-a": "", "cf-b": "", "cf-r": "rack2"}, "cf-dead")
		admin := clients["system-admin"]
		for i := range 40 {
			body := map[string]any{"name": fmt.Sprintf("cf-%02d", i), "driver": "fake"}
			if i%3 == 0 {
				body["owner"] = "own"
			}
			if i%10 == 0 {
				body["conductor_group"] = "rack2"
			}
			mustStatus(t, admin.Do(t, "POST", "/v1/nodes", body), 201)
		}
		mapped := map[string]map[string]bool{}
		owned := map[string]bool{}
		for _, x := range admin.Do(t, "GET", "/v1/nodes?fields=uuid,conductor,owner&limit=100", nil).JSON(t)["nodes"].([]any) {
			n := x.(map[string]any)
			h, _ := n["conductor"].(string)
			if mapped[h] == nil {
				mapped[h] = map[string]bool{}
			}
			mapped[h][n["uuid"].(string)] = true
			if n["owner"] == "own" {
				owned[n["uuid"].(string)] = true
			}
		}
		if len(mapped["cf-r"]) != 4 || len(mapped["cf-a"]) == 0 || len(mapped["cf-b"]) == 0 || len(mapped[srv.Cond.Name()]) == 0 {
			t.Fatalf("the ring should spread the default group over three conductors and rack2 on cf-r: %v", mapped)
		}

		for _, h := range []string{srv.Cond.Name(), "cf-a", "cf-b", "cf-r"} {
			for _, q := range []string{"", "&sort_key=name&sort_dir=desc", "&sort_key=uuid"} {
				pages := follow(t, admin, "/v1/nodes?limit=3&fields=uuid,conductor&conductor="+url.QueryEscape(h)+q, "nodes")
				got := map[string]bool{}
				for i, p := range pages {
					if i < len(pages)-1 && len(p) != 3 {
						t.Errorf("%s%s: page %d has %d nodes, want full pages of 3", h, q, i, len(p))
					}
					for _, n := range p {
						if n["conductor"] != h {
							t.Errorf("%s%s: node %v has conductor %v", h, q, n["uuid"], n["conductor"])
						}
						got[n["uuid"].(string)] = true
					}
				}
				if len(got) != len(mapped[h]) {
					t.Errorf("%s%s: %d nodes listed, the ring maps %d", h, q, len(got), len(mapped[h]))
				}
			}
			// A project sees its own nodes among them, no others.
			r := clients["owner-reader"].Do(t, "GET", "/v1/nodes/detail?conductor="+url.QueryEscape(h), nil)
			mustStatus(t, r, 200)
			want := 0
			for id := range mapped[h] {
				if owned[id] {
					want++
				}
			}
			list := r.JSON(t)["nodes"].([]any)
			for _, x := range list {
				if n := x.(map[string]any); n["owner"] != "own" || n["conductor"] != h {
					t.Errorf("owner-reader ?conductor=%s lists %v (owner %v, conductor %v)", h, n["uuid"], n["owner"], n["conductor"])
				}
			}
			if len(list) != want {
				t.Errorf("owner-reader ?conductor=%s lists %d nodes, want %d", h, len(list), want)
			}
		}
		if got := clients["other-admin"].Do(t, "GET", "/v1/nodes?conductor=cf-a", nil).JSON(t)["nodes"].([]any); len(got) != 0 {
			t.Errorf("another project lists %d of own's nodes by conductor", len(got))
		}
		for _, h := range []string{"cf-dead", "no-such-host"} {
			if got := admin.Do(t, "GET", "/v1/nodes?conductor="+h, nil).JSON(t)["nodes"].([]any); len(got) != 0 {
				t.Errorf("?conductor=%s lists %d nodes, want none", h, len(got))
			}
		}
		// With conductor_group, both apply.
		if got := admin.Do(t, "GET", "/v1/nodes?conductor=cf-r&conductor_group=rack2", nil).JSON(t)["nodes"].([]any); len(got) != 4 {
			t.Errorf("?conductor=cf-r&conductor_group=rack2 lists %d, want 4", len(got))
		}
		if got := admin.Do(t, "GET", "/v1/nodes?conductor=cf-r&conductor_group=other", nil).JSON(t)["nodes"].([]any); len(got) != 0 {
			t.Errorf("?conductor=cf-r&conductor_group=other lists %d, want 0", len(got))
		}
		mustStatus(t, at(admin, "1.48").Do(t, "GET", "/v1/nodes?conductor=cf-a", nil), 406)

		bm := newCLI(t, srv.URL, "--os-auth-type", "http_basic", "--os-username", "system-admin", "--os-password", "password-system-admin")
		rows := bm.json("node", "list", "--conductor", "cf-r").([]any)
		var got []string
		for _, r := range rows {
			got = append(got, r.(map[string]any)["UUID"].(string))
		}
		slices.Sort(got)
		if len(got) != 4 {
			t.Errorf("node list --conductor cf-r: %v", got)
		}
		for _, id := range got {
			if !mapped["cf-r"][id] {
				t.Errorf("node list --conductor cf-r lists %s, which the ring maps elsewhere", id)
			}
		}
	})
}
