// Package allocations reserves nodes: a request names a resource class,
// traits and optionally candidate nodes, and gets one available node
// that matches, atomically. A project's restricted allocation considers
// only nodes its project owns or leases.
package allocations

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
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
	RuleUpdate           = "baremetal:allocation:update"
)

// States of an allocation: created allocating, then the conductor moves
// it to active (a node is reserved) or error (none could be).
const (
	StateAllocating = "allocating"
	StateActive     = "active"
	StateError      = "error"
)

// Service serves allocations.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	// wake tells the conductor a new allocation waits; one pending
	// signal is enough, since a run takes every waiting allocation.
	wake chan struct{}
	// MaxLease, when above zero, bounds the lease (extra.anvil_expires_at)
	// a project-scoped caller gives or changes: it must end within
	// MaxLease of now, and may not be removed (see checkLease).
	MaxLease time.Duration
}

// New returns the allocation service.
func New(db *store.DB, g *guard.Guard) *Service {
	return &Service{db: db, guard: g, wake: make(chan struct{}, 1)}
}

// Wake is signalled when an allocation is created; the conductor then
// runs Process without waiting for its next tick.
func (s *Service) Wake() <-chan struct{} { return s.wake }

// Target is the policy target for an allocation.
func Target(a *ent.Allocation) policies.Target {
	t := policies.Target{}
	if a.Owner != nil {
		t.AllocationOwner = *a.Owner
	}
	return t
}

// Allocation is an allocation with its node's UUID and name.
type Allocation struct {
	*ent.Allocation
	NodeUUID, NodeName string
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
	// Node backfills the allocation of a node already deployed (1.58):
	// its UUID or name.
	Node *string `json:"node"`
}

func notFound(ident string) error { return errs.NotFound("Allocation %s could not be found.", ident) }

func (s *Service) view(ctx context.Context, a *ent.Allocation) (*Allocation, error) {
	out := &Allocation{Allocation: a}
	if a.NodeID != nil {
		n, err := s.db.Node.Query().Where(node.ID(*a.NodeID)).Select(node.FieldUUID, node.FieldName).Only(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return nil, err
		}
		if n != nil {
			out.NodeUUID = n.UUID
			if n.Name != nil {
				out.NodeName = *n.Name
			}
		}
	}
	return out, nil
}

// Create validates a request and stores it allocating; the conductor
// then looks for a node (Process), as Ironic's does. Candidate nodes are
// resolved to UUIDs now: one that does not exist or that the caller may
// not see is a 400 naming it. With Node, the allocation is backfilled for
// that node at once instead (backfill).
func (s *Service) Create(ctx context.Context, in Input) (out *Allocation, err error) {
	audit := map[string]any{}
	defer func() {
		audit["resource_class"] = in.ResourceClass
		s.guard.Done(ctx, RuleCreate, "allocation", in.UUID, err, audit)
	}()
	if in.Node != nil {
		audit["node"] = *in.Node
	}
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
	if err := s.checkLease(ctx, in.Extra, nil, true, time.Now()); err != nil {
		return nil, err
	}
	var target *ent.Node
	if in.Node != nil {
		// As Ironic: a node the caller may not see is the same 400 as
		// one that does not exist.
		target, err = s.visibleNode(ctx, "node", *in.Node)
		if err != nil {
			return nil, err
		}
		if in.ResourceClass == "" && target.ResourceClass != nil {
			in.ResourceClass = *target.ResourceClass
		}
		// Without a UUID of its own the allocation takes the instance's
		// the node was deployed with, so the two stay one.
		if in.UUID == "" && target.InstanceUUID != nil {
			in.UUID = *target.InstanceUUID
		}
	} else if in.ResourceClass == "" {
		return nil, errs.BadRequest("resource_class", "The resource_class field is mandatory when not backfilling")
	}
	if in.CandidateNodes, err = s.resolveCandidates(ctx, in.CandidateNodes); err != nil {
		return nil, err
	}
	if in.UUID == "" {
		in.UUID = uuid.NewString()
	}
	a, err := s.db.Allocation.Create().SetUUID(in.UUID).SetNillableName(in.Name).SetResourceClass(in.ResourceClass).
		SetTraits(in.Traits).SetCandidateNodes(in.CandidateNodes).SetNillableOwner(in.Owner).SetExtra(in.Extra).
		SetState(StateAllocating).Save(ctx)
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("An allocation named %v or with UUID %s already exists.", deref(in.Name), in.UUID)
	}
	if err != nil {
		return nil, err
	}
	if target != nil {
		return s.backfill(ctx, a, target)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return s.view(ctx, a)
}

// visibleNode finds a node named in a request body by UUID or name; one
// that does not exist or that the caller may not see is a 400 naming the
// field, the same either way.
func (s *Service) visibleNode(ctx context.Context, field, ident string) (*ent.Node, error) {
	q := s.db.Node.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(node.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(node.Name(ident))
	}
	n, err := q.Only(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return nil, err
	}
	if n == nil || !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
		return nil, errs.BadRequest(field, "Node %s could not be found.", ident)
	}
	return n, nil
}

// backfill records a for node n, deployed without an allocation, as
// Ironic's conductor does (allocations.backfill_allocation): the node must
// be active, unlocked, match the allocation's resource class, traits and
// candidates, and carry no other instance; it then gets the allocation's
// UUID as its instance_uuid. As in Ironic the allocation was stored
// first, and a refusal leaves it in error with the reason in last_error.
func (s *Service) backfill(ctx context.Context, a *ent.Allocation, n *ent.Node) (*Allocation, error) {
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cur, err := tx.Node.Query().Where(node.ID(n.ID)).WithTraits().WithAllocation().Only(ctx)
		if err != nil {
			return err
		}
		if cur.Reservation != nil {
			return errs.NodeLocked(cur.UUID, "host "+*cur.Reservation)
		}
		var problems []string
		if cur.ProvisionState != nodes.StateActive {
			problems = append(problems, fmt.Sprintf("Node must be in the \"active\" state, but the current state is \"%s\"", cur.ProvisionState))
		}
		if a.ResourceClass != "" && deref(cur.ResourceClass) != a.ResourceClass {
			problems = append(problems, fmt.Sprintf("Resource class %s does not match the requested resource class %s", deref(cur.ResourceClass), a.ResourceClass))
		}
		have := make([]string, len(cur.Edges.Traits))
		for i, t := range cur.Edges.Traits {
			have[i] = t.Trait
		}
		for _, t := range a.Traits {
			if !slices.Contains(have, t) {
				problems = append(problems, fmt.Sprintf("List of traits %v does not match the requested traits %v", have, a.Traits))
				break
			}
		}
		if len(a.CandidateNodes) > 0 && !slices.Contains(a.CandidateNodes, cur.UUID) {
			problems = append(problems, fmt.Sprintf("Candidate nodes must be empty or contain the target node, but got %v", a.CandidateNodes))
		}
		if len(problems) > 0 {
			return errs.Conflict("Failed to process allocation %s: Cannot backfill an allocation for node %s: %s.", a.UUID, cur.UUID, strings.Join(problems, "; "))
		}
		if cur.InstanceUUID != nil && *cur.InstanceUUID != a.UUID {
			return errs.Conflict("Node %s is associated with instance %s.", cur.UUID, *cur.InstanceUUID)
		}
		if other := cur.Edges.Allocation; other != nil {
			return errs.Conflict("Node %s is associated with instance %s.", cur.UUID, other.UUID)
		}
		if taken, err := tx.Node.Query().Where(node.InstanceUUID(a.UUID), node.IDNEQ(cur.ID)).Exist(ctx); err != nil {
			return err
		} else if taken {
			return errs.Conflict("Instance %s is already associated with a node, it cannot be associated with this other node %s", a.UUID, cur.UUID)
		}
		// The conditions checked above, once more in the write: a node
		// locked or claimed since is not overwritten.
		won, err := tx.Node.Update().Where(node.ID(cur.ID), node.ReservationIsNil(), node.ProvisionState(nodes.StateActive),
			node.Or(node.InstanceUUIDIsNil(), node.InstanceUUID(a.UUID))).SetInstanceUUID(a.UUID).Save(ctx)
		if err != nil {
			return err
		}
		if won == 0 {
			return errs.Conflict("Node %s changed while the allocation %s was backfilled; try again.", cur.UUID, a.UUID)
		}
		err = tx.Allocation.UpdateOneID(a.ID).SetNodeID(cur.ID).SetState(StateActive).ClearLastError().Exec(ctx)
		if ent.IsConstraintError(err) {
			return errs.Conflict("Node %s is associated with another allocation.", cur.UUID)
		}
		return err
	})
	if err != nil {
		// Ironic keeps the failed allocation, in error, saying why.
		if ferr := s.db.Allocation.UpdateOneID(a.ID).SetState(StateError).SetLastError(err.Error()).Exec(ctx); ferr != nil {
			return nil, ferr
		}
		return nil, err
	}
	x, err := s.db.Allocation.Get(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, x)
}

// resolveCandidates turns candidate node names and UUIDs into UUIDs,
// keeping their order.
func (s *Service) resolveCandidates(ctx context.Context, idents []string) ([]string, error) {
	out := make([]string, 0, len(idents))
	for _, ident := range idents {
		n, err := s.visibleNode(ctx, "candidate_nodes", ident)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, n.UUID) {
			out = append(out, n.UUID)
		}
	}
	return out, nil
}

// Await waits until the conductor has settled a (active or error), for
// callers that answer a person at once such as the portal; it gives up
// with the allocation still allocating when ctx ends or after timeout.
func (s *Service) Await(ctx context.Context, a *Allocation, timeout time.Duration) (*Allocation, error) {
	deadline := time.Now().Add(timeout)
	for a.State == StateAllocating && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return a, nil
		case <-time.After(20 * time.Millisecond):
		}
		x, err := s.db.Allocation.Get(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		if a, err = s.view(ctx, x); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Process settles every allocation still allocating, oldest first. The
// conductor runs it; with several replicas each settles an allocation
// only while holding its row in state allocating, so none is settled
// twice.
func (s *Service) Process(ctx context.Context) error {
	ids, err := s.db.Allocation.Query().Where(allocation.State(StateAllocating)).Order(ent.Asc(allocation.FieldID)).IDs(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.process(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// process looks for a node for one allocation, in one transaction that
// holds the allocation's row: the candidates are tried in random order
// so concurrent allocations rarely collide, and each claim is a
// conditional UPDATE, so of two allocations for one node exactly one
// wins. The errors are Ironic's words (ironic/conductor/allocations.py).
// lockWait is how long an allocation waits for suitable nodes that are
// only locked before it fails.
const lockWait = 30 * time.Second

func (s *Service) process(ctx context.Context, id int) error {
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := tx.Allocation.Update().Where(allocation.ID(id), allocation.State(StateAllocating)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil || n == 0 {
			return err
		}
		a, err := tx.Allocation.Get(ctx, id)
		if err != nil {
			return err
		}
		q := tx.Node.Query().Where(free(a.Owner)...).Where(node.ResourceClass(a.ResourceClass))
		if len(a.CandidateNodes) > 0 {
			q = q.Where(node.UUIDIn(a.CandidateNodes...))
		}
		fail := func(format string, args ...any) error {
			msg := fmt.Sprintf("Failed to process allocation %s: %s.", a.UUID, fmt.Sprintf(format, args...))
			return tx.Allocation.UpdateOneID(id).SetState(StateError).SetLastError(msg).Exec(ctx)
		}
		if ok, err := q.Clone().Exist(ctx); err != nil {
			return err
		} else if !ok {
			if len(a.CandidateNodes) > 0 {
				return fail("none of the requested nodes are available and match the resource class %s", a.ResourceClass)
			}
			return fail("no available nodes match the resource class %s", a.ResourceClass)
		}
		for _, t := range a.Traits {
			q = q.Where(node.HasTraitsWith(trait.Trait(t)))
		}
		// IDs selects the id column on the query it runs, so the name
		// lookup below takes a copy made before.
		named := q.Clone()
		cands, err := q.IDs(ctx)
		if err != nil {
			return err
		}
		if len(cands) == 0 {
			return fail("no suitable nodes have the requested traits %s", strings.Join(a.Traits, ", "))
		}
		rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		// Hostnames often follow the node names (compute-1 on node
		// compute-1); trying the same-named node first keeps them from
		// being swapped, as Ironic does since 1.79 at every request version.
		if a.Name != nil {
			same, err := named.Where(node.Name(*a.Name)).IDs(ctx)
			if err != nil {
				return err
			}
			if len(same) == 1 {
				if i := slices.Index(cands, same[0]); i > 0 {
					cands[0], cands[i] = cands[i], cands[0]
				}
			}
		}
		for _, nid := range cands {
			won, err := tx.Node.Update().Where(node.ID(nid), node.InstanceUUIDIsNil(), node.ReservationIsNil(),
				node.ProvisionState(nodes.StateAvailable), node.Maintenance(false)).SetInstanceUUID(a.UUID).Save(ctx)
			if err != nil {
				return err
			}
			if won == 1 {
				return tx.Allocation.UpdateOneID(id).SetNodeID(nid).SetState(StateActive).ClearLastError().Exec(ctx)
			}
		}
		// Every suitable node is locked for now (a power action, say).
		// Ironic's conductor waits for a node's lock before it gives up;
		// this allocation stays allocating and is tried again on the next
		// pass, for as long as lockWait since it was made.
		if time.Since(a.CreatedAt) < lockWait {
			return nil
		}
		return fail("could not reserve any of %d suitable nodes", len(cands))
	})
}

// free selects the nodes an allocation for owner (nil: any) may take.
func free(owner *string) []predicate.Node {
	p := []predicate.Node{node.ProvisionState(nodes.StateAvailable), node.Maintenance(false),
		node.InstanceUUIDIsNil(), node.Not(node.HasAllocation())}
	if owner != nil {
		p = append(p, node.Or(node.Owner(*owner), node.Lessee(*owner)))
	}
	return p
}

// Availability counts the nodes an allocation by the caller could take
// now, by resource class and, within each class, by trait: a project's
// own and leased nodes when it may only allocate for itself, else all.
type Availability struct {
	Classes map[string]int
	Traits  map[string]map[string]int
}

// Available counts the free nodes the caller's allocation would choose from.
func (s *Service) Available(ctx context.Context) (*Availability, error) {
	var owner *string
	if p := policies.PrincipalFrom(ctx); p != nil && !p.System && !s.guard.Allowed(ctx, RuleCreate, policies.Target{}) {
		owner = &p.Project
	}
	ns, err := s.db.Node.Query().Where(free(owner)...).Where(node.ResourceClassNotNil()).
		Select(node.FieldResourceClass).WithTraits(func(q *ent.TraitQuery) { q.Select(trait.FieldTrait, trait.FieldNodeID) }).All(ctx)
	if err != nil {
		return nil, err
	}
	out := &Availability{Classes: map[string]int{}, Traits: map[string]map[string]int{}}
	for _, n := range ns {
		rc := *n.ResourceClass
		out.Classes[rc]++
		if out.Traits[rc] == nil {
			out.Traits[rc] = map[string]int{}
		}
		for _, t := range n.Edges.Traits {
			out.Traits[rc][t.Trait]++
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func validate(in *Input) error {
	if len(in.ResourceClass) > 80 {
		return errs.BadRequest("resource_class", "resource_class must be at most 80 characters")
	}
	if in.Name != nil {
		if err := nodes.ValidateName("name", *in.Name); err != nil {
			return err
		}
	}
	if in.UUID != "" && !nodes.IsUUID(in.UUID) {
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

// MaxLimit bounds one page of a list, as Ironic's max_limit does.
const MaxLimit = 1000

// ListOptions are an allocation list's filters and paging. Node is a
// node UUID or name; a node the caller may not see filters as one that
// does not exist.
type ListOptions struct {
	State, Node, ResourceClass, Owner *string
	Limit                             int
	Marker                            string
	SortKey, SortDir                  string
}

// sortKeys maps the API's sort keys to columns; text columns that may be
// NULL sort as "" so both databases order and page them the same way.
var sortKeys = map[string]struct {
	col      string
	nullable bool
}{
	"id": {allocation.FieldID, false}, "uuid": {allocation.FieldUUID, false}, "name": {allocation.FieldName, true},
	"created_at": {allocation.FieldCreatedAt, false}, "resource_class": {allocation.FieldResourceClass, false},
	"state": {allocation.FieldState, false}, "owner": {allocation.FieldOwner, true},
}

// SortKeys lists the accepted sort keys, for error messages.
func SortKeys() []string {
	return []string{"id", "uuid", "name", "created_at", "resource_class", "state", "owner"}
}

// List lists the caller's allocations, filtered in SQL: all for
// list_all, else its project's. It reports whether more follow.
func (s *Service) List(ctx context.Context, nodeSvc *nodes.Service, o ListOptions) ([]*Allocation, bool, error) {
	if err := s.guard.Authorize(ctx, RuleList, "allocation", "", policies.Target{}); err != nil {
		return nil, false, err
	}
	q := s.db.Allocation.Query()
	if !s.guard.Allowed(ctx, RuleListAll, policies.Target{}) {
		p := policies.PrincipalFrom(ctx)
		if p == nil || p.Project == "" {
			return nil, false, errs.Forbidden("listing allocations needs a project or system reader")
		}
		// Asking for another project's allocations is refused rather
		// than answered with nothing, as Ironic does.
		if o.Owner != nil && *o.Owner != p.Project {
			return nil, false, errs.Forbidden("a project-scoped caller may only filter by its own project as owner")
		}
		q = q.Where(allocation.Owner(p.Project))
	}
	if o.State != nil {
		if !slices.Contains([]string{StateAllocating, StateActive, StateError}, *o.State) {
			return nil, false, errs.BadRequest("state", "state must be allocating, active or error")
		}
		q = q.Where(allocation.State(*o.State))
	}
	if o.ResourceClass != nil {
		q = q.Where(allocation.ResourceClass(*o.ResourceClass))
	}
	if o.Owner != nil {
		q = q.Where(allocation.Owner(*o.Owner))
	}
	if o.Node != nil {
		n, err := nodeSvc.Authorized(ctx, *o.Node, RuleGetNode)
		if errs.Status(err) == 404 {
			return nil, false, errs.BadRequest("node", "Node %s could not be found.", *o.Node)
		}
		if err != nil {
			return nil, false, err
		}
		q = q.Where(allocation.NodeID(n.ID))
	}
	if o.Limit <= 0 || o.Limit > MaxLimit {
		o.Limit = MaxLimit
	}
	if o.SortDir == "" {
		o.SortDir = "asc"
	}
	if o.SortDir != "asc" && o.SortDir != "desc" {
		return nil, false, errs.BadRequest("sort_dir", "sort_dir %q is invalid; use asc or desc", o.SortDir)
	}
	if o.SortKey == "" {
		o.SortKey = "id"
	}
	sk, ok := sortKeys[o.SortKey]
	if !ok {
		return nil, false, errs.BadRequest("sort_key", "The sort_key value %s is an invalid field for sorting; use one of %s", o.SortKey, strings.Join(SortKeys(), ", "))
	}
	if o.Marker != "" {
		// An allocation the caller may not see is no marker, exactly as
		// one that does not exist.
		m, err := s.db.Allocation.Query().Where(allocation.UUID(strings.ToLower(o.Marker))).Only(ctx)
		if err != nil || !s.guard.Allowed(ctx, RuleGet, Target(m)) {
			return nil, false, errs.BadRequest("marker", "marker %s does not name an allocation", o.Marker)
		}
		q = q.Where(after(sk.col, sk.nullable, o.SortDir, m))
	}
	q = q.Order(func(sel *entsql.Selector) {
		expr := sortExpr(sel, sk.col, sk.nullable)
		if o.SortDir == "desc" {
			sel.OrderExpr(entsql.Expr(expr+" DESC"), entsql.Expr(sel.C(allocation.FieldID)+" DESC"))
		} else {
			sel.OrderExpr(entsql.Expr(expr), entsql.Expr(sel.C(allocation.FieldID)))
		}
	})
	as, err := q.Limit(o.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(as) > o.Limit
	if more {
		as = as[:o.Limit]
	}
	out := make([]*Allocation, len(as))
	for i, a := range as {
		if out[i], err = s.view(ctx, a); err != nil {
			return nil, false, err
		}
	}
	return out, more, nil
}

func sortExpr(sel *entsql.Selector, col string, nullable bool) string {
	if nullable {
		return fmt.Sprintf("COALESCE(%s, '')", sel.C(col))
	}
	return sel.C(col)
}

// after is the keyset predicate for rows past the marker in sort order,
// ties broken by id so pages never repeat or skip a row.
func after(col string, nullable bool, dir string, m *ent.Allocation) predicate.Allocation {
	var val any
	switch col {
	case allocation.FieldID:
		val = m.ID
	case allocation.FieldUUID:
		val = m.UUID
	case allocation.FieldName:
		val = deref(m.Name)
	case allocation.FieldCreatedAt:
		val = m.CreatedAt
	case allocation.FieldResourceClass:
		val = m.ResourceClass
	case allocation.FieldState:
		val = m.State
	case allocation.FieldOwner:
		val = deref(m.Owner)
	}
	return predicate.Allocation(func(sel *entsql.Selector) {
		expr := sortExpr(sel, col, nullable)
		op := ">"
		if dir == "desc" {
			op = "<"
		}
		cmp := func(col, op string, v any) *entsql.Predicate {
			return entsql.P(func(b *entsql.Builder) { b.WriteString(col).WriteString(" " + op + " ").Arg(v) })
		}
		sel.Where(entsql.Or(
			cmp(expr, op, val),
			entsql.And(cmp(expr, "=", val), cmp(sel.C(allocation.FieldID), op, m.ID)),
		))
	})
}

// patchable are the fields Ironic lets a client change on an allocation.
var patchable = []string{"name", "extra"}

// Update applies an RFC 6902 patch to an allocation's name and extra:
// 404 when the caller may not see it, 403 when it may not change it,
// then 400 for a patch that touches anything else or leaves a bad
// value. The read, the patch and the write happen in one transaction
// that holds the row, so concurrent patches serialise.
func (s *Service) Update(ctx context.Context, ident string, raw []byte) (out *Allocation, err error) {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	a, err := s.authorized(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	for i, op := range ops {
		paths := []string{op.Path}
		if op.From != "" {
			paths = append(paths, op.From)
		}
		for _, path := range paths {
			top, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
			if !strings.HasPrefix(path, "/") || !slices.Contains(patchable, top) {
				field := top
				if field == "" {
					field = "patch"
				}
				return nil, errs.BadRequest(field, "Cannot patch %s. Only the following can be updated: %s (operation %d)", path, strings.Join(patchable, ", "), i)
			}
		}
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "allocation", a.UUID, err, map[string]any{"changed": changed})
		}
	}()
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		// The UPDATE takes the row for the rest of the transaction.
		n, err := tx.Allocation.Update().Where(allocation.ID(a.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return notFound(ident)
		}
		cur, err := tx.Allocation.Get(ctx, a.ID)
		if err != nil {
			return err
		}
		// An unnamed allocation has name null, as GET shows it, so that
		// "replace /name" applies to it as to a named one.
		before := map[string]any{"extra": cur.Extra, "name": nil}
		if cur.Name != nil {
			before["name"] = *cur.Name
		}
		after, err := patchdoc.Apply(before, raw, "allocation")
		if err != nil {
			return err
		}
		upd := tx.Allocation.UpdateOneID(a.ID)
		name, isString := after["name"].(string)
		switch {
		case after["name"] == nil:
			upd.ClearName()
		case !isString:
			return errs.BadRequest("name", "name must be a string or null, not %v", after["name"])
		default:
			if err := nodes.ValidateName("name", name); err != nil {
				return err
			}
			upd.SetName(name)
		}
		if isString != (cur.Name != nil) || (isString && *cur.Name != name) {
			changed = append(changed, "name")
		}
		extra, ok := after["extra"].(map[string]any)
		if after["extra"] == nil {
			extra, ok = map[string]any{}, true
		}
		if !ok {
			return errs.BadRequest("extra", "extra must be an object, not %v", after["extra"])
		}
		if len(extra) > 100 {
			return errs.BadRequest("extra", "extra has more than 100 keys")
		}
		if err := s.checkLease(ctx, extra, cur.Extra, false, time.Now()); err != nil {
			return err
		}
		if !reflect.DeepEqual(normal(extra), normal(cur.Extra)) {
			changed = append(changed, "extra")
		}
		if len(changed) == 0 {
			return nil
		}
		err = upd.SetExtra(extra).Exec(ctx)
		if ent.IsConstraintError(err) {
			return errs.Conflict("An allocation named %s already exists.", name)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, a.UUID)
}

// normal round-trips a value through JSON so maps read back from the
// database compare equal to freshly decoded ones.
func normal(v map[string]any) any {
	if len(v) == 0 {
		return nil
	}
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// DeleteForNode releases the allocation of a node: 404 when the caller
// may not see the node, 404 when it has no allocation, then the delete
// rule on the allocation itself, as Ironic checks them.
func (s *Service) DeleteForNode(ctx context.Context, nodeSvc *nodes.Service, ident string) error {
	n, err := nodeSvc.Authorized(ctx, ident, RuleGetNode)
	if err != nil {
		return err
	}
	a, err := s.db.Allocation.Query().Where(allocation.NodeID(n.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return errs.NotFound("Allocation for node %s was not found", ident)
	}
	if err != nil {
		return err
	}
	if err := s.guard.Authorize(ctx, RuleDelete, "allocation", a.UUID, Target(a)); err != nil {
		return err
	}
	return s.Delete(ctx, a.UUID)
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
			n, err := nodes.LockRow(ctx, tx, &ent.Node{ID: *a.NodeID})
			if err != nil {
				return err
			}
			if err := deallocatable(n, a); err != nil {
				return err
			}
			if err := tx.Node.Update().Where(node.ID(n.ID), node.InstanceUUID(a.UUID)).ClearInstanceUUID().Exec(ctx); err != nil {
				return err
			}
		}
		err := tx.Allocation.DeleteOneID(a.ID).Exec(ctx)
		if ent.IsNotFound(err) {
			// Released meanwhile (its lease ended, say): as if it never was.
			return notFound(ident)
		}
		return err
	})
}

// busyUpdatable are the transitional states in which a node's allocation
// may still go (Ironic's UPDATE_ALLOWED_STATES).
var busyUpdatable = map[string]bool{
	"deploy failed": true, "inspecting": true, "inspect failed": true, "inspect wait": true,
	nodes.StateCleanFailed: true, nodes.StateError: true, nodes.StateVerifying: true, "adopt failed": true,
	"rescue failed": true, "unrescue failed": true, "service": true, "service hold": true, nodes.StateServiceFailed: true,
}

// deallocatable is Ironic's verify_node_for_deallocation: a node in
// maintenance always lets its allocation go; otherwise not while it is
// deployed (undeploying it releases the allocation) or in the middle of
// an operation.
func deallocatable(n *ent.Node, a *ent.Allocation) error {
	if n.Maintenance {
		return nil
	}
	if n.TargetProvisionState != nil && *n.TargetProvisionState != "" && !busyUpdatable[n.ProvisionState] {
		return errs.Conflict("Cannot remove allocation %s for node %s, because the node is in state %s where updates are not allowed (and maintenance mode is off)",
			a.UUID, n.UUID, n.ProvisionState)
	}
	if n.ProvisionState == nodes.StateActive {
		return errs.Conflict("Cannot remove allocation %s for node %s, because the node is active (and maintenance mode is off)", a.UUID, n.UUID)
	}
	return nil
}
