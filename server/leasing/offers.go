package leasing

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/offer"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// OfferInput is an offer to make, as ESI-Leap's POST /v1/offers takes it.
type OfferInput struct {
	Name         *string
	ResourceType string
	ResourceUUID string
	LesseeID     *string
	StartTime    *time.Time
	EndTime      *time.Time
	Properties   map[string]any
}

// maxOfferEnd stands for ESI-Leap's datetime.max, an offer without an end.
var maxOfferEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// CreateOffer offers a node: its owner's members (or system members) for
// any window the node's other offers and leases leave free; a lessee's
// members within their active lease, which the offer names as
// parent_lease_uuid (a sub-lease offer).
func (s *Service) CreateOffer(ctx context.Context, in OfferInput) (out *ent.Offer, err error) {
	if in.ResourceType != "" && in.ResourceType != ResourceNode {
		return nil, errs.BadRequest("resource_type", "resource_type %s unknown: Anvil leases ironic_node", in.ResourceType)
	}
	n, err := s.findNode(ctx, "resource_uuid", in.ResourceUUID)
	if err != nil {
		return nil, err
	}
	id := newUUID()
	if err := s.guard.Authorize(ctx, RuleOfferCreate, "offer", id, nodes.Target(n)); err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleOfferCreate, "offer", id, err, map[string]any{"node": n.UUID})
	}()
	now := s.now()
	start, end := now, maxOfferEnd
	if in.StartTime != nil {
		start = UTC(*in.StartTime)
	}
	if in.EndTime != nil {
		end = UTC(*in.EndTime)
	}
	if err := window(start, end); err != nil {
		return nil, err
	}
	if !end.After(now) {
		return nil, errs.BadRequest("end_time", "end_time %s is in the past", Format(end))
	}
	if in.Name != nil && len(*in.Name) > 35 {
		return nil, errs.BadRequest("name", "name is longer than 35 characters")
	}
	if in.LesseeID != nil && *in.LesseeID == "" {
		// An empty lessee_id is no lessee: the offer is open to every
		// project, not addressed to a project named "".
		in.LesseeID = nil
	}
	if in.LesseeID != nil {
		if err := nodes.ValidateProject("lessee_id", *in.LesseeID); err != nil {
			return nil, err
		}
	}
	p := principal(ctx)
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cur, err := s.lockNode(ctx, tx, n.UUID)
		if err != nil {
			return err
		}
		owner := cur.Owner
		var parent *ent.Lease
		if !p.System && cur.Owner != p.Project {
			// A lessee offers only within its own active lease.
			if parent, err = s.parentLease(ctx, tx, cur, p.Project, start, end); err != nil {
				return err
			}
			owner = p.Project
		}
		if owner == "" {
			return errs.BadRequest("resource_uuid", "node %s has no owner to offer it", cur.UUID)
		}
		if err := s.free(ctx, tx, cur.UUID, parent, start, end, ""); err != nil {
			return err
		}
		c := tx.Offer.Create().SetUUID(id).SetNillableName(in.Name).SetProjectID(owner).SetNillableLesseeID(in.LesseeID).
			SetResourceUUID(cur.UUID).SetResourceClass(deref(cur.ResourceClass)).SetStartTime(start).SetEndTime(end).
			SetProperties(in.Properties).SetCreatedAt(now)
		if parent != nil {
			c.SetParentLeaseUUID(parent.UUID)
		}
		if out, err = c.Save(ctx); err != nil {
			return err
		}
		if err := event(ctx, tx, now, "esi_leap.offer.create.end", "offer", id, cur.UUID, deref(in.LesseeID), owner); err != nil {
			return err
		}
		return note(ctx, tx, cur.ID, "", "Offered by "+owner+" from "+Format(start)+" to "+Format(end)+" as offer "+id+lesseeText(in.LesseeID))
	})
	return out, err
}

func lesseeText(l *string) string {
	if l == nil {
		return " to every project"
	}
	return " to project " + *l
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// parentLease is project's active lease of node n covering [start, end),
// the parent of a sub-lease or sub-lease offer; a 403 when there is none.
func (s *Service) parentLease(ctx context.Context, tx *ent.Client, n *ent.Node, project string, start, end time.Time) (*ent.Lease, error) {
	l, err := tx.Lease.Query().Where(lease.ResourceUUID(n.UUID), lease.ProjectID(project), lease.Status(StatusActive),
		lease.StartTimeLTE(start), lease.EndTimeGTE(end)).Order(ent.Desc(lease.FieldID)).First(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.Forbidden("Access was denied to ironic_node %s: project %s holds no lease of it from %s to %s.", n.UUID, project, Format(start), Format(end))
	}
	return l, err
}

// free checks that [start, end) of node id is free at one level (the
// owner's, or within parent): no available offer and no booked lease of
// the same level overlap it. skipOffer is the offer being claimed, whose
// own window is the point.
func (s *Service) free(ctx context.Context, tx *ent.Client, id string, parent *ent.Lease, start, end time.Time, skipOffer string) error {
	ofs := []predicate.Offer{offer.ResourceUUID(id), offer.Status(StatusAvailable), offer.StartTimeLT(end), offer.EndTimeGT(start)}
	ls := []predicate.Lease{lease.ResourceUUID(id), lease.StatusIn(booked...), lease.StartTimeLT(end), lease.EndTimeGT(start)}
	if parent == nil {
		ofs, ls = append(ofs, offer.ParentLeaseUUIDIsNil()), append(ls, lease.ParentLeaseUUIDIsNil())
	} else {
		ofs, ls = append(ofs, offer.ParentLeaseUUID(parent.UUID)), append(ls, lease.ParentLeaseUUID(parent.UUID))
	}
	if skipOffer != "" {
		ofs = append(ofs, offer.UUIDNEQ(skipOffer))
	}
	o, err := tx.Offer.Query().Where(ofs...).First(ctx)
	if err == nil {
		return errs.Conflict("Time conflict for ironic_node %s: offer %s (%s to %s) overlaps %s to %s.", id, o.UUID, Format(o.StartTime), Format(o.EndTime), Format(start), Format(end))
	}
	if !ent.IsNotFound(err) {
		return err
	}
	l, err := tx.Lease.Query().Where(ls...).First(ctx)
	if err == nil {
		return conflict(Format(start)+" to "+Format(end), l)
	}
	if !ent.IsNotFound(err) {
		return err
	}
	return nil
}

// visibleOffers are the offers the caller's project sees: those it made,
// those addressed to it and those open to every project; a system reader
// with offer_admin sees all.
func (s *Service) visibleOffers(ctx context.Context) (predicate.Offer, bool) {
	p := principal(ctx)
	if s.guard.Allowed(ctx, RuleOfferAdmin, offerTarget(&ent.Offer{})) {
		return nil, true
	}
	if p.Project == "" {
		return nil, false
	}
	return offer.Or(offer.ProjectID(p.Project), offer.LesseeID(p.Project), offer.LesseeIDIsNil()), true
}

// GetOffer shows an offer the caller sees; 404 for absent and hidden alike.
func (s *Service) GetOffer(ctx context.Context, id string) (*ent.Offer, error) {
	if err := s.guard.Authorize(ctx, RuleOfferGet, "offer", id, offerTarget(&ent.Offer{})); err != nil {
		return nil, err
	}
	return s.findOffer(ctx, s.db.Client, id)
}

func (s *Service) findOffer(ctx context.Context, c *ent.Client, id string) (*ent.Offer, error) {
	vis, ok := s.visibleOffers(ctx)
	if !ok {
		return nil, OfferNotFound(id)
	}
	q := c.Offer.Query().Where(offer.Or(offer.UUID(id), offer.Name(id)))
	if vis != nil {
		q = q.Where(vis)
	}
	os, err := q.Limit(2).All(ctx)
	if err != nil {
		return nil, err
	}
	switch len(os) {
	case 0:
		return nil, OfferNotFound(id)
	case 1:
		return os[0], nil
	}
	return nil, errs.Conflict("Duplicate offers with name %s.", id)
}

// OfferFilter narrows an offer list, as ESI-Leap's GET /v1/offers does.
type OfferFilter struct {
	ProjectID, ResourceUUID, ResourceClass, LesseeID string
	// Status is one status, "any", or empty for available and error.
	Status string
	// StartTime and EndTime select offers whose window contains both;
	// AvailableStart and AvailableEnd those with that range unbooked.
	StartTime, EndTime, AvailableStart, AvailableEnd *time.Time
}

// ListOffers lists the offers the caller sees, filtered.
func (s *Service) ListOffers(ctx context.Context, f OfferFilter) ([]*ent.Offer, error) {
	if err := s.guard.Authorize(ctx, RuleOfferGet, "offer", "", offerTarget(&ent.Offer{})); err != nil {
		return nil, err
	}
	if err := pair("start_time", "end_time", f.StartTime, f.EndTime); err != nil {
		return nil, err
	}
	if err := pair("available_start_time", "available_end_time", f.AvailableStart, f.AvailableEnd); err != nil {
		return nil, err
	}
	vis, ok := s.visibleOffers(ctx)
	if !ok {
		return nil, nil
	}
	q := s.db.Offer.Query()
	if vis != nil {
		q = q.Where(vis)
	}
	switch f.Status {
	case "":
		q = q.Where(offer.StatusIn(StatusAvailable, StatusError))
	case "any":
	default:
		q = q.Where(offer.Status(f.Status))
	}
	if f.ProjectID != "" {
		q = q.Where(offer.ProjectID(f.ProjectID))
	}
	if f.LesseeID != "" {
		q = q.Where(offer.LesseeID(f.LesseeID))
	}
	if f.ResourceUUID != "" {
		q = q.Where(offer.ResourceUUID(f.ResourceUUID))
	}
	if f.ResourceClass != "" {
		q = q.Where(offer.ResourceClass(f.ResourceClass))
	}
	if f.StartTime != nil {
		q = q.Where(offer.StartTimeLTE(UTC(*f.StartTime)), offer.EndTimeGTE(UTC(*f.EndTime)))
	}
	if f.AvailableStart != nil {
		q = q.Where(offer.StartTimeLTE(UTC(*f.AvailableStart)), offer.EndTimeGTE(UTC(*f.AvailableEnd)))
	}
	os, err := q.Order(ent.Asc(offer.FieldStartTime), ent.Asc(offer.FieldID)).All(ctx)
	if err != nil || f.AvailableStart == nil {
		return os, err
	}
	av, err := s.Availabilities(ctx, os)
	if err != nil {
		return nil, err
	}
	var out []*ent.Offer
	for _, o := range os {
		for _, w := range av[o.UUID] {
			if !w[0].After(UTC(*f.AvailableStart)) && !w[1].Before(UTC(*f.AvailableEnd)) {
				out = append(out, o)
				break
			}
		}
	}
	return out, nil
}

// pair refuses one bound of a range without the other, or an empty range,
// naming the query parameters.
func pair(startField, endField string, start, end *time.Time) error {
	if (start == nil) != (end == nil) {
		return errs.BadRequest(startField, "give both %s and %s, or neither", startField, endField)
	}
	if start != nil && !start.Before(*end) {
		return errs.BadRequest(endField, "%s %s is not after %s %s", endField, Format(*end), startField, Format(*start))
	}
	return nil
}

// Availabilities are the free windows of each offer from now on, by
// UUID: its own window less the booked leases claimed from it, ESI-Leap's
// "availabilities". One query serves a whole list.
func (s *Service) Availabilities(ctx context.Context, os []*ent.Offer) (map[string][][2]time.Time, error) {
	now := s.now()
	var ids []string
	for _, o := range os {
		if o.Status == StatusAvailable {
			ids = append(ids, o.UUID)
		}
	}
	out := map[string][][2]time.Time{}
	if len(ids) == 0 {
		return out, nil
	}
	ls, err := s.db.Lease.Query().Where(lease.OfferUUIDIn(ids...), lease.StatusIn(booked...), lease.EndTimeGT(now)).
		Order(ent.Asc(lease.FieldStartTime), ent.Asc(lease.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	byOffer := map[string][]*ent.Lease{}
	for _, l := range ls {
		byOffer[*l.OfferUUID] = append(byOffer[*l.OfferUUID], l)
	}
	for _, o := range os {
		if o.Status != StatusAvailable {
			continue
		}
		from := o.StartTime
		if now.After(from) {
			from = now
		}
		var ws [][2]time.Time
		for _, l := range byOffer[o.UUID] {
			if l.StartTime.After(from) {
				ws = append(ws, [2]time.Time{from, l.StartTime})
			}
			if l.EndTime.After(from) {
				from = l.EndTime
			}
		}
		if o.EndTime.After(from) {
			ws = append(ws, [2]time.Time{from, o.EndTime})
		}
		out[o.UUID] = ws
	}
	return out, nil
}

// DeleteOffer withdraws an offer (ESI-Leap's OFFER_CAN_DELETE: available
// or error) and cancels the leases claimed from it.
func (s *Service) DeleteOffer(ctx context.Context, id string) (err error) {
	o, err := s.findOffer(ctx, s.db.Client, id)
	if err != nil {
		return err
	}
	if err := s.guard.Authorize(ctx, RuleOfferDelete, "offer", o.UUID, offerTarget(o)); err != nil {
		return err
	}
	defer func() {
		s.guard.Done(ctx, RuleOfferDelete, "offer", o.UUID, err, map[string]any{"node": o.ResourceUUID})
	}()
	now := s.now()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := s.lockNodeIfAny(ctx, tx, o.ResourceUUID)
		if err != nil {
			return err
		}
		gone, err := tx.Offer.Update().Where(offer.ID(o.ID), offer.StatusIn(StatusAvailable, StatusError)).
			SetStatus(StatusDeleted).SetUpdatedAt(now).Save(ctx)
		if err != nil {
			return err
		}
		// ESI-Leap looks the offer up among those it may delete
		// (OFFER_CAN_DELETE), so an offer already withdrawn or expired is
		// not found: the 404 its clients' delete with ignore_missing
		// passes over.
		if gone == 0 {
			return OfferNotFound(id)
		}
		ls, err := tx.Lease.Query().Where(lease.OfferUUID(o.UUID), lease.StatusIn(cancellable...)).All(ctx)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if err := s.cancel(ctx, tx, n, l, now); err != nil {
				return err
			}
		}
		if err := event(ctx, tx, now, "esi_leap.offer.delete.end", "offer", o.UUID, o.ResourceUUID, deref(o.LesseeID), o.ProjectID); err != nil {
			return err
		}
		return noteIf(ctx, tx, n, "Offer "+o.UUID+" withdrawn")
	})
}
