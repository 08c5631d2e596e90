package web

import (
	"context"
	"testing"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/nodes"
)

// TestFacetCacheSharesWithinAScope: viewers who see the same nodes under
// the same filters share one count for facetTTL; another project, other
// roles or other filters count again,.
func TestFacetCacheSharesWithinAScope(t *testing.T) {
	var c facetCache
	calls := 0
	count := func() (map[string][]nodes.FacetCount, error) {
		calls++
		return map[string][]nodes.FacetCount{nodes.FacetOwner: {{Value: "p", Count: calls}}}, nil
	}
	as := func(project string, roles ...string) context.Context {
		return policies.WithPrincipal(context.Background(), &policies.Principal{User: "u-" + project, Project: project, Roles: roles})
	}
	o := "owner=a"
	for _, ctx := range []context.Context{as("blue", "member"), as("blue", "member")} {
		got, err := c.get(ctx, o, count)
		if err != nil || got[nodes.FacetOwner][0].Count != 1 {
			t.Fatalf("blue member: %v %v", got, err)
		}
	}
	if calls != 1 {
		t.Fatalf("two loads in one scope counted %d times", calls)
	}
	c.get(as("green", "member"), o, count)
	c.get(as("blue", "reader"), o, count)
	c.get(as("blue", "member"), "owner=b", count)
	if calls != 4 {
		t.Errorf("another project, role set or filter shared a count: %d counts, want 4", calls)
	}
	if _, err := c.get(context.Background(), o, count); err != nil || calls != 5 {
		t.Errorf("a caller without a principal was served from the cache (%d counts)", calls)
	}
	c.forget()
	c.get(as("blue", "member"), o, count)
	if calls != 6 {
		t.Errorf("a forgotten count was served (%d counts)", calls)
	}
}
