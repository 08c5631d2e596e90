package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/campaignnode"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkCampaign rolls a one-step runbook over 10,000 fake nodes as a
// campaign with max_concurrency 500, and reports nodes/s and the
// conductor's overhead per node: the process CPU per node of the
// campaign less that of the same runbook started directly on the same
// nodes, 500 at a time, as a baseline. Each node must run the
// campaign's runbook exactly once.
func BenchmarkCampaign(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, backend), AuthNone: true})
			ctx := policies.WithPrincipal(context.Background(), systemAdmin)
			const count, conc = 10000, 500
			step := []runbooks.Step{{Interface: "power", Step: "power_on", Order: 1}}
			for _, name := range []string{"CUSTOM_BASE", "CUSTOM_ROLL"} {
				if _, err := srv.Runbooks.Create(ctx, runbooks.Input{Name: name, Public: true, Steps: step}); err != nil {
					b.Fatal(err)
				}
			}
			recs := make([]nodes.ImportRecord, count)
			for i := range recs {
				recs[i] = nodes.ImportRecord{Line: i + 1, Node: nodes.CreateInput{UUID: uuid.NewString(), Name: ptr(fmt.Sprintf("roll-%05d", i)), Driver: "fake",
					ProvisionState: nodes.StateManageable}, Traits: []string{"CUSTOM_BASE", "CUSTOM_ROLL"}}
			}
			if err := nodes.Import(ctx, srv.DB, recs); err != nil {
				b.Fatal(err)
			}
			ids, err := srv.DB.Node.Query().Select(node.FieldUUID).Strings(ctx)
			if err != nil {
				b.Fatal(err)
			}
			settled := func(since time.Time) {
				for {
					n, err := srv.DB.Node.Query().Where(node.Or(node.ProvisionStateNEQ(nodes.StateManageable), node.ReservationNotNil())).Count(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						return
					}
					if time.Since(since) > 15*time.Minute {
						b.Fatalf("%d nodes still busy after 15 minutes", n)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			// Baseline: the runbook started directly, 500 at a time.
			ops := srv.Portal.Ops
			start, cpu0 := time.Now(), cpuTime()
			var wg sync.WaitGroup
			sem := make(chan struct{}, conc)
			for _, id := range ids {
				wg.Add(1)
				sem <- struct{}{}
				go func(id string) {
					defer func() { <-sem; wg.Done() }()
					if err := ops.Provision(ctx, id, conductor.ProvisionRequest{Target: "clean", Runbook: "CUSTOM_BASE"}); err != nil {
						b.Error(err)
					}
				}(id)
			}
			wg.Wait()
			settled(start)
			base, baseCPU := time.Since(start), cpuTime()-cpu0

			b.ResetTimer()
			start, cpu0 = time.Now(), cpuTime()
			v, err := srv.Campaigns.Create(ctx, &campaigns.Input{Name: "roll", Runbook: "CUSTOM_ROLL",
				NodeQuery: &campaigns.NodeQuery{Traits: []string{"CUSTOM_ROLL"}}, MaxConcurrency: ptr(conc)})
			if err != nil {
				b.Fatal(err)
			}
			created := time.Since(start)
			for {
				c, err := srv.Campaigns.Get(ctx, v.UUID)
				if err != nil {
					b.Fatal(err)
				}
				if c.FinishedAt != nil {
					if c.State != campaigns.StateCompleted || c.Counts.Succeeded != count {
						b.Fatalf("campaign %s: %+v", c.State, c.Counts)
					}
					break
				}
				if time.Since(start) > 15*time.Minute {
					b.Fatalf("campaign still %s after 15 minutes: %+v", c.State, c.Counts)
				}
				time.Sleep(50 * time.Millisecond)
			}
			total, cpu := time.Since(start), cpuTime()-cpu0
			b.StopTimer()
			// No node ran twice: one start of the campaign's runbook per node.
			var runs []struct {
				NodeID int `json:"node_id"`
				Count  int `json:"count"`
			}
			if err := srv.DB.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Runbook CUSTOM_ROLL")).
				GroupBy(nodeevent.FieldNodeID).Aggregate(ent.Count()).Scan(ctx, &runs); err != nil {
				b.Fatal(err)
			}
			for _, r := range runs {
				if r.Count != 1 {
					b.Fatalf("node %d ran the campaign's runbook %d times", r.NodeID, r.Count)
				}
			}
			if len(runs) != count {
				b.Fatalf("%d nodes ran the campaign's runbook, want %d", len(runs), count)
			}
			if n, _ := srv.DB.CampaignNode.Query().Where(campaignnode.StatusNEQ(campaigns.NodeSucceeded)).Count(ctx); n != 0 {
				b.Fatalf("%d campaign rows not succeeded", n)
			}
			b.ReportMetric(created.Seconds(), "create-s")
			b.ReportMetric(total.Seconds(), "total-s")
			b.ReportMetric(count/total.Seconds(), "nodes/s")
			b.ReportMetric(count/base.Seconds(), "direct-nodes/s")
			b.ReportMetric(float64(cpu.Microseconds())/1000/count, "cpu-ms/node")
			b.ReportMetric(float64((cpu-baseCPU).Microseconds())/1000/count, "overhead-cpu-ms/node")
		})
	}
}

func ptr[T any](v T) *T { return &v }
