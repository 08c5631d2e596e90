package nodes

import (
	"context"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/nodeevent"
)

// HistoryPage returns limit of a node's events, newest first, after
// skipping offset of them, and how many it has: the portal pages through
// the whole history with it.
func (s *Service) HistoryPage(ctx context.Context, ident string, offset, limit int) ([]*ent.NodeEvent, int, error) {
	n, err := s.Authorized(ctx, ident, RuleHistory)
	if err != nil {
		return nil, 0, err
	}
	total, err := n.QueryEvents().Count(ctx)
	if err != nil {
		return nil, 0, err
	}
	evs, err := n.QueryEvents().Order(ent.Desc(nodeevent.FieldCreatedAt), ent.Desc(nodeevent.FieldID)).Offset(offset).Limit(limit).All(ctx)
	if err != nil {
		return nil, 0, err
	}
	scrubEvents(ctx, n, evs...)
	return evs, total, nil
}
