package bench

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var systemAdmin = &policies.Principal{User: "bench", System: true, Roles: policies.ExpandRoles([]string{"admin"})}

// BenchmarkCleaning cleans 1,000 fake nodes at once with 5 steps each,
// through the same service calls the API makes, and reports steps/s.
func BenchmarkCleaning(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, backend), AuthNone: true})
			ctx := policies.WithPrincipal(context.Background(), systemAdmin)
			const count, perNode = 1000, 5
			ids := make([]string, count)
			for i := range ids {
				v, err := srv.Nodes.Create(ctx, nodes.CreateInput{Driver: "fake", ProvisionState: nodes.StateManageable})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = v.UUID
			}
			ops := &conductor.Ops{C: srv.Cond, Nodes: srv.Nodes, Guard: srv.Guard}
			st := []conductor.Step{{Interface: "power", Step: "power_on"}, {Interface: "management", Step: "set_boot_device", Args: map[string]any{"device": "pxe"}},
				{Interface: "power", Step: "reboot"}, {Interface: "management", Step: "reset_bmc"}, {Interface: "power", Step: "power_off"}}
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 32)
			for _, id := range ids {
				wg.Add(1)
				sem <- struct{}{}
				go func(id string) {
					defer func() { <-sem; wg.Done() }()
					if err := ops.Provision(ctx, id, conductor.ProvisionRequest{Target: "clean", CleanSteps: st}); err != nil {
						b.Error(err)
					}
				}(id)
			}
			wg.Wait()
			accepted := time.Since(start)
			for {
				n, err := srv.DB.Node.Query().Where(node.Or(node.ProvisionStateNEQ(nodes.StateManageable), node.ReservationNotNil())).Count(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Since(start) > 5*time.Minute {
					b.Fatalf("%d nodes still cleaning after 5 minutes", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			total, cpu := time.Since(start), cpuTime()-cpu0
			b.StopTimer()
			if failed, _ := srv.DB.Node.Query().Where(node.LastErrorNotNil()).Count(ctx); failed > 0 {
				b.Fatalf("%d nodes failed cleaning", failed)
			}
			b.ReportMetric(total.Seconds(), "total-s")
			// How long the 1,000 provision calls took to be accepted, which
			// overlaps the steps of the nodes accepted first.
			b.ReportMetric(accepted.Seconds(), "accept-s")
			b.ReportMetric(float64(count*perNode)/total.Seconds(), "steps/s")
			// Steps per second of this process's CPU: on a shared machine
			// wall time says as much about the neighbours as about Anvil.
			b.ReportMetric(float64(count*perNode)/cpu.Seconds(), "steps/cpu-s")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPowerSync runs one power-sync cycle over 10,000 fake nodes.
func BenchmarkPowerSync(b *testing.B) {
	srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, "sqlite"), AuthNone: true})
	ctx := policies.WithPrincipal(context.Background(), systemAdmin)
	var sb strings.Builder
	sb.WriteString("name,driver\n")
	for i := 0; i < fleet; i++ {
		fmt.Fprintf(&sb, "sync-%05d,fake\n", i)
	}
	rows, err := nodes.ParseImport(strings.NewReader(sb.String()), "csv")
	if err != nil {
		b.Fatal(err)
	}
	if err := nodes.Import(ctx, srv.DB, rows); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var last time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		n, err := srv.Cond.SyncPower(context.Background())
		if err != nil || n != fleet {
			b.Fatalf("synced %d nodes: %v", n, err)
		}
		last = time.Since(start)
	}
	b.ReportMetric(last.Seconds(), "cycle-s")
}

// BenchmarkIPMIPower compares a power-state read through the ipmi driver with a
// bare ipmitool call against the same ipmi_sim.
func BenchmarkIPMIPower(b *testing.B) {
	sim := bmctest.Start(b)
	ctx := context.Background()
	c, err := bmc.Open("ipmi", "bench", sim.DriverInfo(bmctest.Password), bmc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	measure := func(fn func() error) float64 {
		lat := make([]time.Duration, 20)
		for i := range lat {
			t := time.Now()
			if err := fn(); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return float64(lat[len(lat)/2].Microseconds()) / 1000
	}
	viaLib := measure(func() error { _, err := c.PowerState(ctx); return err })
	bare := measure(func() error {
		return exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", fmt.Sprint(sim.Port),
			"-U", bmctest.User, "-P", bmctest.Password, "power", "status").Run()
	})
	b.ReportMetric(viaLib, "bmclib-p50-ms")
	b.ReportMetric(bare, "ipmitool-p50-ms")
	b.ReportMetric(viaLib/bare, "ratio")
}
