package obs

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Idle hands memory back to the operating system once requests stop.
// Under load the collector's target (--gc-percent, Go's 100 by default)
// lets the heap grow to twice what is live, more at a higher target, which
// buys speed; after the load, that headroom would stay resident until the
// runtime's own scavenger slowly returned it. Once no request has come
// for After and the heap holds more than idleSlack beyond what the last
// collection found live, Run collects and returns the free memory at once.
type Idle struct {
	After time.Duration
	last  atomic.Int64 // unix nanoseconds of the latest request
}

// idleSlack is heap beyond the live heap that is not worth a collection.
const idleSlack = 4 << 20

// Touch notes a request. Routes served before it (health checks, metric
// scrapes) do not count as activity.
func (i *Idle) Touch(c *fiber.Ctx) error {
	i.last.Store(time.Now().UnixNano())
	return c.Next()
}

// Run watches for idleness until ctx ends; a zero After does nothing.
func (i *Idle) Run(ctx context.Context) {
	if i.After <= 0 {
		return
	}
	tk := time.NewTicker(i.After / 2)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			if time.Since(time.Unix(0, i.last.Load())) >= i.After && heldBeyondLive() > idleSlack {
				debug.FreeOSMemory()
			}
		}
	}
}

// heldBeyondLive is the heap memory the process holds (objects, garbage
// among them, and free spans not yet returned) beyond the heap the last
// collection found live.
func heldBeyondLive() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return 0
		}
	}
	return int64(s[0].Value.Uint64()+s[1].Value.Uint64()) - int64(s[2].Value.Uint64())
}
