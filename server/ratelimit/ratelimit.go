// Package ratelimit bounds how often one client may call an endpoint that
// needs no credentials: a token bucket per client address, in memory.
package ratelimit

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/errs"
)

// maxKeys bounds the buckets kept: past it, buckets that have refilled
// (which any new one would equal) are forgotten first.
const maxKeys = 100_000

// Limiter is a token bucket per key: Burst requests at once, then Rate
// per second. A replica counts alone, which bounds a client to the limit
// times the number of replicas.
type Limiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*bucket
	now         func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a limiter allowing burst requests at once and rate per
// second after that, per key.
func New(rate float64, burst int) *Limiter {
	return &Limiter{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}, now: time.Now}
}

// Allow takes one request from key's bucket. When the bucket is empty it
// returns false and how long until the next request would be allowed.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxKeys {
			l.forgetFull(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// forgetFull drops the buckets that have refilled; if none has, an
// arbitrary half, so that the map stays bounded whatever the traffic.
func (l *Limiter) forgetFull(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < maxKeys/2 {
			break
		}
		delete(l.buckets, k)
	}
}

// Middleware refuses a client over its limit with 429 and Retry-After
// (whole seconds, at least one), keyed on the address clientip resolved.
func (l *Limiter) Middleware() fiber.Handler {
	return func(c *fiber.Ctx) error {
		ok, wait := l.Allow(clientip.Of(c))
		if ok {
			return c.Next()
		}
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int(math.Max(1, math.Ceil(wait.Seconds())))))
		return errs.TooMany("Too many requests from this address; retry later.")
	}
}
