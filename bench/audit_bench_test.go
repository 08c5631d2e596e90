package bench

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// auditEvents is the size of the log the audit page is measured on.
const auditEvents = 100_000

// BenchmarkPortalAudit: the portal's audit page over a log of 100,000
// power changes on the fixture's 10,000 nodes by 200 users, as a system
// reader: the newest 50, a node by name with part of a rule's name, a
// week's range, and the power changes of that week. Each page names its nodes and users, found in one
// query for each, so its cost does not grow with the rows named.
//
//	go test -run '^$' -bench PortalAudit -benchtime 200x ./bench/
func BenchmarkPortalAudit(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			ctx := context.Background()
			db, err := store.Open(ctx, f.setting)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var ns []struct {
				UUID string `json:"uuid"`
				Name string `json:"name"`
			}
			if err := db.Node.Query().Select("uuid", "name").Scan(ctx, &ns); err != nil || len(ns) == 0 {
				b.Fatalf("fixture nodes: %d, %v", len(ns), err)
			}
			// The log once per backend: setup's fixture is shared.
			if n, err := db.AuditEvent.Query().Count(ctx); err != nil {
				b.Fatal(err)
			} else if n < auditEvents {
				start := time.Now().UTC().Add(-30 * 24 * time.Hour)
				for i := 0; i < auditEvents; i += 1000 {
					rows := make([]*ent.AuditEventCreate, 1000)
					for j := range rows {
						k := i + j
						rows[j] = db.AuditEvent.Create().SetCreatedAt(start.Add(time.Duration(k) * 25 * time.Second)).
							SetUser(fmt.Sprintf("bench-user-%03d", k%200)).SetScope("system").SetRule("baremetal:node:set_power_state").
							SetTargetType("node").SetTargetID(ns[k%len(ns)].UUID).SetResult("allowed").SetStatus(200).
							SetDetail(map[string]any{"target": []string{"power on", "power off"}[k%2], "was": []string{"power off", "power on"}[k%2]})
					}
					if err := db.AuditEvent.CreateBulk(rows...).Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
				if err := db.Analyze(ctx); err != nil {
					b.Fatal(err)
				}
			}
			srv := portalServer(b, f)
			c := portalClientAs(b, f, srv, "bench-audit", "--system", "--role", "reader")
			week := url.Values{"since": {time.Now().UTC().Add(-14 * 24 * time.Hour).Format("2006-01-02")},
				"until": {time.Now().UTC().Add(-7 * 24 * time.Hour).Format("2006-01-02")}}
			power := url.Values{"rule": {"power"}, "since": week["since"], "until": week["until"]}
			for _, p := range []struct{ name, query string }{
				{"newest", ""},
				{"node-by-name", url.Values{"node": {ns[len(ns)/2].Name}, "rule": {"power"}}.Encode()},
				{"week", week.Encode()},
				{"week-power", power.Encode()},
			} {
				b.Run(p.name, func(b *testing.B) { measurePage(b, srv, c, srv.url+"/audit?"+p.query, -1) })
			}
		})
	}
}
