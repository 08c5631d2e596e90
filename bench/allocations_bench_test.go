package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkRestrictedAllocations makes 500 restricted allocations, 8 at a
// time, across 50 projects over 10,000 available nodes.
func BenchmarkRestrictedAllocations(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, backend), AuthNone: true})
			sys := policies.WithPrincipal(context.Background(), systemAdmin)
			var sb strings.Builder
			sb.WriteString("name,driver,owner,lessee,resource_class\n")
			for i := 0; i < fleet; i++ {
				fmt.Fprintf(&sb, "al-%05d,fake,p%03d,p%03d,baremetal\n", i, i%projects, (i+1)%projects)
			}
			rows, err := nodes.ParseImport(strings.NewReader(sb.String()), "csv")
			if err != nil {
				b.Fatal(err)
			}
			if err := nodes.Import(sys, srv.DB, rows); err != nil {
				b.Fatal(err)
			}
			// Setup only: take every node to available in one statement.
			if _, err := srv.DB.Node.Update().SetProvisionState(nodes.StateAvailable).Save(sys); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i := 0; i < 500; i++ {
				wg.Add(1)
				sem <- struct{}{}
				go func(i int) {
					defer func() { <-sem; wg.Done() }()
					p := &policies.Principal{User: "u", Project: fmt.Sprintf("p%03d", i%50), Roles: policies.ExpandRoles([]string{"member"})}
					ctx := policies.WithPrincipal(context.Background(), p)
					a, err := srv.Allocations.Create(ctx, allocations.Input{ResourceClass: "baremetal"})
					if err == nil {
						a, err = srv.Allocations.Await(ctx, a, time.Minute)
					}
					if err != nil || a.State != allocations.StateActive {
						b.Errorf("allocation %d: %v %v", i, err, a)
					}
				}(i)
			}
			wg.Wait()
			b.ReportMetric(500/time.Since(start).Seconds(), "allocations/s")
		})
	}
}
