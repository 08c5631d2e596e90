package nodes

import (
	"context"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/trait"
)

// TraitHolder is a node that carries some of the traits asked about:
// Node has only its id, UUID, name, owner and lessee: what names it and
// decides who may act on it.
type TraitHolder struct {
	Node   *ent.Node
	Traits []string
}

// TraitHolders are the nodes the caller may list that carry any of
// traits, with the ones each carries: two queries whatever the number of
// traits or nodes, so a page that counts where each of its runbooks may
// run asks once for all of them instead of once a runbook.
func (s *Service) TraitHolders(ctx context.Context, traits []string) ([]TraitHolder, error) {
	if len(traits) == 0 {
		return nil, nil
	}
	ps, err := s.scope(ctx, ListOptions{IncludeChildren: true})
	if err != nil {
		return nil, err
	}
	ns, err := s.db.Node.Query().Where(append(ps, node.HasTraitsWith(trait.TraitIn(traits...)))...).
		Order(ent.Asc(node.FieldName), ent.Asc(node.FieldID)).
		Select(node.FieldID, node.FieldUUID, node.FieldName, node.FieldOwner, node.FieldLessee).All(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := s.db.Trait.Query().Where(trait.TraitIn(traits...), trait.HasNodeWith(ps...)).
		Select(trait.FieldNodeID, trait.FieldTrait).All(ctx)
	if err != nil {
		return nil, err
	}
	carried := map[int][]string{}
	for _, t := range ts {
		carried[t.NodeID] = append(carried[t.NodeID], t.Trait)
	}
	out := make([]TraitHolder, len(ns))
	for i, n := range ns {
		out[i] = TraitHolder{Node: n, Traits: carried[n.ID]}
	}
	return out, nil
}
