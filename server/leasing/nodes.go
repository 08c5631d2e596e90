package leasing

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/leaseevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/offer"
	"github.com/anvilproject/anvil/policies"
)

// ResourceNodes are the nodes offers or leases name, by UUID, read in one
// query for the names, classes and properties ESI-Leap shows beside them.
// An offer open to every project shows its node so to projects that
// otherwise do not see it, as ESI-Leap does.
func (s *Service) ResourceNodes(ctx context.Context, uuids []string) (map[string]*ent.Node, error) {
	ns, err := s.db.Node.Query().Where(node.UUIDIn(uuids...)).
		Select(node.FieldUUID, node.FieldName, node.FieldResourceClass, node.FieldProperties).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ent.Node, len(ns))
	for _, n := range ns {
		out[n.UUID] = n
	}
	return out, nil
}

// NodeFilter narrows ESI-Leap's node list.
type NodeFilter struct{ ResourceClass, Owner, Lessee string }

// LeasedNode is a node with its offers and leases, as ESI-Leap's
// GET /v1/nodes lists it.
type LeasedNode struct {
	Node *ent.Node
	// OfferUUID is the offer whose window holds now; LeaseUUID the lease
	// whose project is the node's lessee now.
	OfferUUID, LeaseUUID       *string
	FutureOffers, FutureLeases []string
}

// ListNodes lists the nodes the caller's project owns or leases (every
// node for a system reader), each with its current and future offers and
// leases.
func (s *Service) ListNodes(ctx context.Context, f NodeFilter) ([]LeasedNode, error) {
	if err := s.guard.Authorize(ctx, RuleNodeGetAll, "node", "", policies.Target{}); err != nil {
		return nil, err
	}
	p := principal(ctx)
	q := s.db.Node.Query()
	if !p.System {
		if p.Project == "" {
			return nil, nil
		}
		q = q.Where(node.Or(node.Owner(p.Project), node.Lessee(p.Project)))
	}
	if f.ResourceClass != "" {
		q = q.Where(node.ResourceClass(f.ResourceClass))
	}
	if f.Owner != "" {
		q = q.Where(node.Owner(f.Owner))
	}
	if f.Lessee != "" {
		q = q.Where(node.Lessee(f.Lessee))
	}
	ns, err := q.Order(ent.Asc(node.FieldName), ent.Asc(node.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.UUID
	}
	now := s.now()
	os, err := s.db.Offer.Query().Where(offer.ResourceUUIDIn(ids...), offer.Status(StatusAvailable)).Order(ent.Asc(offer.FieldStartTime)).All(ctx)
	if err != nil {
		return nil, err
	}
	ls, err := s.db.Lease.Query().Where(lease.ResourceUUIDIn(ids...), lease.StatusIn(StatusCreated, StatusActive)).Order(ent.Asc(lease.FieldStartTime)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LeasedNode, len(ns))
	at := map[string]int{}
	for i, n := range ns {
		out[i] = LeasedNode{Node: n, FutureOffers: []string{}, FutureLeases: []string{}}
		at[n.UUID] = i
	}
	for _, o := range os {
		x := &out[at[o.ResourceUUID]]
		switch {
		case o.StartTime.After(now):
			x.FutureOffers = append(x.FutureOffers, o.UUID)
		case o.EndTime.After(now):
			x.OfferUUID = &o.UUID
		}
	}
	for _, l := range ls {
		x := &out[at[l.ResourceUUID]]
		switch {
		case l.Status == StatusCreated:
			x.FutureLeases = append(x.FutureLeases, l.UUID)
		case l.ProjectID == x.Node.Lessee:
			x.LeaseUUID = &l.UUID
		}
	}
	return out, nil
}

// EventFilter narrows ESI-Leap's event list.
type EventFilter struct {
	LastID                                 int
	LastTime                               *time.Time
	LesseeOrOwner, EventType, ResourceUUID string
}

// ListEvents lists the events naming the caller's project as lessee or
// owner; with offer_admin (system readers), every event, or those of the
// project lessee_or_owner_id names.
func (s *Service) ListEvents(ctx context.Context, f EventFilter) ([]*ent.LeaseEvent, error) {
	if err := s.guard.Authorize(ctx, RuleEventGetAll, "lease_event", "", policies.Target{}); err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, RuleOfferAdmin, policies.Target{}) {
		// ESI-Leap's rule: whatever was asked, a project reads its own.
		f.LesseeOrOwner = principal(ctx).Project
		if f.LesseeOrOwner == "" {
			return nil, nil
		}
	}
	q := s.db.LeaseEvent.Query()
	if f.LesseeOrOwner != "" {
		q = q.Where(leaseevent.Or(leaseevent.LesseeID(f.LesseeOrOwner), leaseevent.OwnerID(f.LesseeOrOwner)))
	}
	if f.LastID > 0 {
		q = q.Where(leaseevent.IDGT(f.LastID))
	}
	if f.LastTime != nil {
		q = q.Where(leaseevent.EventTimeGT(UTC(*f.LastTime)))
	}
	if f.EventType != "" {
		q = q.Where(leaseevent.EventType(f.EventType))
	}
	if f.ResourceUUID != "" {
		q = q.Where(leaseevent.ResourceUUID(f.ResourceUUID))
	}
	return q.Order(ent.Asc(leaseevent.FieldID)).All(ctx)
}
