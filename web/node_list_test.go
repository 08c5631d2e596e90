package web_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// fleet serves a portal with root (system admin), pat (member of blue)
// and a dozen nodes: f-00…f-11, owned by blue (even) or red (odd), every
// third leased to green, class gpu for i%4==0 else small, CUSTOM_X on
// i%3==0. It returns the server, an admin API client and the nodes'
// UUIDs by name.
func fleet(t *testing.T, setting string) (*servertest.Server, *servertest.Client, map[string]string) {
	t.Helper()
	return fleetWith(t, server.Options{Database: setting})
}

// fleetWith is fleet on a server started with o.
func fleetWith(t *testing.T, o server.Options) (*servertest.Server, *servertest.Client, map[string]string) {
	t.Helper()
	srv := servertest.Start(t, o)
	ctx := context.Background()
	for user, a := range map[string]identity.Assignment{
		"root": {Scope: identity.Scope{System: true}, Role: "admin"},
		"pat":  {Scope: identity.Scope{Project: "blue"}, Role: "member"},
		"gil":  {Scope: identity.Scope{Project: "green"}, Role: "member"},
	} {
		if err := srv.IDs.CreateUser(ctx, user, user+"-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, user, a); err != nil {
			t.Fatal(err)
		}
	}
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	ids := map[string]string{}
	for i := range 12 {
		n := map[string]any{"name": fmt.Sprintf("f-%02d", i), "driver": "fake", "owner": []string{"blue", "red"}[i%2], "resource_class": "small",
			"properties": map[string]any{"cpus": 8, "memory_mb": 32768, "local_gb": 480, "cpu_arch": "x86_64"}}
		if i%4 == 0 {
			n["resource_class"] = "gpu"
		}
		if i%3 == 0 {
			n["lessee"] = "green"
		}
		r := api.Do(t, "POST", "/v1/nodes", n)
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		ids[n["name"].(string)] = r.JSON(t)["uuid"].(string)
		if i%3 == 0 {
			api.Do(t, "PUT", "/v1/nodes/"+ids[n["name"].(string)]+"/traits/CUSTOM_X", nil)
		}
	}
	return srv, api, ids
}

func signInAs(t *testing.T, srv *servertest.Server, user string) *browser {
	t.Helper()
	b := newBrowser(t, srv.URL)
	b.do("GET", "/login", nil)
	if st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}}); st != 303 {
		t.Fatalf("sign in %s: %d", user, st)
	}
	b.do("GET", "/nodes", nil)
	return b
}

var rowName = regexp.MustCompile(`<tr data-node="[^"]+"[^>]*>\s*<td><input[^>]*></td>\s*<td data-label="Name"[^>]*><a href="[^"]+"[^>]*>\s*([^<]+)</a>`)

// names are the node names a list page shows, in order.
func names(page string) []string {
	var out []string
	for _, m := range rowName.FindAllStringSubmatch(page, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// TestNodeListFilters: every filter of the bar, kept in the URL, narrows
// the list in SQL on both databases; sorting, page size, the count line
// and the summary strip follow the filters; a failed node stands out with
// its last error; a project member sees only its nodes and may not filter
// by another project.
func TestNodeListFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		// f-05 failed a clean; f-07 is in maintenance; f-02 is powered on.
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-05"])).SetProvisionState("clean failed").
			SetLastError("Failed to verify the BMC: the BMC did not answer").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-07"])).SetMaintenance(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-02"])).SetPowerState("power on").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		root := signInAs(t, srv, "root")
		for _, c := range []struct {
			query string
			want  []string
		}{
			{"", []string{"f-00", "f-01", "f-02", "f-03", "f-04", "f-05", "f-06", "f-07", "f-08", "f-09", "f-10", "f-11"}},
			{"q=F-1", []string{"f-10", "f-11"}},
			// LIKE's wildcards in a search are plain characters.
			{"q=f_1", nil},
			{"q=%25", nil},
			// and so is the escape character: "f\-1" is no "f-1".
			{"q=f%5C-1", nil},
			{"q=" + ids["f-03"][:8], []string{"f-03"}},
			{"state=clean+failed", []string{"f-05"}},
			{"power=power+on", []string{"f-02"}},
			{"power=unknown&owner=blue", []string{"f-00", "f-04", "f-06", "f-08", "f-10"}},
			{"owner=red&lessee=green", []string{"f-03", "f-09"}},
			{"trait=custom_x", []string{"f-00", "f-03", "f-06", "f-09"}},
			{"class=gpu", []string{"f-00", "f-04", "f-08"}},
			{"maint=yes", []string{"f-07"}},
			{"maint=no&class=gpu&owner=blue", []string{"f-00", "f-04", "f-08"}},
			{"failed=1", []string{"f-05"}},
			{"sort=name&dir=desc&size=25&owner=red", []string{"f-11", "f-09", "f-07", "f-05", "f-03", "f-01"}},
			{"sort=owner&class=gpu", []string{"f-00", "f-04", "f-08"}},
			// Out-of-range values fall back to the defaults.
			{"state=bogus&sort=nope&size=7&page=-3&maint=maybe&q=f-0", []string{"f-00", "f-01", "f-02", "f-03", "f-04", "f-05", "f-06", "f-07", "f-08", "f-09"}},
		} {
			st, page, _ := root.do("GET", "/nodes?"+c.query, nil)
			if got := names(page); st != 200 || !slices.Equal(got, c.want) {
				t.Errorf("/nodes?%s: %d %v, want %v", c.query, st, got, c.want)
			}
			if len(c.want) > 0 && !strings.Contains(page, fmt.Sprintf("1–%d of %d", len(c.want), len(c.want))) {
				t.Errorf("/nodes?%s: no count line for %d", c.query, len(c.want))
			}
		}
		// Size and pages: 5 a page would not do (sizes are 25, 50, 100, 200).
		_, page, _ := root.do("GET", "/nodes?size=25&page=2", nil)
		if len(names(page)) != 0 || !strings.Contains(page, `rel="prev"`) {
			t.Errorf("page 2 of 12 at 25 a page shows %v", names(page))
		}
		// Sort links toggle direction and keep the filters.
		_, page, _ = root.do("GET", "/nodes?owner=red", nil)
		if !strings.Contains(page, `href="/nodes?dir=desc&amp;owner=red"`) || !strings.Contains(page, `aria-sort="ascending"`) {
			t.Errorf("sort header links:\n%s", page)
		}
		// The summary strip counts by state under the other filters, and
		// each entry filters by its state.
		_, page, _ = root.do("GET", "/nodes?owner=red", nil)
		for _, want := range []string{
			`data-testid="summary-all">All <b>6</b>`,
			`data-state="enroll">enroll <b>5</b>`,
			`data-state="clean failed">clean failed <b>1</b>`,
			`href="/nodes?owner=red&amp;state=clean+failed"`,
			`data-testid="summary-failed"><span aria-hidden="true">✕</span> has failed <b>1</b>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("summary strip lacks %s", want)
			}
		}
		// The failed node stands out: its row is marked, its badge says
		// so with an icon, and its last error is on the row.
		row := page[strings.Index(page, `data-node="`+ids["f-05"]):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `class="failed"`) || !strings.Contains(row, `state-bad`) || !strings.Contains(row, `✕</span> clean failed`) ||
			!strings.Contains(row, `title="Failed to verify the BMC: the BMC did not answer"`) {
			t.Errorf("failed row:\n%s", row)
		}

		// A project member: only blue's nodes, whatever the filters ask.
		pat := signInAs(t, srv, "pat")
		_, page, _ = pat.do("GET", "/nodes", nil)
		if got := names(page); !slices.Equal(got, []string{"f-00", "f-02", "f-04", "f-06", "f-08", "f-10"}) || !strings.Contains(page, "All <b>6</b>") {
			t.Errorf("member of blue sees %v", got)
		}
		st, page, _ := pat.do("GET", "/nodes?owner=red", nil)
		if st != 200 || len(names(page)) != 0 || !strings.Contains(page, "may only filter by its own project as owner") || namesF01.MatchString(page) {
			t.Errorf("member filtering by another owner: %d %v", st, names(page))
		}
		if _, page, _ = pat.do("GET", "/nodes?q=f-05", nil); len(names(page)) != 0 || strings.Contains(page, "f-05") && !strings.Contains(page, `value="f-05"`) {
			t.Errorf("member searching for another project's node: %v", names(page))
		}
	})
}
