package leasing

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/offer"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// LeaseInput is a lease to make: by claiming an offer, or (POST
// /v1/leases) directly on a node.
type LeaseInput struct {
	Name         *string
	Purpose      *string
	ProjectID    string
	ResourceType string
	ResourceUUID string
	StartTime    *time.Time
	EndTime      *time.Time
	Properties   map[string]any
}

func (in LeaseInput) check() error {
	if in.Name != nil && len(*in.Name) > 35 {
		return errs.BadRequest("name", "name is longer than 35 characters")
	}
	if in.Purpose != nil && len(*in.Purpose) > 255 {
		return errs.BadRequest("purpose", "purpose is longer than 255 characters")
	}
	if in.ProjectID != "" {
		return nodes.ValidateProject("project_id", in.ProjectID)
	}
	return nil
}

// Claim makes a lease of part of an offer's window for the caller's
// project (a system caller names the project). Within one transaction
// that holds the node's row it checks the window is inside the offer's
// and unbooked, and the project's quota, then inserts: of concurrent
// claims of overlapping windows exactly one wins, the others get a 409.
func (s *Service) Claim(ctx context.Context, offerID string, in LeaseInput) (out *ent.Lease, err error) {
	o, err := s.findOffer(ctx, s.db.Client, offerID)
	if err != nil {
		return nil, err
	}
	id := newUUID()
	if err := s.guard.Authorize(ctx, RuleOfferClaim, "offer", o.UUID, offerTarget(o)); err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleOfferClaim, "lease", id, err, map[string]any{"offer": o.UUID, "node": o.ResourceUUID})
	}()
	if err := in.check(); err != nil {
		return nil, err
	}
	p := principal(ctx)
	project := p.Project
	if p.System {
		if in.ProjectID == "" {
			return nil, errs.BadRequest("project_id", "project_id is required: a system-scoped caller claims for a project")
		}
		project = in.ProjectID
	} else if in.ProjectID != "" && in.ProjectID != project {
		return nil, errs.Forbidden("Access was denied to project %s: a project claims for itself.", in.ProjectID)
	}
	now := s.now()
	start := now
	if in.StartTime != nil {
		start = UTC(*in.StartTime)
	}
	end := start.Add(DefaultLeaseTime)
	if o.EndTime.Before(end) {
		end = o.EndTime
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
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := s.lockNode(ctx, tx, o.ResourceUUID)
		if err != nil {
			return err
		}
		cur, err := tx.Offer.Get(ctx, o.ID)
		if err != nil {
			return err
		}
		if cur.Status != StatusAvailable {
			return errs.Conflict("Offer %s is not available (status %s).", cur.UUID, cur.Status)
		}
		if start.Before(cur.StartTime) || end.After(cur.EndTime) {
			return errs.Conflict("Offer %s has no availabilities from %s to %s: it runs from %s to %s.",
				cur.UUID, Format(start), Format(end), Format(cur.StartTime), Format(cur.EndTime))
		}
		if l, err := tx.Lease.Query().Where(lease.OfferUUID(cur.UUID), lease.StatusIn(booked...), lease.StartTimeLT(end), lease.EndTimeGT(start)).First(ctx); err == nil {
			return conflict(Format(start)+" to "+Format(end), l)
		} else if !ent.IsNotFound(err) {
			return err
		}
		if err := s.checkQuota(ctx, tx, project, "", start, end); err != nil {
			return err
		}
		c := s.create(tx, id, in, project, cur.ProjectID, n.UUID, start, end, now)
		c.SetOfferUUID(cur.UUID).SetNillableParentLeaseUUID(cur.ParentLeaseUUID)
		if out, err = c.Save(ctx); err != nil {
			return err
		}
		if err := leaseEvent(ctx, tx, now, out, "create"); err != nil {
			return err
		}
		if err := s.tell(ctx, tx, claimedNotice(cur, out, n)); err != nil {
			return err
		}
		return note(ctx, tx, n.ID, "", fmt.Sprintf("Lease %s claimed by %s from offer %s, %s to %s", describe(out), project, cur.UUID, Format(start), Format(end)))
	})
	return out, err
}

func (s *Service) create(tx *ent.Client, id string, in LeaseInput, project, owner, node string, start, end, now time.Time) *ent.LeaseCreate {
	return tx.Lease.Create().SetUUID(id).SetNillableName(in.Name).SetNillablePurpose(in.Purpose).SetProjectID(project).SetOwnerID(owner).
		SetResourceUUID(node).SetStartTime(start).SetEndTime(end).SetProperties(in.Properties).SetCreatedAt(now)
}

// CreateLease leases a node to a project without an offer: its owner's
// members (or system members) any free window, a lessee's members within
// their active lease (a sub-lease, parent_lease_uuid).
func (s *Service) CreateLease(ctx context.Context, in LeaseInput) (out *ent.Lease, err error) {
	if in.ResourceType != "" && in.ResourceType != ResourceNode {
		return nil, errs.BadRequest("resource_type", "resource_type %s unknown: Anvil leases ironic_node", in.ResourceType)
	}
	n, err := s.findNode(ctx, "resource_uuid", in.ResourceUUID)
	if err != nil {
		return nil, err
	}
	id := newUUID()
	if err := s.guard.Authorize(ctx, RuleLeaseCreate, "lease", id, nodes.Target(n)); err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleLeaseCreate, "lease", id, err, map[string]any{"node": n.UUID, "project_id": in.ProjectID})
	}()
	if err := in.check(); err != nil {
		return nil, err
	}
	if in.ProjectID == "" {
		return nil, errs.BadRequest("project_id", "project_id is required: the project the node is leased to")
	}
	now := s.now()
	start := now
	if in.StartTime != nil {
		start = UTC(*in.StartTime)
	}
	end := start.Add(DefaultLeaseTime)
	if in.EndTime != nil {
		end = UTC(*in.EndTime)
	}
	if err := window(start, end); err != nil {
		return nil, err
	}
	if !end.After(now) {
		return nil, errs.BadRequest("end_time", "end_time %s is in the past", Format(end))
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
			if parent, err = s.parentLease(ctx, tx, cur, p.Project, start, end); err != nil {
				return err
			}
			owner = p.Project
		}
		if owner == "" {
			return errs.BadRequest("resource_uuid", "node %s has no owner to lease it", cur.UUID)
		}
		if err := s.free(ctx, tx, cur.UUID, parent, start, end, ""); err != nil {
			return err
		}
		if err := s.checkQuota(ctx, tx, in.ProjectID, "", start, end); err != nil {
			return err
		}
		c := s.create(tx, id, in, in.ProjectID, owner, cur.UUID, start, end, now)
		if parent != nil {
			c.SetParentLeaseUUID(parent.UUID)
		}
		if out, err = c.Save(ctx); err != nil {
			return err
		}
		if err := leaseEvent(ctx, tx, now, out, "create"); err != nil {
			return err
		}
		return note(ctx, tx, cur.ID, "", fmt.Sprintf("Lease %s made by %s for %s, %s to %s", describe(out), owner, in.ProjectID, Format(start), Format(end)))
	})
	return out, err
}

// visibleLeases are the leases the caller's project holds or let.
func visibleLeases(project string) predicate.Lease {
	return lease.Or(lease.ProjectID(project), lease.OwnerID(project))
}

// GetLease shows a lease its lessee or owner (or a system reader) sees;
// 404 for absent and hidden alike.
func (s *Service) GetLease(ctx context.Context, id string) (*ent.Lease, error) {
	return s.findLease(ctx, id, RuleLeaseGet)
}

func (s *Service) findLease(ctx context.Context, id, rule string) (*ent.Lease, error) {
	q := s.db.Lease.Query().Where(lease.Or(lease.UUID(id), lease.Name(id)))
	p := principal(ctx)
	if !s.guard.Allowed(ctx, RuleLeaseAdmin, policies.Target{}) {
		if p.Project == "" {
			return nil, LeaseNotFound(id)
		}
		q = q.Where(visibleLeases(p.Project))
	}
	ls, err := q.Limit(2).All(ctx)
	if err != nil {
		return nil, err
	}
	switch len(ls) {
	case 0:
		return nil, LeaseNotFound(id)
	case 2:
		return nil, errs.Conflict("Duplicate leases with name %s.", id)
	}
	if err := s.guard.Authorize(ctx, rule, "lease", ls[0].UUID, leaseTarget(ls[0])); err != nil {
		return nil, err
	}
	return ls[0], nil
}

// LeaseFilter narrows a lease list, as ESI-Leap's GET /v1/leases does.
type LeaseFilter struct {
	ProjectID, OwnerID, OfferUUID, ResourceUUID string
	// Status is one status, "any", or empty for the leases not over.
	Status string
	// All (view=all) lists every project's leases, for lease_admin.
	All bool
	// StartTime and EndTime select leases within that range.
	StartTime, EndTime *time.Time
}

// ListLeases lists leases as ESI-Leap does: by default the caller's
// project's as lessee or owner; view=all, or another project's by
// project_id or owner_id, needs lease_admin, as does any list by a
// system-scoped caller.
func (s *Service) ListLeases(ctx context.Context, f LeaseFilter) ([]*ent.Lease, error) {
	p := principal(ctx)
	if err := pair("start_time", "end_time", f.StartTime, f.EndTime); err != nil {
		return nil, err
	}
	q := s.db.Lease.Query()
	// A system-scoped caller has no project of its own to list by: its
	// list is view=all's.
	admin := f.All || p.Project == "" || (f.OwnerID != "" && f.OwnerID != p.Project) || (f.OwnerID == "" && f.ProjectID != "" && f.ProjectID != p.Project)
	if admin {
		if err := s.guard.Authorize(ctx, RuleLeaseAdmin, "lease", "", policies.Target{}); err != nil {
			return nil, err
		}
	} else {
		if err := s.guard.Authorize(ctx, RuleLeaseGet, "lease", "", policies.Target{LeaseOwner: p.Project, LeaseLessee: p.Project}); err != nil {
			return nil, err
		}
		if f.OwnerID == "" && f.ProjectID == "" {
			q = q.Where(visibleLeases(p.Project))
		}
	}
	if f.ProjectID != "" {
		q = q.Where(lease.ProjectID(f.ProjectID))
	}
	if f.OwnerID != "" {
		q = q.Where(lease.OwnerID(f.OwnerID))
	}
	switch f.Status {
	case "":
		q = q.Where(lease.StatusIn(StatusCreated, StatusActive, StatusError, StatusWaitCancel, StatusWaitExpire, StatusWaitFulfill))
	case "any":
	default:
		q = q.Where(lease.Status(f.Status))
	}
	if f.OfferUUID != "" {
		q = q.Where(lease.OfferUUID(f.OfferUUID))
	}
	if f.ResourceUUID != "" {
		q = q.Where(lease.ResourceUUID(f.ResourceUUID))
	}
	if f.StartTime != nil {
		// ESI-Leap's "within" filter: leases inside the range.
		q = q.Where(lease.StartTimeGTE(UTC(*f.StartTime)), lease.EndTimeLTE(UTC(*f.EndTime)))
	}
	return q.Order(ent.Asc(lease.FieldStartTime), ent.Asc(lease.FieldID)).All(ctx)
}

// UpdateLease moves a lease's end (ESI-Leap's PATCH, end_time only). An
// extension must stay within the lease's offer (or parent lease) and
// clear of the next lease, and within the quota; a shortening is always
// allowed, down to after the start (and the present, once begun).
func (s *Service) UpdateLease(ctx context.Context, id string, end time.Time) (out *ent.Lease, err error) {
	l, err := s.findLease(ctx, id, RuleLeaseUpdate)
	if err != nil {
		return nil, err
	}
	end = UTC(end)
	defer func() {
		s.guard.Done(ctx, RuleLeaseUpdate, "lease", l.UUID, err, map[string]any{"end_time": Format(end), "was": Format(l.EndTime)})
	}()
	now := s.now()
	if err := window(l.StartTime, end); err != nil {
		return nil, err
	}
	if !end.After(now) {
		return nil, errs.BadRequest("end_time", "end_time %s is in the past: delete the lease to end it now", Format(end))
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := s.lockNode(ctx, tx, l.ResourceUUID)
		if err != nil {
			return err
		}
		cur, err := tx.Lease.Get(ctx, l.ID)
		if err != nil {
			return err
		}
		if cur.Status != StatusCreated && cur.Status != StatusActive {
			return errs.Conflict("Lease %s is %s: only a created or active lease changes its end.", cur.UUID, cur.Status)
		}
		if end.After(cur.EndTime) {
			if err := s.extendable(ctx, tx, cur, end); err != nil {
				return err
			}
		}
		if end.Before(cur.EndTime) {
			// A sub-lease or sub-offer must not outlive its parent.
			if sub, err := tx.Lease.Query().Where(lease.ParentLeaseUUID(cur.UUID), lease.StatusIn(booked...), lease.EndTimeGT(end)).First(ctx); err == nil {
				return errs.Conflict("Lease %s cannot end at %s: its sub-lease %s runs until %s.", cur.UUID, Format(end), sub.UUID, Format(sub.EndTime))
			} else if !ent.IsNotFound(err) {
				return err
			}
			if sub, err := tx.Offer.Query().Where(offer.ParentLeaseUUID(cur.UUID), offer.Status(StatusAvailable), offer.EndTimeGT(end)).First(ctx); err == nil {
				return errs.Conflict("Lease %s cannot end at %s: its sub-offer %s runs until %s.", cur.UUID, Format(end), sub.UUID, Format(sub.EndTime))
			} else if !ent.IsNotFound(err) {
				return err
			}
		}
		if out, err = tx.Lease.UpdateOne(cur).SetEndTime(end).SetUpdatedAt(now).Save(ctx); err != nil {
			return err
		}
		if err := leaseEvent(ctx, tx, now, out, "update"); err != nil {
			return err
		}
		return note(ctx, tx, n.ID, "", fmt.Sprintf("Lease %s of %s now ends at %s (was %s)", describe(out), out.ProjectID, Format(end), Format(cur.EndTime)))
	})
	return out, err
}

// extendable checks that l may run until end: within its offer or parent
// lease, clear of the next booked lease of its level, within quota.
func (s *Service) extendable(ctx context.Context, tx *ent.Client, l *ent.Lease, end time.Time) error {
	switch {
	case l.OfferUUID != nil:
		o, err := tx.Offer.Query().Where(offer.UUID(*l.OfferUUID)).Only(ctx)
		if err != nil {
			return err
		}
		if end.After(o.EndTime) {
			return errs.Conflict("Lease %s cannot be extended to %s: its offer %s ends at %s.", l.UUID, Format(end), o.UUID, Format(o.EndTime))
		}
		if o.Status != StatusAvailable {
			return errs.Conflict("Lease %s cannot be extended: its offer %s is %s.", l.UUID, o.UUID, o.Status)
		}
	case l.ParentLeaseUUID != nil:
		pl, err := tx.Lease.Query().Where(lease.UUID(*l.ParentLeaseUUID)).Only(ctx)
		if err != nil {
			return err
		}
		if end.After(pl.EndTime) {
			return errs.Conflict("Lease %s cannot be extended to %s: its parent lease %s ends at %s.", l.UUID, Format(end), pl.UUID, Format(pl.EndTime))
		}
	}
	same := []predicate.Lease{lease.ResourceUUID(l.ResourceUUID), lease.IDNEQ(l.ID), lease.StatusIn(booked...),
		lease.StartTimeLT(end), lease.EndTimeGT(l.EndTime)}
	if l.ParentLeaseUUID == nil {
		same = append(same, lease.ParentLeaseUUIDIsNil())
	} else {
		same = append(same, lease.ParentLeaseUUID(*l.ParentLeaseUUID))
	}
	if next, err := tx.Lease.Query().Where(same...).First(ctx); err == nil {
		return conflict("extending lease "+l.UUID+" to "+Format(end), next)
	} else if !ent.IsNotFound(err) {
		return err
	}
	if l.OfferUUID == nil {
		ofs := []predicate.Offer{offer.ResourceUUID(l.ResourceUUID), offer.Status(StatusAvailable), offer.StartTimeLT(end), offer.EndTimeGT(l.EndTime)}
		if l.ParentLeaseUUID == nil {
			ofs = append(ofs, offer.ParentLeaseUUIDIsNil())
		} else {
			ofs = append(ofs, offer.ParentLeaseUUID(*l.ParentLeaseUUID))
		}
		if o, err := tx.Offer.Query().Where(ofs...).First(ctx); err == nil {
			return errs.Conflict("Lease %s cannot be extended to %s: offer %s starts at %s.", l.UUID, Format(end), o.UUID, Format(o.StartTime))
		} else if !ent.IsNotFound(err) {
			return err
		}
	}
	return s.checkQuota(ctx, tx, l.ProjectID, l.UUID, l.StartTime, end)
}

// CancelLease ends a lease early (ESI-Leap's DELETE): a lease not yet
// started is deleted at once; an active one is handed to the conductor,
// which ends it as on time (lessee restored, node torn down and wiped).
// Its window is free again at once, and its sub-leases and sub-offers go
// with it.
func (s *Service) CancelLease(ctx context.Context, id string) (err error) {
	l, err := s.findLease(ctx, id, RuleLeaseDelete)
	if err != nil {
		return err
	}
	defer func() {
		s.guard.Done(ctx, RuleLeaseDelete, "lease", l.UUID, err, map[string]any{"node": l.ResourceUUID})
	}()
	now := s.now()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := s.lockNodeIfAny(ctx, tx, l.ResourceUUID)
		if err != nil {
			return err
		}
		cur, err := tx.Lease.Get(ctx, l.ID)
		if err != nil {
			return err
		}
		// ESI-Leap looks the lease up among those it may delete
		// (LEASE_CAN_DELETE), so a lease already over is not found: the
		// 404 its clients' delete with ignore_missing passes over.
		if !slices.Contains(cancellable, cur.Status) {
			return LeaseNotFound(id)
		}
		return s.cancel(ctx, tx, n, cur, now)
	})
}

// cancel cancels l and, first, its sub-leases and sub-offers, inside tx;
// n is l's node, nil when it was deleted.
func (s *Service) cancel(ctx context.Context, tx *ent.Client, n *ent.Node, l *ent.Lease, now time.Time) error {
	subs, err := tx.Lease.Query().Where(lease.ParentLeaseUUID(l.UUID), lease.StatusIn(cancellable...)).All(ctx)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if err := s.cancel(ctx, tx, n, sub, now); err != nil {
			return err
		}
	}
	if _, err := tx.Offer.Update().Where(offer.ParentLeaseUUID(l.UUID), offer.StatusIn(StatusAvailable, StatusError)).
		SetStatus(StatusDeleted).SetUpdatedAt(now).Save(ctx); err != nil {
		return err
	}
	upd := tx.Lease.UpdateOne(l).SetUpdatedAt(now)
	msg := "Lease %s of %s cancelled before it started"
	if l.Status == StatusActive {
		// The conductor ends it: the lessee and the machine's state are
		// its to change, under the node's lock.
		upd.SetStatus(StatusWaitCancel)
		msg = "Lease %s of %s cancelled; it ends at the conductor's next pass"
	} else {
		upd.SetStatus(StatusDeleted).SetExpireTime(now)
	}
	out, err := upd.Save(ctx)
	if err != nil {
		return err
	}
	if err := leaseEvent(ctx, tx, now, out, "cancel"); err != nil {
		return err
	}
	return noteIf(ctx, tx, n, fmt.Sprintf(msg, describe(out), out.ProjectID))
}
