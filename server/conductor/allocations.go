package conductor

import (
	"context"
	"time"
)

// Allocator settles allocations: the allocation service is one.
type Allocator interface {
	Wake() <-chan struct{}
	Process(ctx context.Context) error
}

// Allocate makes this conductor settle allocations, as Ironic's conductor
// does: at once when one is created in this process, and every heartbeat
// for those created on another replica or left allocating by a conductor
// that stopped. Call it before Start.
func (c *Conductor) Allocate(a Allocator) { c.alloc = a }

func (c *Conductor) allocationLoop() {
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		t := time.NewTicker(c.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-c.alloc.Wake():
			case <-t.C:
			}
			if err := c.alloc.Process(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Error("allocations", "err", err)
			}
		}
	}()
}
