package identity

import (
	"strconv"
	"testing"
	"time"

	"github.com/anvilproject/anvil/policies"
)

// TestAuthCacheBounded: credentials never presented again do not pile
// up. Past maxAuthCached entries the expired ones are swept, keeping the
// fresh; when fresh ones alone fill it, it starts over.
func TestAuthCacheBounded(t *testing.T) {
	var s Service
	p := &policies.Principal{User: "ann"}
	for i := range maxAuthCached {
		s.cache.Store("old"+strconv.Itoa(i), cachedPrincipal{p: p, expires: time.Now().Add(-time.Second)})
	}
	s.cacheLen.Store(maxAuthCached)
	s.remember("fresh", p)
	if n := size(&s); n != 1 || s.cacheLen.Load() != 1 || s.cached("fresh") != p {
		t.Fatalf("after the sweep: %d entries (counted %d), want only the fresh one", n, s.cacheLen.Load())
	}
	for i := range maxAuthCached + 1 {
		s.remember("new"+strconv.Itoa(i), p)
	}
	if n := size(&s); n > maxAuthCached || int64(n) != s.cacheLen.Load() {
		t.Fatalf("%d fresh entries (counted %d), want at most %d", n, s.cacheLen.Load(), maxAuthCached)
	}
	s.remember("new0", p) // presented again: replaced, not counted twice
	if n := size(&s); int64(n) != s.cacheLen.Load() {
		t.Errorf("%d entries, counted %d", n, s.cacheLen.Load())
	}
}

func size(s *Service) int {
	n := 0
	s.cache.Range(func(any, any) bool { n++; return true })
	return n
}
