// Package leasing serves offers and leases (issue 43), ESI-Leap's model
// in Anvil: an owner offers a node for a time window, a project claims
// part of it as a lease, the conductor starts and ends the lease on time
// (lessee set, then removed, the node torn down and wiped), and every
// change is an event, an audit row and a line in the node's history.
//
// Leases of one node never overlap: every check-and-insert runs in one
// transaction that holds the node's row (SELECT … FOR UPDATE on
// PostgreSQL; on SQLite every write transaction is BEGIN IMMEDIATE and so
// holds the one writer lock), so concurrent claims take turns and the
// second sees the first.
package leasing

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as ESI-Leap names them.
const (
	RuleOfferAdmin  = "esi_leap:offer:offer_admin"
	RuleOfferCreate = "esi_leap:offer:create"
	RuleOfferGet    = "esi_leap:offer:get"
	RuleOfferDelete = "esi_leap:offer:delete"
	RuleOfferClaim  = "esi_leap:offer:claim"
	RuleLeaseAdmin  = "esi_leap:lease:lease_admin"
	RuleLeaseCreate = "esi_leap:lease:create"
	RuleLeaseGet    = "esi_leap:lease:get"
	RuleLeaseUpdate = "esi_leap:lease:update"
	RuleLeaseDelete = "esi_leap:lease:delete"
	RuleNodeGetAll  = "esi_leap:node:get_all"
	RuleEventGetAll = "esi_leap:event:get_all"
)

// Statuses, ESI-Leap's strings (esi_leap/common/statuses.py).
const (
	StatusAvailable   = "available"
	StatusCreated     = "created"
	StatusActive      = "active"
	StatusExpired     = "expired"
	StatusDeleted     = "deleted"
	StatusError       = "error"
	StatusWaitFulfill = "wait fulfill"
	StatusWaitExpire  = "wait expire"
	StatusWaitCancel  = "wait cancel"
)

// ResourceNode is the one resource type Anvil leases.
const ResourceNode = "ironic_node"

// DefaultLeaseTime is how long a lease runs when its claim gives no end,
// ESI-Leap's default_lease_time (7 days), cut at the offer's end.
const DefaultLeaseTime = 7 * 24 * time.Hour

var (
	// booked are the statuses of a lease that holds its window: created
	// and waiting to start, running, or ending. A cancelled or expired
	// lease gives its window back.
	booked = []string{StatusCreated, StatusWaitFulfill, StatusActive, StatusError}
	// holding are the statuses of a lease whose project holds the node
	// now, or until the conductor finishes ending it.
	holding = []string{StatusActive, StatusWaitCancel}
	// cancellable are ESI-Leap's LEASE_CAN_DELETE.
	cancellable = []string{StatusActive, StatusCreated, StatusError, StatusWaitFulfill}
)

// Quota bounds what one project may lease; zero means no bound.
type Quota struct {
	// MaxNodes is how many nodes a project may hold in leases at once.
	MaxNodes int
	// MaxNodeHours is how many node-hours a project's leases may cover in
	// one calendar month (UTC).
	MaxNodeHours int
}

// Service serves offers, leases and their events.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	Quota Quota
	// Inbox, when set, tells lessees and owners of leases starting,
	// ending and claimed (notices.go).
	Inbox *inbox.Service
	// clock is time.Now unless a test set its own (SetClock).
	clock atomic.Pointer[func() time.Time]
}

// New returns the leasing service.
func New(db *store.DB, g *guard.Guard) *Service {
	return &Service{db: db, guard: g}
}

// SetClock makes the service read the time from now: tests move it to a
// lease's start or end instead of waiting for it.
func (s *Service) SetClock(now func() time.Time) { s.clock.Store(&now) }

// now is the clock in UTC to the second: times are stored so, which
// keeps SQLite's text comparisons in time order.
func (s *Service) now() time.Time {
	if f := s.clock.Load(); f != nil {
		return UTC((*f)())
	}
	return UTC(time.Now())
}

// UTC is t as stored: UTC, to the second.
func UTC(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

func principal(ctx context.Context) *policies.Principal {
	if p := policies.PrincipalFrom(ctx); p != nil {
		return p
	}
	return &policies.Principal{}
}

// OfferNotFound and LeaseNotFound are ESI-Leap's 404s, for absent and
// hidden alike.
func OfferNotFound(id string) error {
	return errs.NotFound("Offer with name or uuid %s not found.", id)
}

// LeaseNotFound is the 404 of a lease absent or hidden from the caller.
func LeaseNotFound(id string) error {
	return errs.NotFound("Lease with name or uuid %s not found.", id)
}

func offerTarget(o *ent.Offer) policies.Target { return policies.Target{OfferOwner: o.ProjectID} }

func leaseTarget(l *ent.Lease) policies.Target {
	return policies.Target{LeaseOwner: l.OwnerID, LeaseLessee: l.ProjectID}
}

// lockNode takes node uuid's row for the rest of tx, so check-and-insert
// of offers and leases of one node take turns (see the package comment).
func (s *Service) lockNode(ctx context.Context, tx *ent.Client, id string) (*ent.Node, error) {
	q := tx.Node.Query().Where(node.UUID(id))
	if s.db.Dialect == dialect.Postgres {
		q = q.ForUpdate()
	}
	n, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("Node %s could not be found.", id)
	}
	return n, err
}

// lockNodeIfAny is lockNode for withdrawing and cancelling, which must
// work for a node deleted meanwhile: nil then.
func (s *Service) lockNodeIfAny(ctx context.Context, tx *ent.Client, id string) (*ent.Node, error) {
	n, err := s.lockNode(ctx, tx, id)
	if errs.Status(err) == 404 {
		return nil, nil
	}
	return n, err
}

// noteIf is note for a node that may be gone (nil): nothing to write then.
func noteIf(ctx context.Context, tx *ent.Client, n *ent.Node, msg string) error {
	if n == nil {
		return nil
	}
	return note(ctx, tx, n.ID, "", msg)
}

// lockProject makes a project's quota checks take turns on PostgreSQL
// (claims of one project on two nodes lock two different rows); SQLite's
// one writer already serialises them.
func (s *Service) lockProject(ctx context.Context, tx *ent.Client, project string) error {
	if s.db.Dialect != dialect.Postgres || (s.Quota.MaxNodes == 0 && s.Quota.MaxNodeHours == 0) {
		return nil
	}
	rows, err := tx.QueryContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('anvil.leasing.' || $1))", project)
	if err != nil {
		return err
	}
	return rows.Close()
}

// findNode resolves a resource (a node's UUID or name) the caller may
// see: 404 otherwise, as the Ironic API answers.
func (s *Service) findNode(ctx context.Context, field, ident string) (*ent.Node, error) {
	if ident == "" {
		return nil, errs.BadRequest(field, "%s is required", field)
	}
	q := s.db.Node.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(node.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(node.Name(ident))
	}
	n, err := q.Only(ctx)
	if ent.IsNotFound(err) || ent.IsNotSingular(err) {
		return nil, errs.NotFound("Node %s could not be found.", ident)
	}
	if err != nil {
		return nil, err
	}
	p := principal(ctx)
	if !p.System && (p.Project == "" || (n.Owner != p.Project && n.Lessee != p.Project)) {
		return nil, errs.NotFound("Node %s could not be found.", ident)
	}
	return n, nil
}

// window checks a time range: start before end, named by field.
func window(start, end time.Time) error {
	if !start.Before(end) {
		return errs.BadRequest("end_time", "end_time %s is not after start_time %s", Format(end), Format(start))
	}
	return nil
}

// conflict is the 409 of a window taken, naming what holds it.
func conflict(what string, l *ent.Lease) error {
	return errs.Conflict("Time conflict for ironic_node %s: %s overlaps lease %s (%s to %s, %s).",
		l.ResourceUUID, what, l.UUID, Format(l.StartTime), Format(l.EndTime), l.Status)
}

// Format is ESI-Leap's time format: ISO 8601 without a zone, in UTC.
func Format(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// ParseTime reads a time as ESI-Leap's clients send it: ISO 8601 with or
// without fractions and a zone (none means UTC), or with a space for T.
func ParseTime(field, v string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return UTC(t), nil
		}
	}
	return time.Time{}, errs.BadRequest(field, "%s %q is not a time such as 2030-01-02T15:04:05", field, v)
}

// event records an ESI-Leap event in tx.
func event(ctx context.Context, tx *ent.Client, now time.Time, typ, objType, objUUID, resource, lessee, owner string) error {
	c := tx.LeaseEvent.Create().SetEventType(typ).SetEventTime(now).SetObjectType(objType).SetObjectUUID(objUUID).
		SetResourceType(ResourceNode).SetResourceUUID(resource).SetOwnerID(owner)
	if lessee != "" {
		c.SetLesseeID(lessee)
	}
	return c.Exec(ctx)
}

// leaseEvent records lease l's event "esi_leap.lease.<action>.end".
func leaseEvent(ctx context.Context, tx *ent.Client, now time.Time, l *ent.Lease, action string) error {
	return event(ctx, tx, now, "esi_leap.lease."+action+".end", "lease", l.UUID, l.ResourceUUID, l.ProjectID, l.OwnerID)
}

// note writes msg to node n's history, where its owner and lessee read it.
func note(ctx context.Context, tx *ent.Client, nodeID int, conductor, msg string) error {
	p := principal(ctx)
	return history.Record(ctx, tx, history.Event{NodeID: nodeID, Type: "lease", Message: msg, User: p.User, Conductor: conductor})
}

// describe names a lease in messages: its name and UUID.
func describe(l *ent.Lease) string {
	if l.Name != nil && *l.Name != "" {
		return fmt.Sprintf("%s (%s)", *l.Name, l.UUID)
	}
	return l.UUID
}

func newUUID() string { return uuid.NewString() }
