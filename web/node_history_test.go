package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRunbookRunInHistory: a runbook run from the portal leaves an event
// naming the runbook and who ran it, which the node's history shows.
func TestRunbookRunInHistory(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		ctx := context.Background()
		if err := srv.DB.Node.Update().Where(node.UUID(ids["f-00"])).SetProvisionState("manageable").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		r := api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_X", "public": true,
			"steps": []map[string]any{{"interface": "power", "step": "power_on", "order": 1}}})
		if r.Status != 201 {
			t.Fatalf("runbook: %d %s", r.Status, r.Body)
		}
		rb := r.JSON(t)["uuid"].(string)
		pat := signInAs(t, srv, "pat")
		if st, _, _ := pat.do("POST", "/nodes/"+ids["f-00"]+"/runbook", url.Values{"csrf": {pat.csrf}, "runbook": {rb}}, "HX-Request", "true"); st != 200 {
			t.Fatalf("run: %d", st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, page, _ := pat.do("GET", "/nodes/"+ids["f-00"], nil)
			if strings.Contains(page, "All 1 clean steps done") {
				if !strings.Contains(page, `<td data-label="Event">Runbook CUSTOM_X, run by pat: clean with 1 step(s)</td><td data-label="By">pat</td>`) {
					t.Fatalf("history lacks the runbook and who ran it:\n%s", section(t, page, "status"))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run never finished:\n%s", section(t, page, "status"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The event stays true to the run when the runbook is renamed.
		if r := api.Do(t, "PATCH", "/v1/runbooks/"+rb, []map[string]any{{"op": "replace", "path": "/name", "value": "CUSTOM_Y"}}); r.Status != 200 {
			t.Fatalf("rename: %d %s", r.Status, r.Body)
		}
		if _, page, _ := pat.do("GET", "/nodes/"+ids["f-00"], nil); !strings.Contains(page, "Runbook CUSTOM_X, run by pat") {
			t.Errorf("the history lost the runbook's name at the run")
		}
	})
}
