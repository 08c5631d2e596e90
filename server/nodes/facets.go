package nodes

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
)

// Facet names: the filters the portal offers as pick-lists with counts.
const (
	FacetOwner  = "owner"
	FacetLessee = "lessee"
	FacetClass  = "class"
	FacetPower  = "power"
	FacetFault  = "fault"
	FacetTrait  = "trait"
)

// FacetCount is how many listed nodes have one value of a facet. Value ""
// is the nodes without one (no class, no power reported, no fault).
type FacetCount struct {
	Value string
	Count int
}

// MaxFacetValues bounds a facet's pick-list: the most common values, so a
// fleet with a thousand traits still offers a list a person can read.
const MaxFacetValues = 200

// Facets counts, for each facet, the nodes the caller may list in each of
// its values under the other filters of o (a facet's own filter is set
// aside, so its list shows where else the viewer could go): one GROUP BY
// per facet, done by the database. Values come most common first, ties
// by value.
func (s *Service) Facets(ctx context.Context, o ListOptions) (map[string][]FacetCount, error) {
	o.Limit, o.Offset, o.Marker, o.GroupBy = 0, 0, "", ""
	out := map[string][]FacetCount{}
	for _, f := range []struct {
		name, col string
		clear     func(*ListOptions)
	}{
		{FacetOwner, node.FieldOwner, func(o *ListOptions) { o.Owner = nil }},
		{FacetLessee, node.FieldLessee, func(o *ListOptions) { o.Lessee = nil }},
		{FacetClass, node.FieldResourceClass, func(o *ListOptions) { o.ResourceClass = nil }},
		{FacetPower, node.FieldPowerState, func(o *ListOptions) { o.PowerState = nil }},
		{FacetFault, node.FieldFault, func(o *ListOptions) { o.Fault = nil }},
		{FacetTrait, "", func(o *ListOptions) { o.Trait = nil }},
	} {
		fo := o
		f.clear(&fo)
		ps, err := s.scope(ctx, fo)
		if err != nil {
			return nil, err
		}
		var rows []struct {
			Value sql.NullString `json:"value"`
			N     int            `json:"n"`
		}
		// The value and its count, under names the rows scan by.
		count := func(col string) func(*entsql.Selector) {
			return func(sel *entsql.Selector) {
				sel.Select(entsql.As(sel.C(col), "value"), entsql.As("COUNT(*)", "n")).GroupBy(sel.C(col))
			}
		}
		if f.name == FacetTrait {
			// Traits of the matching nodes, as node_id IN (those nodes):
			// SQLite reads the set from an index, where a join looked up
			// each trait's node row (20 ms against 6 at 10,000 nodes).
			err = s.db.Trait.Query().Where(trait.HasNodeWith(ps...)).Modify(count(trait.FieldTrait)).Scan(s.planned(ctx, fo), &rows)
		} else {
			err = s.db.Node.Query().Where(ps...).Modify(count(f.col)).Scan(s.planned(ctx, fo), &rows)
		}
		if err != nil {
			return nil, err
		}
		var cs []FacetCount
		for _, r := range rows {
			cs = append(cs, FacetCount{Value: r.Value.String, Count: r.N})
		}
		slices.SortFunc(cs, func(a, b FacetCount) int {
			if a.Count != b.Count {
				return b.Count - a.Count
			}
			return strings.Compare(a.Value, b.Value)
		})
		if len(cs) > MaxFacetValues {
			cs = cs[:MaxFacetValues]
		}
		out[f.name] = cs
	}
	return out, nil
}

// OnlyProject is the project a caller's list is limited to (the nodes it
// owns or leases, and the only owner or lessee it may filter by), or ""
// when it may list every node.
func (s *Service) OnlyProject(ctx context.Context) string {
	if s.guard.Allowed(ctx, RuleListAll, policies.Target{}) {
		return ""
	}
	if p := policies.PrincipalFrom(ctx); p != nil {
		return p.Project
	}
	return ""
}
