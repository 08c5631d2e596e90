package conductor

import (
	"context"
	"log/slog"

	"github.com/anvilproject/anvil/ent"
)

// Campaigner rolls runbooks over many nodes (issue #29): the campaign
// service is one. Process starts and follows the nodes mine gives this
// conductor; it counts the nodes in progress in the database, so the
// campaign's cap holds across replicas.
type Campaigner interface {
	Wake() <-chan struct{}
	Process(ctx context.Context, mine func(n *ent.Node) bool, log *slog.Logger) error
}

// Campaign makes this conductor work campaigns: at once when one is
// created, approved or resumed in this process, and every CampaignCheck
// for the rest. Call it before Start.
func (c *Conductor) Campaign(x Campaigner) { c.camp = x }

func (c *Conductor) campaignLoop() {
	c.wakeLoop(c.cfg.CampaignCheck, c.camp.Wake(), c.processCampaigns)
}

// processCampaigns runs one pass of the campaign loop over the nodes this
// conductor's hash ring gives it.
func (c *Conductor) processCampaigns(ctx context.Context) error {
	rings, err := c.loadRings(ctx)
	if err != nil {
		return err
	}
	return c.camp.Process(ctx, func(n *ent.Node) bool { return rings.Owner(n.UUID, n.ConductorGroup) == c.cfg.Name }, c.log)
}
