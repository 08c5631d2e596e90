package nodes

import (
	"cmp"
	"context"
	"slices"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
)

// RuleShardsGet governs /v1/shards, as Ironic names it.
const RuleShardsGet = "baremetal:shards:get"

// Shard is one shard name and how many nodes are in it.
type Shard struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// Shards counts every node by shard, most populous first, as Ironic's
// get_shard_list does: nodes without a shard are counted under the name
// "None", which is what Ironic's str() of a NULL shard gives. Callers
// authorize RuleShardsGet first; the count is over all nodes, as Ironic's.
func (s *Service) Shards(ctx context.Context) ([]Shard, error) {
	var rows []struct {
		Shard *string `json:"shard"`
		Count int     `json:"count"`
	}
	if err := s.db.Client.Node.Query().GroupBy(node.FieldShard).Aggregate(ent.Count()).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	out := make([]Shard, 0, len(rows))
	for _, r := range rows {
		name := "None"
		if r.Shard != nil {
			name = *r.Shard
		}
		out = append(out, Shard{Name: name, Count: r.Count})
	}
	slices.SortStableFunc(out, func(a, b Shard) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Children lists the UUIDs of the nodes whose parent_node is ident's node,
// among those the caller may list, as Ironic's /v1/nodes/{node}/children:
// a parent the caller may not read is 404.
func (s *Service) Children(ctx context.Context, ident string) (string, []string, error) {
	n, err := s.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return "", nil, err
	}
	q, err := s.scoped(ctx, ListOptions{ParentNode: &n.UUID})
	if err != nil {
		return "", nil, err
	}
	uuids, err := q.Order(node.ByID()).Select(node.FieldUUID).Strings(ctx)
	if uuids == nil {
		uuids = []string{}
	}
	return n.UUID, uuids, err
}
