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
		for _, q := range []string{"", "&sort_key=hostname", "&sort_key=hostname&sort_dir=desc", "&sort_key=conductor_group", "&sort_key=updated_at&sort_dir=desc"} {
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
