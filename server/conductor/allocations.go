package conductor

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/allocations"
)

// Allocator settles allocations and ends their leases: the allocation
// service is one.
type Allocator interface {
	Wake() <-chan struct{}
	Process(ctx context.Context) error
	EndLeases(ctx context.Context, now time.Time, e allocations.LeaseEnder) (int, error)
}

// Allocate makes this conductor settle allocations, as Ironic's conductor
// does: at once when one is created in this process, and every heartbeat
// for those created on another replica or left allocating by a conductor
// that stopped. It also ends the leases past their end every LeaseCheck.
// Call it before Start.
func (c *Conductor) Allocate(a Allocator) { c.alloc = a }

func (c *Conductor) allocationLoop() {
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		t := time.NewTicker(c.cfg.Heartbeat)
		defer t.Stop()
		leases := time.NewTicker(c.cfg.LeaseCheck)
		defer leases.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-leases.C:
				if err := c.EndLeases(c.ctx); err != nil && c.ctx.Err() == nil {
					c.log.Error("lease ends", "err", err)
				}
				continue
			case <-c.alloc.Wake():
			case <-t.C:
			}
			if err := c.alloc.Process(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Error("allocations", "err", err)
			}
		}
	}()
}

// EndLeases runs one pass over the leases past their end (the allocation
// loop runs it every LeaseCheck). It acts as the conductor itself, a
// system principal without roles: the audit rows and history name it,
// and it authorizes nothing, since no request asked for the lease end.
// Each replica acts only on the nodes its hash ring gives it.
func (c *Conductor) EndLeases(ctx context.Context) error {
	rings, err := c.loadRings(ctx)
	if err != nil {
		return err
	}
	ctx = policies.WithPrincipal(ctx, &policies.Principal{User: "conductor " + c.cfg.Name, System: true, Method: "conductor"})
	_, err = c.alloc.EndLeases(ctx, time.Now(), allocations.LeaseEnder{
		Name: c.cfg.Name,
		Mine: func(n *ent.Node) bool { return rings.Owner(n.UUID, n.ConductorGroup) == c.cfg.Name },
		// The path of PUT provision deleted once it is accepted: the
		// claim, tear-down and automated cleaning.
		Undeploy: func(ctx context.Context, n *ent.Node) error {
			return c.undeploy(ctx, n, transitions["deleted"], "")
		},
	})
	return err
}
