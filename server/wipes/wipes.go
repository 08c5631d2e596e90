// Package wipes serves the wipe records automated cleaning leaves (issue
// #40): what was done to a node's disks between tenants, readable by the
// node's owner and lessee and the project whose allocation the wipe
// followed, as they were at the wipe, even after the lease ended and
// they no longer see the node. It is an Anvil extension of the API;
// Ironic keeps no wipe records. The conductor writes them
// (conductor/wipe.go); nobody changes or deletes one through the API.
package wipes

import (
	"context"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/wiperecord"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// RuleGet reads wipe records.
const RuleGet = "baremetal:wipe_record:get"

// MaxList bounds one list.
const MaxList = 1000

// Service reads wipe records for the caller in the context.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the wipe record service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

// Target is the policy target of a record: its projects at the wipe.
func Target(r *ent.WipeRecord) policies.Target {
	return policies.Target{NodeOwner: deref(r.Owner), NodeLessee: deref(r.Lessee), AllocationOwner: deref(r.AllocationOwner)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func notFound(ident string) error { return errs.NotFound("Wipe record %s could not be found.", ident) }

// Get returns the record the caller may read, by UUID; a hidden record
// and a missing one are the same 404.
func (s *Service) Get(ctx context.Context, ident string) (*ent.WipeRecord, error) {
	if !nodes.IsUUID(ident) {
		return nil, notFound(ident)
	}
	r, err := s.db.WipeRecord.Query().Where(wiperecord.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, RuleGet, Target(r)) {
		return nil, notFound(ident)
	}
	return r, nil
}

// ListOptions filter a list.
type ListOptions struct {
	// Node is a node's UUID: only its records.
	Node string
	// Limit bounds the answer (0: MaxList).
	Limit int
}

// List returns the records the caller may read, newest first: every one
// for a system reader, else those naming the caller's project as owner,
// lessee or allocation owner (filtered in SQL).
func (s *Service) List(ctx context.Context, o ListOptions) ([]*ent.WipeRecord, error) {
	p := policies.PrincipalFrom(ctx)
	q := s.db.WipeRecord.Query().Order(ent.Desc(wiperecord.FieldFinishedAt), ent.Desc(wiperecord.FieldID))
	if p == nil || !p.System {
		proj := ""
		if p != nil {
			proj = p.Project
		}
		// The caller's roles decide whether a record naming its project in
		// any of the three places may be read.
		if err := s.guard.Authorize(ctx, RuleGet, "wipe_record", "", policies.Target{NodeOwner: proj, NodeLessee: proj, AllocationOwner: proj}); err != nil || proj == "" {
			if err == nil {
				err = errs.Forbidden("wipe records are read in a project or system scope")
			}
			return nil, err
		}
		q = q.Where(wiperecord.Or(wiperecord.Owner(proj), wiperecord.Lessee(proj), wiperecord.AllocationOwner(proj)))
	} else if err := s.guard.Authorize(ctx, RuleGet, "wipe_record", "", policies.Target{}); err != nil {
		return nil, err
	}
	if o.Node != "" {
		if !nodes.IsUUID(o.Node) {
			return nil, errs.BadRequest("node", "node must be a node's UUID, not %q", o.Node)
		}
		q = q.Where(wiperecord.NodeUUID(strings.ToLower(o.Node)))
	}
	if o.Limit <= 0 || o.Limit > MaxList {
		o.Limit = MaxList
	}
	return q.Limit(o.Limit).All(ctx)
}
