package web_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodePageFactsAndHistory: the node page shows the hardware its
// properties record, its allocation and instance, and its whole history
// newest first in pages of 25, each time with its zone; another project
// gets 404 for any page of it.
func TestNodePageFactsAndHistory(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		n, err := srv.DB.Node.Query().Where(node.UUID(ids["f-00"])).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inst := "6f1c1a3e-0a4b-4c4e-9d7e-1f2a3b4c5d6e"
		if err := n.Update().SetInstanceUUID(inst).SetInstanceInfo(map[string]any{"display_name": "web-frontend"}).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		var evs []history.Event
		for i := range 30 {
			evs = append(evs, history.Event{NodeID: n.ID, Type: "power", Message: fmt.Sprintf("event number %02d", i), User: "pat"})
		}
		for _, e := range evs {
			if err := history.Record(ctx, srv.DB.Client, e); err != nil {
				t.Fatal(err)
			}
		}
		pat := signInAs(t, srv, "pat")
		_, page, _ := pat.do("GET", "/nodes/"+ids["f-00"], nil)
		for _, want := range []string{
			"<dt>Resource class</dt><dd>gpu</dd>", "<dt>CPUs</dt><dd>8</dd>", "<dt>Memory</dt><dd>32 GiB</dd>",
			"<dt>Local disk</dt><dd>480 GB</dd>", "<dt>Architecture</dt><dd>x86_64</dd>", "not allocated",
			"<code>" + inst + "</code> (web-frontend)", "Page 1 of 2 (30 events, newest first)",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("node page lacks %s", want)
			}
		}
		if !regexp.MustCompile(`<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>`).MatchString(page) {
			t.Errorf("history times lack their zone")
		}
		first, last := strings.Index(page, "event number 29"), strings.Index(page, "event number 05")
		if first < 0 || last < 0 || first > last || strings.Contains(page, "event number 04") || !strings.Contains(page, `?history=2" rel="next">Older`) {
			t.Errorf("history page 1 is not the newest 25, newest first")
		}
		_, page, _ = pat.do("GET", "/nodes/"+ids["f-00"]+"?history=2", nil)
		if !strings.Contains(page, "event number 04") || !strings.Contains(page, "event number 00") || strings.Contains(page, "event number 05") ||
			!strings.Contains(page, `?history=1" rel="prev">Newer`) {
			t.Errorf("history page 2 is not the oldest 5")
		}
		// The status poll keeps the page of history it was on.
		if _, frag, _ := pat.do("GET", "/nodes/"+ids["f-00"]+"/status?history=2", nil, "HX-Request", "true"); !strings.Contains(frag, "event number 00") {
			t.Errorf("status fragment lost the history page")
		}
		gil := signInAs(t, srv, "gil")
		if st, _, _ := gil.do("GET", "/nodes/"+ids["f-01"]+"?history=2", nil); st != 404 {
			t.Errorf("another project's node history: %d", st)
		}
	})
}
