package leasing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/ent/offer"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
)

// Ender is what the conductor lends a pass, as to the allocation lease
// pass (allocations.LeaseEnder): its name, its share of the nodes, and
// its undeploy.
type Ender struct {
	// Name is the conductor's, as the node's history records it.
	Name string
	// Mine says whether this conductor acts on the node (its hash ring).
	Mine func(n *ent.Node) bool
	// Undeploy tears a deployed node down as PUT provision deleted does:
	// automated cleaning follows and leaves its wipe record, which names
	// the node's lessee as n has it. A 409 means the node is in no state
	// to undeploy; a locked node is busy.
	Undeploy func(ctx context.Context, n *ent.Node) error
}

// Run is one conductor pass at now: it ends the leases past their end or
// cancelled, starts those whose start has come, and expires offers past
// their end. Every step is a conditional write, so of several conductors
// (or a pass after every replica was down) each lease starts and ends
// exactly once. ctx carries the conductor's principal. One lease that
// cannot change now does not hold up the others: their errors are joined.
func (s *Service) Run(ctx context.Context, e Ender) error {
	now := s.now()
	var failed []error
	// Sub-leases end before their parents: they were made later.
	ending, err := s.db.Lease.Query().Where(lease.Or(
		lease.And(lease.Status(StatusActive), lease.EndTimeLTE(now)),
		lease.Status(StatusWaitCancel))).Order(ent.Desc(lease.FieldID)).All(ctx)
	if err != nil {
		return err
	}
	for _, l := range ending {
		if err := s.end(ctx, l, now, e); err != nil {
			failed = append(failed, fmt.Errorf("ending lease %s: %w", l.UUID, err))
		}
	}
	// Parents start before their sub-leases.
	starting, err := s.db.Lease.Query().Where(lease.StatusIn(StatusCreated, StatusWaitFulfill), lease.StartTimeLTE(now)).
		Order(ent.Asc(lease.FieldID)).All(ctx)
	if err != nil {
		return errors.Join(append(failed, err)...)
	}
	for _, l := range starting {
		if err := s.start(ctx, l, now, e); err != nil {
			failed = append(failed, fmt.Errorf("starting lease %s: %w", l.UUID, err))
		}
	}
	if err := s.warnEnding(ctx, now); err != nil {
		failed = append(failed, fmt.Errorf("warning of leases ending: %w", err))
	}
	expired, err := s.db.Offer.Query().Where(offer.Status(StatusAvailable), offer.EndTimeLTE(now)).All(ctx)
	if err != nil {
		return errors.Join(append(failed, err)...)
	}
	for _, o := range expired {
		if err := s.expireOffer(ctx, o, now); err != nil {
			failed = append(failed, fmt.Errorf("expiring offer %s: %w", o.UUID, err))
		}
	}
	return errors.Join(failed...)
}

// start gives the node to l's project, once: the node must be idle (no
// conductor's lock, no state change under way), no other lease of its
// level may hold it, and a sub-lease's parent must be active. Otherwise
// the next pass tries again. A lease whose whole window passed while no
// conductor ran expires without starting.
func (s *Service) start(ctx context.Context, l *ent.Lease, now time.Time, e Ender) error {
	n, err := s.db.Node.Query().Where(node.UUID(l.ResourceUUID)).Only(ctx)
	if ent.IsNotFound(err) {
		return s.finish(ctx, l, nil, l.Status, StatusError, now, "", "")
	}
	if err != nil || !e.Mine(n) {
		return err
	}
	if !l.EndTime.After(now) {
		return s.finish(ctx, l, n, l.Status, StatusExpired, now, fmt.Sprintf("Lease %s of %s ended at %s before it could start", describe(l), l.ProjectID, Format(l.EndTime)),
			"it ended at "+when(l.EndTime)+" before it could start, as no conductor ran while it was due")
	}
	done := false
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cur, err := s.lockNode(ctx, tx, l.ResourceUUID)
		if err != nil {
			return err
		}
		if cur.Reservation != nil || cur.TargetProvisionState != nil {
			return nil // busy: the next pass
		}
		q := tx.Lease.Query().Where(lease.ResourceUUID(l.ResourceUUID), lease.IDNEQ(l.ID), lease.StatusIn(holding...))
		if l.ParentLeaseUUID == nil {
			q = q.Where(lease.ParentLeaseUUIDIsNil())
		} else {
			q = q.Where(lease.ParentLeaseUUID(*l.ParentLeaseUUID))
		}
		if busy, err := q.Exist(ctx); err != nil || busy {
			return err // the previous lease is still ending
		}
		if l.ParentLeaseUUID != nil {
			parent, err := tx.Lease.Query().Where(lease.UUID(*l.ParentLeaseUUID)).Only(ctx)
			if err != nil {
				return err
			}
			if parent.Status != StatusActive {
				return nil // not yet started, or ending
			}
		}
		won, err := tx.Lease.Update().Where(lease.ID(l.ID), lease.StatusIn(StatusCreated, StatusWaitFulfill)).
			SetStatus(StatusActive).SetFulfillTime(now).SetUpdatedAt(now).Save(ctx)
		if err != nil || won == 0 {
			return err
		}
		if err := tx.Node.UpdateOneID(cur.ID).SetLessee(l.ProjectID).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return err
		}
		if err := leaseEvent(ctx, tx, now, l, "fulfill"); err != nil {
			return err
		}
		done = true
		if err := s.tell(ctx, tx, startedNotices(l, cur)...); err != nil {
			return err
		}
		return note(ctx, tx, cur.ID, e.Name, fmt.Sprintf("Lease %s started: lessee %s → %s until %s", describe(l), tenancy(cur.Lessee), l.ProjectID, Format(l.EndTime)))
	})
	if done {
		s.guard.Done(ctx, RuleLeaseUpdate, "lease", l.UUID, nil, map[string]any{"action": "fulfill", "node": l.ResourceUUID, "lessee": l.ProjectID})
	}
	return err
}

func tenancy(p string) string {
	if p == "" {
		return "(none)"
	}
	return p
}

// end ends lease l (past its end, or cancelled), once. A deployed node is
// undeployed first, while l's project is still its lessee, so the wipe
// record of the cleaning that follows names that project; the lease's
// status and the node's lessee change once the node holds no instance:
// at once for a node that was not deployed, else after the undeploy is
// accepted. A node in maintenance or protected waits for its owner or an
// operator, with one note in its history; a busy node waits for the next
// pass.
func (s *Service) end(ctx context.Context, l *ent.Lease, now time.Time, e Ender) error {
	final := StatusExpired
	if l.Status == StatusWaitCancel {
		final = StatusDeleted
	}
	n, err := s.db.Node.Query().Where(node.UUID(l.ResourceUUID)).Only(ctx)
	if ent.IsNotFound(err) {
		return s.finish(ctx, l, nil, l.Status, final, now, "", "the node is gone")
	}
	if err != nil || !e.Mine(n) {
		return err
	}
	prefix := fmt.Sprintf("Lease %s of %s ended at %s: ", describe(l), l.ProjectID, Format(l.EndTime))
	if final == StatusDeleted {
		prefix = fmt.Sprintf("Lease %s of %s cancelled: ", describe(l), l.ProjectID)
	}
	switch {
	case n.Reservation != nil || n.TargetProvisionState != nil:
		return nil
	case slices.Contains(allocations.Releasable, n.ProvisionState):
		// Nothing to tear down; an allocation the project still holds
		// on the node goes with the lease.
		return s.finish(ctx, l, n, l.Status, final, now, prefix+"the node holds no instance", "the node held no instance, so nothing was torn down")
	case n.Maintenance:
		return s.await(ctx, n, e.Name, prefix+"the node is in maintenance; it awaits its owner or an operator")
	case n.Protected:
		return s.await(ctx, n, e.Name, prefix+"the node is protected; it awaits its owner or an operator")
	}
	err = e.Undeploy(ctx, n)
	switch {
	case errs.IsLocked(err):
		return nil
	case errs.Status(err) == 409:
		return s.await(ctx, n, e.Name, fmt.Sprintf("%sthe node is %s and cannot be undeployed; it awaits its owner or an operator", prefix, n.ProvisionState))
	case err != nil:
		return err
	}
	return s.finish(ctx, l, n, l.Status, final, now, prefix+"undeploying; automated cleaning wipes it",
		"its instance is being torn down and automated cleaning wipes its disks; a notice follows when the wipe is recorded")
}

// await notes msg in n's history once: nothing changed, so nothing is
// audited.
func (s *Service) await(ctx context.Context, n *ent.Node, conductor, msg string) error {
	noted, err := s.db.NodeEvent.Query().Where(nodeevent.NodeID(n.ID), nodeevent.Event(msg)).Exist(ctx)
	if err != nil || noted {
		return err
	}
	return note(ctx, s.db.Client, n.ID, conductor, msg)
}

// finish moves l from status from to final, once, and gives node n (nil
// when it is gone) back: its lessee becomes the parent lease's project
// when l was a sub-lease of an active lease, else none, if it still is
// l's project. Sub-leases and sub-offers of l that had not started end
// with it. msg goes to the node's history; what tells the lessee and
// owner what became of the node.
func (s *Service) finish(ctx context.Context, l *ent.Lease, n *ent.Node, from, final string, now time.Time, msg, what string) error {
	done := false
	after := ""
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if n != nil {
			if _, err := s.lockNode(ctx, tx, n.UUID); err != nil {
				return err
			}
		}
		upd := tx.Lease.Update().Where(lease.ID(l.ID), lease.Status(from)).SetStatus(final).SetUpdatedAt(now)
		if final != StatusError {
			upd.SetExpireTime(now)
		}
		won, err := upd.Save(ctx)
		if err != nil || won == 0 {
			return err
		}
		done = true
		if _, err := tx.Lease.Update().Where(lease.ParentLeaseUUID(l.UUID), lease.StatusIn(StatusCreated, StatusWaitFulfill)).
			SetStatus(StatusExpired).SetExpireTime(now).SetUpdatedAt(now).Save(ctx); err != nil {
			return err
		}
		if _, err := tx.Offer.Update().Where(offer.ParentLeaseUUID(l.UUID), offer.Status(StatusAvailable)).
			SetStatus(StatusExpired).SetUpdatedAt(now).Save(ctx); err != nil {
			return err
		}
		action := "delete"
		if final == StatusError {
			action = "error"
		}
		if err := leaseEvent(ctx, tx, now, l, action); err != nil {
			return err
		}
		if final != StatusError {
			if err := s.tell(ctx, tx, endedNotices(l, n, final, what)...); err != nil {
				return err
			}
		}
		if n == nil {
			return nil
		}
		if l.ParentLeaseUUID != nil {
			parent, err := tx.Lease.Query().Where(lease.UUID(*l.ParentLeaseUUID), lease.Status(StatusActive)).Only(ctx)
			if err != nil && !ent.IsNotFound(err) {
				return err
			}
			if parent != nil {
				after = parent.ProjectID
			}
		}
		if slices.Contains(allocations.Releasable, n.ProvisionState) {
			released, err := releaseAllocation(ctx, tx, n, l.ProjectID)
			if err != nil {
				return err
			}
			if released != "" {
				msg += "; allocation " + released + " released"
			}
		}
		gave, err := tx.Node.Update().Where(node.ID(n.ID), node.Lessee(l.ProjectID)).SetLessee(after).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if gave > 0 {
			msg += fmt.Sprintf("; lessee %s → %s", l.ProjectID, tenancy(after))
		}
		return note(ctx, tx, n.ID, "", msg)
	})
	if done {
		s.guard.Done(ctx, RuleLeaseUpdate, "lease", l.UUID, nil, map[string]any{"action": final, "node": l.ResourceUUID, "lessee": after})
	}
	return err
}

// releaseAllocation deletes, in tx, the allocation project holds on node
// n, which holds no instance, and clears the node's instance_uuid it set:
// the node must not stay reserved for a project whose lease is over. It
// returns the allocation's label, "" when there was none.
func releaseAllocation(ctx context.Context, tx *ent.Client, n *ent.Node, project string) (string, error) {
	a, err := tx.Allocation.Query().Where(allocation.NodeID(n.ID), allocation.Owner(project)).Only(ctx)
	if ent.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if err := tx.Node.Update().Where(node.ID(n.ID), node.InstanceUUID(a.UUID)).ClearInstanceUUID().Exec(ctx); err != nil {
		return "", err
	}
	return allocations.Label(a), tx.Allocation.DeleteOne(a).Exec(ctx)
}

// expireOffer marks an offer past its end expired, once, and says so in
// its node's history (when the node is still there).
func (s *Service) expireOffer(ctx context.Context, o *ent.Offer, now time.Time) error {
	done := false
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		won, err := tx.Offer.Update().Where(offer.ID(o.ID), offer.Status(StatusAvailable)).SetStatus(StatusExpired).SetUpdatedAt(now).Save(ctx)
		if err != nil || won == 0 {
			return err
		}
		done = true
		if err := event(ctx, tx, now, "esi_leap.offer.expire.end", "offer", o.UUID, o.ResourceUUID, deref(o.LesseeID), o.ProjectID); err != nil {
			return err
		}
		n, err := tx.Node.Query().Where(node.UUID(o.ResourceUUID)).Only(ctx)
		if ent.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return note(ctx, tx, n.ID, "", "Offer "+o.UUID+" expired at "+Format(o.EndTime))
	})
	if done {
		s.guard.Done(ctx, RuleOfferDelete, "offer", o.UUID, nil, map[string]any{"action": StatusExpired, "node": o.ResourceUUID})
	}
	return err
}
