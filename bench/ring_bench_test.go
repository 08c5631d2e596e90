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
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkPowerSyncRing runs one power-sync cycle over 100,000 fake nodes
// on three replicas sharing one PostgreSQL database, all three at once as
// their loops would. The hash ring splits the nodes, so the cycle's wall
// time is the slowest replica's third; every node must be read exactly
// once (the three counts add up to the fleet).
func BenchmarkPowerSyncRing(b *testing.B) {
	const count = 100_000
	setting := storetest.Setting(b, "postgres")
	var srvs []*servertest.Server
	for _, name := range []string{"bench-a", "bench-b", "bench-c"} {
		srvs = append(srvs, servertest.Start(b, anvil.Options{Database: setting, AuthNone: true,
			Conductor: conductor.Config{Name: name, Heartbeat: time.Second, HeartbeatTimeout: time.Minute}}))
	}
	ctx := policies.WithPrincipal(context.Background(), systemAdmin)
	var sb strings.Builder
	sb.WriteString("name,driver\n")
	for i := range count {
		fmt.Fprintf(&sb, "ring-%06d,fake\n", i)
	}
	rows, err := nodes.ParseImport(strings.NewReader(sb.String()), "csv")
	if err != nil {
		b.Fatal(err)
	}
	if err := nodes.Import(ctx, srvs[0].DB, rows); err != nil {
		b.Fatal(err)
	}
	// Each conductor registers in Serve, after servertest.Start returned.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, _ := srvs[0].DB.Conductor.Query().Count(ctx); n == len(srvs) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("conductors did not register")
		}
	}
	read := make([]int, len(srvs))
	cycle := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for i, s := range srvs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := s.Cond.SyncPower(context.Background())
				if err != nil {
					b.Error(err)
				}
				read[i] = n
			}()
		}
		wg.Wait()
		if read[0]+read[1]+read[2] != count {
			b.Fatalf("one cycle read %v = %d nodes, want each of %d once", read, read[0]+read[1]+read[2], count)
		}
		return time.Since(start)
	}
	// The first cycle also writes every node's first power state and its
	// history event; later ones only read, as a fleet at rest does.
	first := cycle()
	b.ResetTimer()
	var last time.Duration
	for range b.N {
		last = cycle()
	}
	b.ReportMetric(first.Seconds(), "first-cycle-s")
	b.ReportMetric(last.Seconds(), "cycle-s")
	for i, n := range read {
		b.ReportMetric(float64(n), fmt.Sprintf("nodes-%c", 'a'+i))
	}
}
