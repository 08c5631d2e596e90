package bench

import (
	"context"
	"fmt"
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

// BenchmarkBIOSRunbook runs a 3-step BIOS run (power on, apply two BIOS
// settings with the reboot it takes, power off) on 100 systems of one
// Redfish simulator at once, and reports the total time and Anvil's CPU
// per step. The simulator serves one request at a time, so the total
// measures it as much as Anvil; the CPU figure is Anvil's alone.
func BenchmarkBIOSRunbook(b *testing.B) {
	const count = 100
	sim := bmctest.StartRedfish(b, fmt.Sprintf("SIM_SYSTEMS=%d", count), "SIM_POWER_DELAY=0.2 0.5")
	srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(&keepAlive{b}, "sqlite"), AuthNone: true,
		Conductor: conductor.Config{PowerTimeout: 5 * time.Minute, BMC: bmc.Options{Timeout: 60 * time.Second, PowerPoll: 500 * time.Millisecond}}})
	ctx := policies.WithPrincipal(context.Background(), systemAdmin)
	ids := make([]string, count)
	for i := range ids {
		info := sim.DriverInfo(fmt.Sprint(i + 1))
		info["redfish_auth_type"] = "basic"
		v, err := srv.Nodes.Create(ctx, nodes.CreateInput{Driver: "redfish", DriverInfo: info, ProvisionState: nodes.StateManageable})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = v.UUID
	}
	ops := &conductor.Ops{C: srv.Cond, Nodes: srv.Nodes, Guard: srv.Guard}
	st := []conductor.Step{{Interface: "power", Step: "power_on"},
		{Interface: "bios", Step: "apply_configuration", Args: map[string]any{"settings": []any{
			map[string]any{"name": "ProcTurboMode", "value": "Disabled"}, map[string]any{"name": "SysProfile", "value": "PerfOptimized"}}}},
		{Interface: "power", Step: "power_off"}}
	b.ResetTimer()
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := ops.Provision(ctx, id, conductor.ProvisionRequest{Target: "clean", CleanSteps: st}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	for {
		n, err := srv.DB.Node.Query().Where(node.Or(node.ProvisionStateNEQ(nodes.StateManageable), node.ReservationNotNil())).Count(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("%d nodes still cleaning after 15 minutes", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := time.Since(start)
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.StopTimer()
	if failed, _ := srv.DB.Node.Query().Where(node.LastErrorNotNil()).All(ctx); len(failed) > 0 {
		b.Fatalf("%d nodes failed, first: %s", len(failed), *failed[0].LastError)
	}
	for _, id := range []string{"1", fmt.Sprint(count)} {
		if cur, _ := sim.BIOS(b, id); cur["ProcTurboMode"] != "Disabled" || cur["SysProfile"] != "PerfOptimized" {
			b.Fatalf("system %s BIOS after the run: %v", id, cur)
		}
	}
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(count*len(st)), "anvil-cpu-ms/step")
}
