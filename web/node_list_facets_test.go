package web_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var pickOption = regexp.MustCompile(`<option value="([^"]*)"( selected)? data-count="(\d+)">`)

// picksOf is a pick-list's choices and counts, and which is chosen.
func picksOf(t *testing.T, page, name string) (map[string]int, string) {
	t.Helper()
	i := strings.Index(page, `data-testid="pick-`+name+`"`)
	if i < 0 {
		t.Fatalf("no %s pick-list", name)
	}
	sel := page[i:]
	sel = sel[:strings.Index(sel, "</select>")]
	out, chosen := map[string]int{}, ""
	for _, m := range pickOption.FindAllStringSubmatch(sel, -1) {
		var n int
		fmt.Sscan(m[3], &n)
		out[m[1]] = n
		if m[2] != "" {
			chosen = m[1]
		}
	}
	return out, chosen
}

// TestNodeListPicks: the owner, lessee, trait, class, state, power and
// fault filters are pick-lists whose counts are the nodes the viewer may
// see under the other filters (a pick-list's own filter aside), on both
// databases; a project member's counts leave out the nodes it cannot see,
// and its owner and lessee lists offer only its own project.
func TestNodeListPicks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-05"])).SetProvisionState("clean failed").SetFault("clean failure").
			SetMaintenance(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-02"])).SetPowerState("power on").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		check := func(b *browser, query, name string, want map[string]int, chosen string) {
			t.Helper()
			st, page, _ := b.do("GET", "/nodes?"+query, nil)
			got, sel := picksOf(t, page, name)
			if st != 200 || !maps.Equal(got, want) || sel != chosen {
				t.Errorf("/nodes?%s %s: %d %v chosen %q, want %v chosen %q", query, name, st, got, sel, want, chosen)
			}
		}
		root := signInAs(t, srv, "root")
		check(root, "", "owner", map[string]int{"blue": 6, "red": 6}, "")
		check(root, "", "lessee", map[string]int{"green": 4}, "")
		check(root, "", "class", map[string]int{"gpu": 3, "small": 9}, "")
		check(root, "", "trait", map[string]int{"CUSTOM_X": 4}, "")
		check(root, "", "state", map[string]int{"enroll": 11, "clean failed": 1}, "")
		check(root, "", "power", map[string]int{"power on": 1, "unknown": 11}, "")
		check(root, "", "fault", map[string]int{"clean failure": 1}, "")
		// Each list counts under the other filters, not its own.
		check(root, "owner=red", "owner", map[string]int{"blue": 6, "red": 6}, "red")
		check(root, "owner=red", "lessee", map[string]int{"green": 2}, "")
		check(root, "owner=red", "class", map[string]int{"small": 6}, "")
		check(root, "owner=red&class=small", "trait", map[string]int{"CUSTOM_X": 2}, "")
		check(root, "trait=custom_x", "owner", map[string]int{"blue": 2, "red": 2}, "")
		check(root, "trait=custom_x", "trait", map[string]int{"CUSTOM_X": 4}, "CUSTOM_X")
		check(root, "class=gpu", "power", map[string]int{"unknown": 3}, "")
		check(root, "maint=yes", "fault", map[string]int{"clean failure": 1}, "")
		// A chosen value nothing has left is still shown, at 0.
		check(root, "owner=blue&class=nothing", "class", map[string]int{"gpu": 3, "small": 3, "nothing": 0}, "nothing")
		// The fault filter narrows the list.
		if _, page, _ := root.do("GET", "/nodes?fault=clean+failure", nil); !slices.Equal(names(page), []string{"f-05"}) ||
			!strings.Contains(page, `data-testid="row-fault">clean failure</span>`) {
			t.Errorf("fault filter shows %v", names(page))
		}

		// pat (blue) sees blue's six nodes only: its counts leave red's
		// out, and it is offered no other owner or lessee to filter by.
		pat := signInAs(t, srv, "pat")
		check(pat, "", "owner", map[string]int{"blue": 6}, "")
		check(pat, "", "lessee", map[string]int{}, "")
		check(pat, "", "class", map[string]int{"gpu": 3, "small": 3}, "")
		check(pat, "", "trait", map[string]int{"CUSTOM_X": 2}, "")
		check(pat, "", "power", map[string]int{"power on": 1, "unknown": 5}, "")
		check(pat, "", "fault", map[string]int{}, "")
		// gil (green) leases f-00, f-03, f-06 and f-09 from blue and red:
		// it may filter by green as lessee, never by their owners.
		gil := signInAs(t, srv, "gil")
		check(gil, "", "owner", map[string]int{}, "")
		check(gil, "", "lessee", map[string]int{"green": 4}, "")
		check(gil, "class=gpu", "trait", map[string]int{"CUSTOM_X": 1}, "")
	})
}

var groupHeader = regexp.MustCompile(`<tr class="group" data-testid="group"><th scope="rowgroup" colspan="10">\s*(?:<span class="muted">none</span>|([^<]*?))\s*<span class="muted" data-testid="group-count">([^<]*)</span>`)

// groupsOf are a page's group headers: label and count line.
func groupsOf(page string) []string {
	var out []string
	for _, m := range groupHeader.FindAllStringSubmatch(page, -1) {
		out = append(out, strings.TrimSpace(m[1])+": "+strings.Join(strings.Fields(m[2]), " "))
	}
	return out
}

// TestNodeListGroupsAndPageJump: grouped rows come in runs of the grouped
// column under headers counting the whole group, and say how much of it
// the page shows; the page jump keeps the rest of the view, which is all
// in the URL; rows show the hardware, traits and lease on one line.
func TestNodeListGroupsAndPageJump(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		for i := range 14 {
			if r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("g-%02d", i), "driver": "fake", "owner": "blue"}); r.Status != 201 {
				t.Fatalf("create: %d %s", r.Status, r.Body)
			}
		}
		root := signInAs(t, srv, "root")
		_, page, _ := root.do("GET", "/nodes?group=owner&size=25", nil)
		got := names(page)
		if len(got) != 25 || got[0] != "f-00" || got[5] != "f-10" || got[6] != "g-00" || got[19] != "g-13" || got[20] != "f-01" || got[24] != "f-09" {
			t.Errorf("grouped by owner, page 1: %v", got)
		}
		if g := groupsOf(page); !slices.Equal(g, []string{"blue: 20 nodes", "red: 6 nodes , 5 on this page"}) {
			t.Errorf("page 1 groups: %q", g)
		}
		// The page jump: a form keeping the other parameters.
		for _, want := range []string{`<form method="get" action="/nodes" class="jump">`, `<input type="hidden" name="group" value="owner">`,
			`<input type="hidden" name="size" value="25">`, `name="page" type="number" min="1" max="2" value="1"`, "<span>of 2</span>"} {
			if !strings.Contains(page, want) {
				t.Errorf("page jump lacks %s", want)
			}
		}
		if strings.Contains(page, `type="hidden" name="page"`) {
			t.Error("the page jump carries the current page too")
		}
		_, page, _ = root.do("GET", "/nodes?group=owner&size=25&page=2", nil)
		if got := names(page); !slices.Equal(got, []string{"f-11"}) || !slices.Equal(groupsOf(page), []string{"red: 6 nodes , 1 on this page"}) {
			t.Errorf("page 2: %v %q", got, groupsOf(page))
		}
		// Groups by class: nodes without one are a group of their own.
		_, page, _ = root.do("GET", "/nodes?group=class&owner=red", nil)
		if g := groupsOf(page); !slices.Equal(g, []string{"small: 6 nodes"}) {
			t.Errorf("red by class: %q", g)
		}
		_, page, _ = root.do("GET", "/nodes?group=class&trait=custom_x&sort=name&dir=desc", nil)
		if got, g := names(page), groupsOf(page); !slices.Equal(got, []string{"f-00", "f-09", "f-06", "f-03"}) || !slices.Equal(g, []string{"gpu: 1 node", "small: 3 nodes"}) {
			t.Errorf("by class, name descending: %v %q", got, g)
		}
		_, page, _ = root.do("GET", "/nodes?group=state", nil)
		if g := groupsOf(page); !slices.Equal(g, []string{"enroll: 26 nodes"}) {
			t.Errorf("by state: %q", g)
		}
		// Ungrouped: no headers; an unknown grouping is none.
		if _, page, _ = root.do("GET", "/nodes?group=driver", nil); len(groupsOf(page)) != 0 || len(names(page)) != 26 {
			t.Errorf("group=driver: %q %d rows", groupsOf(page), len(names(page)))
		}
		// A row: hardware from properties, traits, owner → lessee, on one line.
		row := page[strings.Index(page, `data-node="`+ids["f-00"]):]
		row = row[:strings.Index(row, "</tr>")]
		for _, want := range []string{`data-label="CPUs" class="num">8</td>`, `data-label="RAM" class="num">32 GiB</td>`, `data-label="Disk" class="num">480 GB</td>`,
			`<span class="trait">CUSTOM_X</span>`, `<span class="owner">blue</span>`, `<span class="lessee">green</span>`, `data-label="Class">gpu</td>`} {
			if !strings.Contains(row, want) {
				t.Errorf("row lacks %s:\n%s", want, row)
			}
		}
		// pat groups only what it sees: blue's 20.
		pat := signInAs(t, srv, "pat")
		if _, page, _ = pat.do("GET", "/nodes?group=lessee&size=25", nil); !slices.Equal(groupsOf(page), []string{": 18 nodes", "green: 2 nodes"}) &&
			!slices.Equal(groupsOf(page), []string{"green: 2 nodes", ": 18 nodes"}) {
			t.Errorf("pat by lessee: %q", groupsOf(page))
		}
	})
}
