package conductor

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
)

// Ironic's faults: a node whose BMC keeps failing, and a node whose
// cleaning or servicing failed in the agent.
const (
	FaultPower   = "power failure"
	FaultClean   = "clean failure"
	FaultService = "service failure"
)

// maxAuthFailures is how many consecutive credential refusals put a node
// into maintenance (Ironic's power_state_sync_max_retries): credentials
// do not fix themselves, and retrying them every period can lock the
// BMC account.
const maxAuthFailures = 3

// noteBMC counts a node's consecutive credential refusals from any BMC
// call; at maxAuthFailures it puts the node into maintenance with a fault,
// which keeps power sync away until an operator clears it.
func (c *Conductor) noteBMC(ctx context.Context, n *ent.Node, err error) {
	c.authMu.Lock()
	if !errors.Is(err, bmc.ErrAuth) {
		delete(c.authFails, n.ID)
		c.authMu.Unlock()
		return
	}
	c.authFails[n.ID]++
	count := c.authFails[n.ID]
	if count >= maxAuthFailures {
		delete(c.authFails, n.ID)
	}
	c.authMu.Unlock()
	if count < maxAuthFailures {
		return
	}
	reason := fmt.Sprintf("The BMC refused the credentials %d times in a row; fix driver_info and clear maintenance.", count)
	ctx = context.WithoutCancel(ctx)
	cnt, uerr := c.db.Node.Update().Where(node.ID(n.ID), node.Maintenance(false)).
		SetMaintenance(true).SetMaintenanceReason(reason).SetFault(FaultPower).Save(ctx)
	if uerr != nil || cnt == 0 {
		return
	}
	c.log.Warn("node put into maintenance: BMC credentials refused", "node", n.UUID, "failures", count)
	_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Error, Type: "maintenance",
		Message: "Maintenance set with fault " + FaultPower + ": " + reason, Conductor: c.cfg.Name})
}
