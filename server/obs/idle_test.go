package obs

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

var garbage [][]byte

// TestIdleRelease: with the collector off, only Idle can give the heap's
// garbage back. While requests keep coming it does not; once they stop
// for After, it does.
func TestIdleRelease(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for range 64 {
		garbage = append(garbage, make([]byte, 512<<10))
	}
	garbage = nil
	if h := heldBeyondLive(); h <= idleSlack {
		t.Fatalf("32 MiB of garbage with the collector off, yet only %d bytes held beyond the live heap", h)
	}
	i := &Idle{After: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go i.Run(ctx)
	busy := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(busy) {
		i.last.Store(time.Now().UnixNano())
		time.Sleep(5 * time.Millisecond)
	}
	if h := heldBeyondLive(); h <= idleSlack {
		t.Fatalf("released while requests kept coming: %d bytes held beyond the live heap", h)
	}
	deadline := time.Now().Add(10 * time.Second)
	for heldBeyondLive() > idleSlack {
		if time.Now().After(deadline) {
			t.Fatalf("still %d bytes held beyond the live heap 10 s after the last request", heldBeyondLive())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
