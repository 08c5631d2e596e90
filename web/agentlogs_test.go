package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodeAgentLogs: a log kept after a failed deploy, as the conductor
// keeps it, is listed on the node page of a system admin (when, which
// run failed, size), newest first, and downloads as the very bytes
// stored; a log recorded before events named the run says none; the
// node's lessee member gets no section, a 403 for the log of the node
// she sees and a 404 for that of a node she does not.
func TestNodeAgentLogs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		keep := func(name, kind string, tgz []byte) string {
			t.Helper()
			logName, err := srv.Cond.AgentLogs().Save(ids[name], tgz)
			if err != nil {
				t.Fatal(err)
			}
			nid := srv.DB.Node.Query().Where(node.UUID(ids[name])).OnlyIDX(ctx)
			if err := history.Record(ctx, srv.DB.Client, history.Event{NodeID: nid, Severity: history.Warning, Type: kind,
				Message: agentlogs.KeptMessage(len(tgz), logName)}); err != nil {
				t.Fatal(err)
			}
			return logName
		}
		stored := []byte("\x1f\x8b\x08\x00 a gzipped tarball's bytes, passed through untouched")
		// A log kept before history events carried the failed run's kind
		// (type "agent") says no run rather than a wrong one.
		old := keep("f-00", "agent", []byte("\x1f\x8b an older failure"))
		leased := keep("f-00", "deploy", stored) // green leases f-00
		other := keep("f-01", "clean", []byte("\x1f\x8b red's node"))
		dl := "/nodes/" + ids["f-00"] + "/agent_logs/" + leased

		root := signInAs(t, srv, "root")
		st, page, _ := root.do("GET", "/nodes/"+ids["f-00"], nil)
		row := page[strings.Index(page, `data-testid="agent-log-`+leased+`"`)+1:]
		if st != 200 || !strings.Contains(page, "<h3>Agent logs</h3>") || !strings.Contains(page, `data-testid="agent-log-`+leased+`"`) {
			t.Fatalf("system admin's node page (%d) does not list agent log %s", st, leased)
		}
		row = row[:strings.Index(row, "</tr>")]
		for _, want := range []string{"<td>deploy</td>", fmt.Sprintf("<td>%d bytes</td>", len(stored)), `href="` + dl + `"`} {
			if !strings.Contains(row, want) {
				t.Errorf("agent log row lacks %q:\n%s", want, row)
			}
		}
		if strings.Index(page, `data-testid="agent-log-`+old+`"`) < strings.Index(page, `data-testid="agent-log-`+leased+`"`) {
			t.Errorf("the older log is listed before the newer")
		}
		if i := strings.Index(page, `data-testid="agent-log-`+old+`"`); i < 0 || !strings.Contains(page[i:i+strings.Index(page[i:], "</tr>")], "<td>not recorded</td>") {
			t.Errorf("the older log's row does not say its run is not recorded")
		}
		st, body, h := root.do("GET", dl, nil)
		if st != 200 || body != string(stored) || h.Get("Content-Type") != "application/gzip" ||
			!strings.Contains(h.Get("Content-Disposition"), leased) {
			t.Errorf("system admin's download: %d %q %v, want the %d bytes stored", st, body, h, len(stored))
		}
		if st, _, _ = root.do("GET", "/nodes/"+ids["f-00"]+"/agent_logs/"+other, nil); st != 404 {
			t.Errorf("another node's log under this node: %d, want 404", st)
		}

		gil := signInAs(t, srv, "gil") // green's member: lessee of f-00, nothing of f-01
		st, page, _ = gil.do("GET", "/nodes/"+ids["f-00"], nil)
		if st != 200 || strings.Contains(page, "<h3>Agent logs</h3>") || strings.Contains(page, `href="`+dl+`"`) {
			t.Errorf("lessee's node page (%d) shows the agent logs", st)
		}
		if st, body, _ = gil.do("GET", dl, nil); st != 403 || strings.Contains(body, string(stored)) {
			t.Errorf("lessee's download of her leased node's log: %d, want 403", st)
		}
		if st, _, _ = gil.do("GET", "/nodes/"+ids["f-01"]+"/agent_logs/"+other, nil); st != 404 {
			t.Errorf("lessee's download of a node she cannot see: %d, want 404", st)
		}
	})
}
