// Package allocations reserves nodes: a request names a resource class,
// traits and optionally candidate nodes, and gets one available node
// that matches, atomically. A project's restricted allocation considers
// only nodes its project owns or leases.
package allocations

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as Ironic names them.
const (
	RuleGet              = "baremetal:allocation:get"
	RuleList             = "baremetal:allocation:list"
	RuleListAll          = "baremetal:allocation:list_all"
	RuleCreate           = "baremetal:allocation:create"
	RuleCreateRestricted = "baremetal:allocation:create_restricted"
	RuleDelete           = "baremetal:allocation:delete"
)

// States of an allocation.
const (
	StateActive = "active"
	StateError  = "error"
)

// Service serves allocations.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the allocation service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

// Target is the policy target for an allocation.
func Target(a *ent.Allocation) policies.Target {
	t := policies.Target{}
	if a.Owner != nil {
		t.AllocationOwner = *a.Owner
	}
	return t
}

// Allocation is an allocation with its node's UUID.
type Allocation struct {
	*ent.Allocation
	NodeUUID string
}

// Input is a request for a node.
type Input struct {
	Name           *string        `json:"name"`
	ResourceClass  string         `json:"resource_class"`
	Traits         []string       `json:"traits"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Owner          *string        `json:"owner"`
	Extra          map[string]any `json:"extra"`
	UUID           string         `json:"uuid"`
}

func notFound(ident string) error { return errs.NotFound("Allocation %s could not be found.", ident) }

func (s *Service) view(ctx context.Context, a *ent.Allocation) (*Allocation, error) {
	out := &Allocation{Allocation: a}
	if a.NodeID != nil {
		n, err := s.db.Node.Query().Where(node.ID(*a.NodeID)).Select(node.FieldUUID).Only(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return nil, err
		}
		if n != nil {
			out.NodeUUID = n.UUID
		}
	}
	return out, nil
}

// Create validates a request and allocates a node in one step. No match
// is not an error of the request: the allocation is stored in state
// error with a last_error that says why, as Ironic does.
func (s *Service) Create(ctx context.Context, in Input) (out *Allocation, err error) {
	if in.UUID == "" {
		in.UUID = uuid.NewString()
	}
	defer func() {
		s.guard.Done(ctx, RuleCreate, "allocation", in.UUID, err, map[string]any{"resource_class": in.ResourceClass})
	}()
	if err := validate(&in); err != nil {
		return nil, err
	}
	// Unrestricted creation may name any owner; a project falls back to
	// restricted creation, which pins the owner to itself.
	t := policies.Target{}
	if in.Owner != nil {
		t.AllocationOwner = *in.Owner
	}
	if !s.guard.Allowed(ctx, RuleCreate, t) {
		p := policies.PrincipalFrom(ctx)
		if p == nil || p.System {
			return nil, s.guard.Authorize(ctx, RuleCreate, "allocation", in.UUID, t)
		}
		if in.Owner != nil && *in.Owner != p.Project {
			return nil, errs.Forbidden("a project may only allocate for itself; owner must be empty or %s", p.Project)
		}
		in.Owner = &p.Project
		if err := s.guard.Authorize(ctx, RuleCreateRestricted, "allocation", in.UUID, policies.Target{AllocationOwner: p.Project}); err != nil {
			return nil, err
		}
	}
	a, err := s.db.Allocation.Create().SetUUID(in.UUID).SetNillableName(in.Name).SetResourceClass(in.ResourceClass).
		SetTraits(in.Traits).SetCandidateNodes(in.CandidateNodes).SetNillableOwner(in.Owner).SetExtra(in.Extra).
		SetState("allocating").Save(ctx)
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("An allocation named %v or with UUID %s already exists.", deref(in.Name), in.UUID)
	}
	if err != nil {
		return nil, err
	}
	if err := s.allocate(ctx, a, in); err != nil {
		return nil, err
	}
	a, err = s.db.Allocation.Get(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, a)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func validate(in *Input) error {
	if in.ResourceClass == "" || len(in.ResourceClass) > 80 {
		return errs.BadRequest("resource_class", "resource_class is required (at most 80 characters)")
	}
	if in.Name != nil {
		if err := nodes.ValidateName("name", *in.Name); err != nil {
			return err
		}
	}
	if !nodes.IsUUID(in.UUID) {
		return errs.BadRequest("uuid", "uuid %q is not a valid UUID", in.UUID)
	}
	if len(in.Traits) > 50 {
		return errs.BadRequest("traits", "at most 50 traits")
	}
	for _, t := range in.Traits {
		if err := nodes.ValidateTrait(t); err != nil {
			return errs.BadRequest("traits", "%v", err)
		}
	}
	if len(in.CandidateNodes) > 1000 {
		return errs.BadRequest("candidate_nodes", "at most 1000 candidate nodes")
	}
	if in.Owner != nil {
		if *in.Owner == "" {
			in.Owner = nil
		} else if err := nodes.ValidateProject("owner", *in.Owner); err != nil {
			return err
		}
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	if in.Traits == nil {
		in.Traits = []string{}
	}
	return nil
}

// allocate picks a matching node. Candidates are tried in random order so
// concurrent requests rarely collide; each claim is one conditional
// UPDATE, so of two requests for the same node exactly one wins.
func (s *Service) allocate(ctx context.Context, a *ent.Allocation, in Input) error {
	q := s.db.Node.Query().Where(node.ProvisionState(nodes.StateAvailable), node.Maintenance(false),
		node.InstanceUUIDIsNil(), node.ReservationIsNil(), node.ResourceClass(in.ResourceClass), node.Not(node.HasAllocation()))
	if in.Owner != nil {
		q = q.Where(node.Or(node.Owner(*in.Owner), node.Lessee(*in.Owner)))
	}
	if len(in.CandidateNodes) > 0 {
		var ids, names []string
		for _, c := range in.CandidateNodes {
			if nodes.IsUUID(c) {
				ids = append(ids, strings.ToLower(c))
			} else {
				names = append(names, c)
			}
		}
		q = q.Where(node.Or(node.UUIDIn(ids...), node.NameIn(names...)))
	}
	for _, t := range in.Traits {
		q = q.Where(node.HasTraitsWith(trait.Trait(t)))
	}
	cands, err := q.IDs(ctx)
	if err != nil {
		return err
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	for _, id := range cands {
		won := false
		err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
			n, err := tx.Node.Update().Where(node.ID(id), node.InstanceUUIDIsNil(), node.ReservationIsNil(), node.ProvisionState(nodes.StateAvailable)).
				SetInstanceUUID(a.UUID).Save(ctx)
			if err != nil || n == 0 {
				return err
			}
			won = true
			return tx.Allocation.UpdateOneID(a.ID).SetNodeID(id).SetState(StateActive).Exec(ctx)
		})
		if ent.IsConstraintError(err) {
			continue // another allocation holds the node
		}
		if err != nil {
			return err
		}
		if won {
			return nil
		}
	}
	msg := fmt.Sprintf("No available nodes match the resource class %s", in.ResourceClass)
	if len(in.Traits) > 0 {
		msg += " and traits " + strings.Join(in.Traits, ", ")
	}
	if in.Owner != nil {
		msg += " among nodes owned or leased by " + *in.Owner
	}
	return s.db.Allocation.UpdateOneID(a.ID).SetState(StateError).SetLastError(msg + ".").Exec(ctx)
}

func (s *Service) authorized(ctx context.Context, ident string, rules ...string) (*ent.Allocation, error) {
	q := s.db.Allocation.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(allocation.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(allocation.Name(ident))
	}
	a, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	if err != nil {
		return nil, err
	}
	t := Target(a)
	if !s.guard.Allowed(ctx, RuleGet, t) {
		_ = s.guard.Authorize(ctx, RuleGet, "allocation", a.UUID, t)
		return nil, notFound(ident)
	}
	for _, r := range rules {
		if err := s.guard.Authorize(ctx, r, "allocation", a.UUID, t); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Get shows one allocation.
func (s *Service) Get(ctx context.Context, ident string) (*Allocation, error) {
	a, err := s.authorized(ctx, ident)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, a)
}

// ForNode shows the allocation of a node the caller may see.
func (s *Service) ForNode(ctx context.Context, nodes *nodes.Service, ident string) (*Allocation, error) {
	n, err := nodes.Authorized(ctx, ident, RuleGetNode)
	if err != nil {
		return nil, err
	}
	unallocated := errs.NotFound("Node %s is not allocated.", ident)
	a, err := s.db.Allocation.Query().Where(allocation.NodeID(n.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, unallocated
	}
	if err != nil {
		return nil, err
	}
	// An allocation the caller may not see answers as no allocation at
	// all: its UUID is not the caller's to learn.
	x, err := s.Get(ctx, a.UUID)
	if errs.Status(err) == 404 {
		return nil, unallocated
	}
	return x, err
}

// RuleGetNode is the node rule the node's allocation is shown under.
const RuleGetNode = nodes.RuleGet

// List lists the caller's allocations: all for list_all, else its
// project's, filtered in SQL.
func (s *Service) List(ctx context.Context, state string) ([]*Allocation, error) {
	if err := s.guard.Authorize(ctx, RuleList, "allocation", "", policies.Target{}); err != nil {
		return nil, err
	}
	q := s.db.Allocation.Query().Order(ent.Asc(allocation.FieldID)).Limit(1000)
	if !s.guard.Allowed(ctx, RuleListAll, policies.Target{}) {
		p := policies.PrincipalFrom(ctx)
		if p == nil || p.Project == "" {
			return nil, errs.Forbidden("listing allocations needs a project or system reader")
		}
		q = q.Where(allocation.Owner(p.Project))
	}
	if state != "" {
		if !slices.Contains([]string{"allocating", StateActive, StateError}, state) {
			return nil, errs.BadRequest("state", "state must be allocating, active or error")
		}
		q = q.Where(allocation.State(state))
	}
	as, err := q.All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Allocation, len(as))
	for i, a := range as {
		if out[i], err = s.view(ctx, a); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Delete releases an allocation and its node.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	a, err := s.authorized(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "allocation", a.UUID, err, nil) }()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if a.NodeID != nil {
			if err := tx.Node.Update().Where(node.ID(*a.NodeID), node.InstanceUUID(a.UUID)).ClearInstanceUUID().Exec(ctx); err != nil {
				return err
			}
		}
		return tx.Allocation.DeleteOneID(a.ID).Exec(ctx)
	})
}
