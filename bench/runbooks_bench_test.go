package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkRunbookList lists a project's runbooks among 1,000: 50 for
// each of 18 projects plus 100 public, through the service the API calls.
func BenchmarkRunbookList(b *testing.B) {
	srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, "sqlite"), AuthNone: true})
	sys := policies.WithPrincipal(context.Background(), systemAdmin)
	steps := []runbooks.Step{{Interface: "power", Step: "reboot", Order: 1}}
	for i := 0; i < 1000; i++ {
		in := runbooks.Input{Name: fmt.Sprintf("CUSTOM_RB_%04d", i), Steps: steps}
		if i < 100 {
			in.Public = true
		} else {
			owner := fmt.Sprintf("proj-%02d", (i-100)/50)
			in.Owner = &owner
		}
		if _, err := srv.Runbooks.Create(sys, in); err != nil {
			b.Fatal(err)
		}
	}
	member := policies.WithPrincipal(context.Background(), &policies.Principal{User: "m", Project: "proj-07", Roles: policies.ExpandRoles([]string{"member"})})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		rs, _, err := srv.Runbooks.List(member, runbooks.ListOptions{})
		if err != nil || len(rs) != 150 {
			b.Fatalf("listed %d runbooks: %v", len(rs), err)
		}
		lat = append(lat, time.Since(t))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkRunbookService services 1,000 active fake nodes with one
// three-step runbook at once.
func BenchmarkRunbookService(b *testing.B) {
	srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, "sqlite"), AuthNone: true})
	ctx := policies.WithPrincipal(context.Background(), systemAdmin)
	if _, err := srv.Runbooks.Create(ctx, runbooks.Input{Name: "CUSTOM_FW", Public: true, Steps: []runbooks.Step{
		{Interface: "power", Step: "power_off", Order: 1}, {Interface: "management", Step: "set_boot_device", Args: map[string]any{"device": "pxe"}, Order: 2},
		{Interface: "power", Step: "power_on", Order: 3}}}); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 1000)
	for i := range ids {
		v, err := srv.Nodes.Create(ctx, nodes.CreateInput{Driver: "fake", ProvisionState: nodes.StateActive})
		if err != nil {
			b.Fatal(err)
		}
		if err := srv.Nodes.AddTrait(ctx, v.UUID, "CUSTOM_FW"); err != nil {
			b.Fatal(err)
		}
		ids[i] = v.UUID
	}
	ops := srv.Portal.Ops
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			if err := ops.Provision(ctx, id, conductor.ProvisionRequest{Target: "service", Runbook: "CUSTOM_FW"}); err != nil {
				b.Error(err)
			}
		}(id)
	}
	wg.Wait()
	for {
		n, _ := srv.DB.Node.Query().Where(node.Or(node.ProvisionStateNEQ(nodes.StateActive), node.ReservationNotNil())).Count(ctx)
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportMetric(time.Since(start).Seconds(), "total-s")
}
