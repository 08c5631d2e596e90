package conductor

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/leasing"
)

// Leaser starts and ends leases: the leasing service is one.
type Leaser interface {
	Run(ctx context.Context, e leasing.Ender) error
}

// Lease makes this conductor start and end leasing's leases on time.
// Call it before Start.
func (c *Conductor) Lease(l Leaser) { c.leases = l }

// Notify sets the inbox that hears of wipes between tenants.
func (c *Conductor) Notify(i *inbox.Service) { c.inbox = i }

// leasingLoop runs a pass at once, so starts and ends missed while every
// replica was down happen now, then every LeaseCheck.
func (c *Conductor) leasingLoop() {
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		t := time.NewTicker(c.cfg.LeaseCheck)
		defer t.Stop()
		for {
			if err := c.RunLeases(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Error("leases", "err", err)
			}
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// RunLeases runs one leasing pass: leases past their end or cancelled
// end (the node torn down through the path of PUT provision deleted,
// whose automated cleaning wipes it and leaves the wipe record), leases
// whose start came start. It acts as the conductor itself, a system
// principal, on the nodes its hash ring gives it, as EndLeases does.
func (c *Conductor) RunLeases(ctx context.Context) error {
	rings, err := c.loadRings(ctx)
	if err != nil {
		return err
	}
	ctx = policies.WithPrincipal(ctx, &policies.Principal{User: "conductor " + c.cfg.Name, System: true, Method: "conductor"})
	return c.leases.Run(ctx, leasing.Ender{
		Name: c.cfg.Name,
		Mine: func(n *ent.Node) bool { return rings.Owner(n.UUID, n.ConductorGroup) == c.cfg.Name },
		Undeploy: func(ctx context.Context, n *ent.Node) error {
			return c.undeploy(ctx, n, transitions["deleted"], "")
		},
	})
}
