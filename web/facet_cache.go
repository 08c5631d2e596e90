package web

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/nodes"
)

// facetTTL is how long the node list's pick-list counts are shared. The
// counts are a GROUP BY per facet over every node the viewer may see
// (tens of milliseconds at 10,000 nodes on SQLite, more than the rest of
// the page); operators reload a view and viewers of one scope see the
// same nodes, so a few seconds of staleness in "how many" buys the page
// its budget. The rows and the state counts beside them are always read
// fresh, and any change made through this replica drops the cache
// (Register), so only other replicas' and the conductor's changes wait.
const facetTTL = 5 * time.Second

// maxFacetEntries bounds the cache: past it, expired entries go first,
// then everything (a burst of distinct filter sets is rare).
const maxFacetEntries = 1000

// facetCache keeps recent pick-list counts per viewer scope and filter
// set; concurrent misses for one key count once. The zero value is ready.
type facetCache struct {
	mu      sync.Mutex
	entries map[string]facetEntry
	flight  singleflight.Group
}

type facetEntry struct {
	at     time.Time
	counts map[string][]nodes.FacetCount
}

// get returns the counts for the list's filters (its query string, which
// decides its list options) as the caller's scope sees them, from the
// cache when fresh, else from count.
func (c *facetCache) get(ctx context.Context, filters string, count func() (map[string][]nodes.FacetCount, error)) (map[string][]nodes.FacetCount, error) {
	key, ok := facetKey(ctx, filters)
	if !ok {
		return count()
	}
	now := time.Now()
	c.mu.Lock()
	if e, hit := c.entries[key]; hit && now.Sub(e.at) < facetTTL {
		c.mu.Unlock()
		return e.counts, nil
	}
	c.mu.Unlock()
	v, err, _ := c.flight.Do(key, func() (any, error) {
		counts, err := count()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries == nil {
			c.entries = map[string]facetEntry{}
		}
		if len(c.entries) >= maxFacetEntries {
			for k, e := range c.entries {
				if now.Sub(e.at) >= facetTTL {
					delete(c.entries, k)
				}
			}
			if len(c.entries) >= maxFacetEntries {
				clear(c.entries)
			}
		}
		c.entries[key] = facetEntry{at: time.Now(), counts: counts}
		return counts, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(map[string][]nodes.FacetCount), nil
}

// forget drops every count: a change was made.
func (c *facetCache) forget() {
	c.mu.Lock()
	clear(c.entries)
	c.mu.Unlock()
}

// facetKey names what decides the counts: who is asking (scope, project
// and roles, which decide the nodes they may see) and the filters. A
// caller with no principal is not cached.
func facetKey(ctx context.Context, filters string) (string, bool) {
	pr := policies.PrincipalFrom(ctx)
	if pr == nil {
		return "", false
	}
	roles := slices.Clone(pr.Roles)
	slices.Sort(roles)
	scope := "project:" + pr.Project
	if pr.System {
		scope = "system"
	}
	return scope + "|" + strings.Join(roles, ",") + "|" + filters, true
}
