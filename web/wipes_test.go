package web_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestWipePages: a fake-hardware node's provide leaves a "not wiped"
// record, which the lessee's member finds on the node page, on "My
// allocations" and on the record's own page, and which never says the
// disks were wiped; a record of a node of another project is a 404.
func TestWipePages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		gil := signInAs(t, srv, "gil") // green: lessee of f-00, nothing of f-01
		record := func(name string) string {
			t.Helper()
			id := ids[name]
			for _, target := range []string{"manage", "provide"} {
				if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": target}); r.Status != 202 {
					t.Fatalf("%s: %d %s", target, r.Status, r.Body)
				}
				waitState(t, api, id, map[string]string{"manage": "manageable", "provide": "available"}[target])
			}
			recs := api.Do(t, "GET", "/v1/wipe_records?node="+id, nil).JSON(t)["wipe_records"].([]any)
			if len(recs) != 1 {
				t.Fatalf("%s: %d wipe records", name, len(recs))
			}
			return recs[0].(map[string]any)["uuid"].(string)
		}
		mine, theirs := record("f-00"), record("f-01")

		st, page, _ := gil.do("GET", "/nodes/"+ids["f-00"], nil)
		if st != 200 || !strings.Contains(page, `data-testid="wipe-`+mine+`"`) || !strings.Contains(page, "not wiped") {
			t.Errorf("node page (%d) does not list the not-wiped record %s", st, mine)
		}
		st, page, _ = gil.do("GET", "/wipes/"+mine, nil)
		if st != 200 || !strings.Contains(page, `data-testid="wipe-result">not wiped<`) || !strings.Contains(page, "fake hardware") ||
			strings.Contains(page, "disks are wiped") {
			t.Errorf("wipe record page (%d):\n%s", st, page)
		}
		if st, page, _ = gil.do("GET", "/allocations", nil); st != 200 || !strings.Contains(page, `data-testid="wipe-`+mine+`"`) || strings.Contains(page, theirs) {
			t.Errorf("My allocations (%d) does not list exactly green's wipe records", st)
		}
		if st, _, _ = gil.do("GET", "/wipes/"+theirs, nil); st != 404 {
			t.Errorf("another project's wipe record: %d, want 404", st)
		}
	})
}
