package conductor_test

import (
	"context"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAcceptedRunAuditedOnce: the claim and its audit row commit
// together, so an accepted run has exactly one "allowed" row, and a
// refused one (the node is busy) exactly one "failed" row of its own.
func TestAcceptedRunAuditedOnce(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			srv := servertest.Start(t, anvil.Options{Database: storetest.Setting(t, backend), AuthNone: true})
			ctx := policies.WithPrincipal(context.Background(), &policies.Principal{User: "op", System: true, Roles: policies.ExpandRoles([]string{"admin"})})
			v, err := srv.Nodes.Create(ctx, nodes.CreateInput{Driver: "fake", ProvisionState: nodes.StateManageable})
			if err != nil {
				t.Fatal(err)
			}
			ops := &conductor.Ops{C: srv.Cond, Nodes: srv.Nodes, Guard: srv.Guard}
			long := conductor.ProvisionRequest{Target: "clean", CleanSteps: []conductor.Step{{Interface: "deploy", Step: "wait", Args: map[string]any{"seconds": float64(30)}}}}
			if err := ops.Provision(ctx, v.UUID, long); err != nil {
				t.Fatal(err)
			}
			if err := ops.Provision(ctx, v.UUID, long); err == nil {
				t.Fatal("a second clean of a cleaning node was accepted")
			}
			rows, err := srv.DB.AuditEvent.Query().Where(auditevent.Rule(conductor.RuleProvision), auditevent.TargetID(v.UUID)).All(ctx)
			if err != nil {
				t.Fatal(err)
			}
			results := map[string]int{}
			for _, r := range rows {
				results[r.Result]++
				if r.User != "op" {
					t.Errorf("audit row user %q, want op", r.User)
				}
			}
			if len(rows) != 2 || results["allowed"] != 1 || results["failed"] != 1 {
				t.Errorf("audit rows by result: %v, want one allowed and one failed", results)
			}
			if err := ops.Provision(ctx, v.UUID, conductor.ProvisionRequest{Target: "abort"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
