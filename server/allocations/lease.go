package allocations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/sqljson"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// LeaseKey is the extra key holding an allocation's lease end, and
// LeaseField the name a 400 gives it. The lease lives in extra (not a
// column) so Ironic clients keep reading and writing it as any other
// extra key.
const (
	LeaseKey   = "anvil_expires_at"
	LeaseField = "extra." + LeaseKey
)

// leaseLayout is how a lease end is stored: UTC to the second, fixed
// width, so the expiry query compares the strings in SQL on both
// databases and their order is the times' order.
const leaseLayout = "2006-01-02T15:04:05Z"

// parseLease reads a lease end given as RFC 3339.
func parseLease(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, errs.BadRequest(LeaseField, "%s must be an RFC 3339 timestamp such as 2030-01-02T15:04:05Z, not %v", LeaseField, v)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errs.BadRequest(LeaseField, "%s %q is not an RFC 3339 timestamp such as 2030-01-02T15:04:05Z", LeaseField, s)
	}
	return t.UTC().Truncate(time.Second), nil
}

// capped says whether the caller's lease ends are bound by MaxLease:
// project-scoped callers are; system-scoped ones (operators) are not.
func (s *Service) capped(ctx context.Context) bool {
	p := policies.PrincipalFrom(ctx)
	return s.MaxLease > 0 && p != nil && !p.System
}

// checkLease validates and normalises the lease end in extra, which
// before held (nothing when creating): a timestamp, not in the past at
// create, and for a capped caller present at create, kept on update,
// and no later than now+MaxLease when set or changed.
func (s *Service) checkLease(ctx context.Context, extra, before map[string]any, creating bool, now time.Time) error {
	v, has := extra[LeaseKey]
	old, had := before[LeaseKey]
	capped := s.capped(ctx)
	if !has {
		switch {
		case capped && creating:
			return errs.BadRequest(LeaseField, "%s is required: leases end within %s of their start here", LeaseField, s.MaxLease)
		case capped && had:
			return errs.BadRequest(LeaseField, "%s may not be removed: leases end within %s here", LeaseField, s.MaxLease)
		}
		return nil
	}
	end, err := parseLease(v)
	if err != nil {
		return err
	}
	norm := end.Format(leaseLayout)
	extra[LeaseKey] = norm
	if creating && !end.After(now) {
		return errs.BadRequest(LeaseField, "%s %s is in the past", LeaseField, norm)
	}
	if capped && (!had || old != norm) && end.After(now.Add(s.MaxLease)) {
		return errs.BadRequest(LeaseField, "%s %s is beyond the longest lease, %s from now (%s)", LeaseField, norm, s.MaxLease, now.Add(s.MaxLease).UTC().Format(leaseLayout))
	}
	return nil
}

// LeaseEnder is what the conductor lends the lease pass.
type LeaseEnder struct {
	// Name is the conductor's, as the node's history records it.
	Name string
	// Mine says whether this conductor acts on the node (its hash
	// ring), so replicas split the nodes between them.
	Mine func(n *ent.Node) bool
	// Undeploy tears a deployed node down as PUT provision deleted
	// does: automated cleaning follows and the tear-down destroys the
	// allocation. A 409 means the node is in no state to undeploy.
	Undeploy func(ctx context.Context, n *ent.Node) error
}

// Releasable are the settled states of a node that holds no instance:
// a lease ending there only releases the allocation. A failed clean,
// inspection or adoption stays for the owner or an operator to look at,
// but the tenant's hold on the node ends. Leasing's lease ends
// (server/leasing) read the same list.
var Releasable = []string{nodes.StateAvailable, nodes.StateManageable, nodes.StateEnroll,
	nodes.StateCleanFailed, "inspect failed", "adopt failed"}

// leaseBatch is how many expired allocations one query of a pass reads.
const leaseBatch = 100

// Lease-end outcomes, as the audit detail names them.
const (
	leaseUndeploy = "undeploy"
	leaseRelease  = "release"
)

// EndLeases ends the leases past their end at now, the oldest first, and
// returns how many it acted on. ctx carries the conductor's principal,
// which the audit rows name. A deployed node is undeployed, a held node
// that is not deployed is released, an allocation without a node is
// deleted; a node in maintenance or protected, or in a state it cannot
// be undeployed from (service failed), is left to its owner or an
// operator with one note in its history; a busy node is tried again at
// the next pass. Every action is a conditional write, so of two
// conductors (or a conductor and the tenant releasing at the same
// moment) exactly one acts and the other finds nothing to do.
//
// The query reads leaseBatch rows at a time, keyed on id, to the end:
// leases that stay past their end (another replica's nodes, nodes in
// maintenance) must not crowd out those behind them.
func (s *Service) EndLeases(ctx context.Context, now time.Time, e LeaseEnder) (int, error) {
	acted, last := 0, 0
	var failed []error
	for {
		as, err := s.db.Allocation.Query().
			Where(allocation.IDGT(last), predicate.Allocation(func(sel *entsql.Selector) {
				sel.Where(sqljson.ValueLTE(sel.C(allocation.FieldExtra), now.UTC().Format(leaseLayout), sqljson.Path(LeaseKey)))
			})).
			Order(ent.Asc(allocation.FieldID)).Limit(leaseBatch).All(ctx)
		if err != nil {
			return acted, errors.Join(append(failed, err)...)
		}
		for _, a := range as {
			last = a.ID
			end, err := parseLease(a.Extra[LeaseKey])
			if err != nil || end.After(now) {
				// Written before leases were validated: not a lease.
				continue
			}
			// One lease that cannot end now does not hold up the others.
			did, err := s.endLease(ctx, a, end, e)
			if err != nil {
				failed = append(failed, fmt.Errorf("ending the lease of allocation %s: %w", a.UUID, err))
			}
			if did {
				acted++
			}
		}
		if len(as) < leaseBatch || ctx.Err() != nil {
			return acted, errors.Join(failed...)
		}
	}
}

// Label names an allocation in a node's history: its name, else its UUID.
func Label(a *ent.Allocation) string {
	if a.Name != nil {
		return *a.Name
	}
	return a.UUID
}

func (s *Service) endLease(ctx context.Context, a *ent.Allocation, end time.Time, e LeaseEnder) (bool, error) {
	prefix := fmt.Sprintf("Lease of allocation %s ended at %s: ", Label(a), end.Format(leaseLayout))
	detail := map[string]any{"reason": "lease ended", "expires_at": end.Format(leaseLayout)}
	audit := func(action string, err error) {
		detail["action"] = action
		s.guard.Done(ctx, RuleDelete, "allocation", a.UUID, err, detail)
	}
	if a.NodeID == nil {
		// Still allocating or failed: only the row goes, and only if no
		// node was reserved for it meanwhile.
		n, err := s.db.Allocation.Delete().Where(allocation.ID(a.ID), allocation.NodeIDIsNil()).Exec(ctx)
		if err != nil || n == 0 {
			return false, err
		}
		audit(leaseRelease, nil)
		return true, nil
	}
	n, err := s.db.Node.Get(ctx, *a.NodeID)
	if ent.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !e.Mine(n) {
		return false, nil
	}
	detail["node"] = n.UUID
	await := func(why string) (bool, error) {
		msg := prefix + why + "; it awaits its owner or an operator"
		noted, err := s.db.NodeEvent.Query().Where(nodeevent.NodeID(n.ID), nodeevent.EventType(leaseEvent), nodeevent.Event(msg)).Exist(ctx)
		if err != nil || noted {
			return false, err
		}
		// Nothing changed, so there is nothing to audit: the note is the
		// record.
		return true, s.notify(ctx, e.Name, n.ID, msg)
	}
	switch {
	case n.Maintenance:
		return await("the node is in maintenance")
	case n.Protected:
		return await("the node is protected")
	case n.Reservation != nil || n.TargetProvisionState != nil:
		return false, nil // busy: the next pass
	case slices.Contains(Releasable, n.ProvisionState):
		released, err := s.release(ctx, a, n, history.Event{NodeID: n.ID, Severity: history.Warning, Type: leaseEvent,
			Message: prefix + "released the node", Conductor: e.Name})
		if err != nil || !released {
			return false, err
		}
		audit(leaseRelease, nil)
		return true, nil
	}
	err = e.Undeploy(ctx, n)
	switch {
	case errs.IsLocked(err):
		return false, nil // taken meanwhile: the next pass
	case errs.Status(err) == 409:
		return await(fmt.Sprintf("the node is %s and cannot be undeployed", n.ProvisionState))
	case err != nil:
		audit(leaseUndeploy, err)
		return false, err
	}
	if err := s.notify(ctx, e.Name, n.ID, prefix+"undeploying; automated cleaning wipes it"); err != nil {
		return false, err
	}
	audit(leaseUndeploy, nil)
	return true, nil
}

// leaseEvent is the history type of lease ends: "notify", the event the
// node's owner and lessee see, as when someone asks the owner to look.
const leaseEvent = "notify"

// notify records msg in the node's history, where its owner and lessee
// read it, attributed to the conductor.
func (s *Service) notify(ctx context.Context, conductor string, nodeID int, msg string) error {
	return history.Record(ctx, s.db.Client, history.Event{NodeID: nodeID, Severity: history.Warning, Type: leaseEvent, Message: msg, Conductor: conductor})
}

// release deletes a's row, frees node n and records note in its history,
// in one transaction that holds the node's row and only while n is still
// held by a, unlocked and settled: a node that was deployed or locked
// meanwhile is left (false). Its owner and lessee never find the node
// free without the note saying why.
func (s *Service) release(ctx context.Context, a *ent.Allocation, n *ent.Node, note history.Event) (bool, error) {
	done := false
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		held, err := tx.Node.Update().Where(node.ID(n.ID), node.ReservationIsNil(), node.TargetProvisionStateIsNil(),
			node.ProvisionStateIn(Releasable...), node.Maintenance(false)).
			SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil || held == 0 {
			return err
		}
		if err := tx.Node.Update().Where(node.ID(n.ID), node.InstanceUUID(a.UUID)).ClearInstanceUUID().Exec(ctx); err != nil {
			return err
		}
		gone, err := tx.Allocation.Delete().Where(allocation.ID(a.ID), allocation.NodeID(n.ID)).Exec(ctx)
		if err != nil {
			return err
		}
		if gone == 0 {
			// Released by its tenant first: undo the touch.
			return errGone
		}
		done = true
		return history.Record(ctx, tx, note)
	})
	if errors.Is(err, errGone) {
		return false, nil
	}
	return done, err
}

var errGone = errors.New("allocation gone")
