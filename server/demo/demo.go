// Package demo enrols fake-driver nodes spread over a handful of owner and
// lessee projects, so a newcomer sees a populated fleet at once.
package demo

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Owners are the hardware-owning demo projects; Lessees rent from them.
var (
	Owners  = []string{"hw-east", "hw-west", "hw-lab"}
	Lessees = []string{"tenant-blue", "tenant-green", "tenant-red", "tenant-gold"}
)

// Seed enrols n demo nodes unless the database already has nodes, and
// returns how many it created.
func Seed(ctx context.Context, db *store.DB, n int) (int, error) {
	have, err := db.Node.Query().Count(ctx)
	if err != nil || have > 0 {
		return 0, err
	}
	recs := make([]nodes.ImportRecord, n)
	classes := []string{"baremetal-small", "baremetal-large", "gpu"}
	for i := range recs {
		name := fmt.Sprintf("demo-%05d", i+1)
		rc := classes[i%len(classes)]
		in := nodes.CreateInput{
			Name: &name, Driver: "fake", Owner: Owners[i%len(Owners)], ResourceClass: &rc,
			Properties: map[string]any{"cpus": 16 << (i % 3), "memory_mb": 65536 << (i % 3), "local_gb": 960},
		}
		// Two nodes in three are leased out; the rest stay with their owner.
		if i%3 != 2 {
			in.Lessee = Lessees[i%len(Lessees)]
		}
		traits := []string{"CUSTOM_DEMO"}
		if i%2 == 0 {
			traits = append(traits, "CUSTOM_FIRMWARE_UPDATE")
		}
		if err := nodes.ValidateCreate(&in); err != nil {
			return 0, err
		}
		// Every eighth node (from the fifth) is available for allocation;
		// the rest are manageable, ready for runbooks.
		in.ProvisionState = nodes.StateManageable
		if i%8 == 4 {
			in.ProvisionState = nodes.StateAvailable
		}
		recs[i] = nodes.ImportRecord{Line: i + 1, Node: in, Traits: traits}
	}
	if err := nodes.Import(ctx, db, recs); err != nil {
		return 0, err
	}
	return n, runbooks(ctx, db)
}

// runbooks adds a public firmware runbook every tenant can run on nodes
// with CUSTOM_FIRMWARE_UPDATE, and a private one for tenant-blue. Their
// steps are real ones; the fake driver records what they would do (the
// firmware image is never fetched).
func runbooks(ctx context.Context, db *store.DB) error {
	type step struct {
		iface, name string
		args        map[string]any
	}
	return store.WithTx(ctx, db, func(tx *ent.Client) error {
		for _, rb := range []struct {
			name   string
			owner  *string
			public bool
			steps  []step
		}{
			{"CUSTOM_FIRMWARE_UPDATE", nil, true, []step{
				{"firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "http://firmware.example/bios.bin"}}}},
				{"deploy", "wait", map[string]any{"seconds": float64(3)}},
				{"power", "reboot", map[string]any{}},
			}},
			{"CUSTOM_DEMO", &Lessees[0], false, []step{{"power", "reboot", map[string]any{}}}},
		} {
			r, err := tx.Runbook.Create().SetUUID(uuid.NewString()).SetName(rb.name).SetNillableOwner(rb.owner).SetPublic(rb.public).
				SetExtra(map[string]any{}).Save(ctx)
			if err != nil {
				return err
			}
			for i, st := range rb.steps {
				if err := tx.RunbookStep.Create().SetRunbookID(r.ID).SetInterface(st.iface).SetStep(st.name).SetArgs(st.args).SetOrder(i + 1).Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
