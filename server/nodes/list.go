package nodes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/chassis"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
)

// Faults are the values of a node's fault field, as Ironic names them.
var Faults = []string{"power failure", "clean failure", "rescue abort failure", "service failure"}

// MaxLimit is the largest page, as Ironic's default api.max_limit.
const MaxLimit = 1000

// ListOptions are a node list's filters and paging.
type ListOptions struct {
	Owner, Lessee, ProvisionState, ResourceClass, Driver *string
	// Project matches nodes the project owns or leases.
	Project, InstanceUUID, DescriptionContains, Fault *string
	ConductorGroup                                    *string
	// Conductor keeps the nodes the hash ring maps to one conductor
	// (Ironic's ?conductor=); nil lists every node.
	Conductor *RingFilter
	// ChassisUUID keeps the nodes in that chassis; an unknown chassis is
	// a 404, as Ironic answers.
	ChassisUUID             *string
	Maintenance, Associated *bool
	Retired                 *bool
	// Shards matches nodes in any of these shards; Sharded nodes with
	// (true) or without (false) a shard.
	Shards  []string
	Sharded *bool
	// Child nodes are left out unless IncludeChildren, or ParentNode
	// (a node UUID) asks for the children of one node.
	IncludeChildren  bool
	ParentNode       *string
	Limit            int
	Marker           string
	SortKey, SortDir string
	WithTraits       bool
	// WithAllocation loads each node's allocation UUID.
	WithAllocation bool
	// WithChassis loads each node's chassis UUID.
	WithChassis bool
	// Columns, when set, limits the columns read to these (plus what
	// access decisions need): a short list reads no JSON blobs.
	Columns []string

	// The portal's filters, which the API does not offer. Search matches a
	// name containing it (any case) or a UUID starting with it; PowerState
	// "" matches nodes whose power no BMC has reported yet; Trait, nodes
	// carrying it; Failed, nodes in a failed state, with a fault or with a
	// last error; UUIDs, only those nodes (a bulk selection: the ones the
	// caller may not list simply do not come back).
	Search, PowerState, Trait *string
	// AnyTrait matches nodes carrying any of these traits: the nodes a
	// runbook with several traits reaches.
	AnyTrait []string
	Failed   bool
	UUIDs    []string
	// Numbered is the portal's paging: Offset skips rows, and they sort by
	// the bare column, so an index walk finds a page of 10,000 nodes
	// without sorting them all. Unnamed nodes then sort where each
	// database puts NULLs, which keyset paging (Marker) could not allow.
	Numbered bool
	Offset   int
	// GroupBy, a sort key, orders a numbered page by that column first,
	// so the portal's groups are contiguous runs of rows.
	GroupBy string
}

// RingFilter picks the nodes the hash ring maps to one conductor. The
// mapping is computed, not stored: Group narrows the query to the
// conductor's group in SQL, and Maps decides each node of that group. A
// nil Maps (a conductor in no ring: unknown, or not alive) matches no
// node, as Ironic finds none mapped to it.
type RingFilter struct {
	Group string
	Maps  func(uuid string) bool
}

// FailedStates are the provision states a run or a check ends in when it
// fails; the portal's "has failed" filter and badges use them.
var FailedStates = []string{StateCleanFailed, StateServiceFailed, StateError}

// sortKeys maps the API's sort keys to columns; text columns that may be
// NULL sort as "" so both databases order and page them the same way.
type sortKey struct {
	col      string
	nullable bool
}

var sortKeys = map[string]sortKey{
	"id": {node.FieldID, false}, "uuid": {node.FieldUUID, false}, "name": {node.FieldName, true},
	"created_at": {node.FieldCreatedAt, false}, "provision_state": {node.FieldProvisionState, false},
	"power_state": {node.FieldPowerState, true}, "driver": {node.FieldDriver, false},
	"owner": {node.FieldOwner, false}, "lessee": {node.FieldLessee, false},
	"resource_class": {node.FieldResourceClass, true}, "maintenance": {node.FieldMaintenance, false},
}

// SortKeys lists the accepted sort keys, for error messages.
func SortKeys() []string {
	return []string{"id", "uuid", "name", "created_at", "provision_state", "power_state", "driver", "owner", "lessee", "resource_class", "maintenance"}
}

// Page is one page of a list and whether more follow.
type Page struct {
	Nodes []*View
	More  bool
}

// List returns the nodes the caller may list, filtered in SQL: everything
// for list_all, otherwise only nodes its project owns or leases.
func (s *Service) List(ctx context.Context, o ListOptions) (*Page, error) {
	q, err := s.scoped(ctx, o)
	if err != nil {
		return nil, err
	}
	if o.Limit <= 0 || o.Limit > MaxLimit {
		o.Limit = MaxLimit
	}
	if o.SortDir == "" {
		o.SortDir = "asc"
	}
	if o.SortDir != "asc" && o.SortDir != "desc" {
		return nil, errs.BadRequest("sort_dir", "sort_dir %q is invalid; use asc or desc", o.SortDir)
	}
	if o.SortKey == "" {
		o.SortKey = "id"
	}
	sk, ok := sortKeys[o.SortKey]
	if !ok {
		return nil, errs.BadRequest("sort_key", "sort_key %q is not supported; use one of %v", o.SortKey, SortKeys())
	}
	if o.Marker != "" {
		// A node the caller may not see is no marker, exactly as one that
		// does not exist.
		m, err := lookup(ctx, s.db.Client, o.Marker)
		if err != nil || !s.guard.Allowed(ctx, RuleGet, Target(m)) {
			return nil, errs.BadRequest("marker", "marker %s does not name a node", o.Marker)
		}
		q = q.Where(after(sk.col, sk.nullable, o.SortDir, m))
	}
	gk, grouped := sortKeys[o.GroupBy]
	if grouped && !o.Numbered {
		return nil, errs.BadRequest("group_by", "group_by pages by number only")
	}
	q = q.Order(func(sel *entsql.Selector) {
		if grouped {
			sel.OrderExpr(entsql.Expr(sel.C(gk.col)))
		}
		expr := sortExpr(sel, sk.col, sk.nullable && !o.Numbered)
		if o.SortDir == "desc" {
			sel.OrderExpr(entsql.Expr(expr+" DESC"), entsql.Expr(sel.C(node.FieldID)+" DESC"))
		} else {
			sel.OrderExpr(entsql.Expr(expr), entsql.Expr(sel.C(node.FieldID)))
		}
	})
	more := false
	if o.Conductor != nil {
		// The page's rows are chosen first, then read like any other
		// page: the ring decides which rows, the query how they look.
		ids, m, err := s.ringPage(ctx, q, sk, o)
		if err != nil {
			return nil, err
		}
		q, more = q.Where(node.IDIn(ids...)), m
	}
	q = q.Limit(o.Limit + 1)
	if o.Numbered && o.Offset > 0 {
		q = q.Offset(o.Offset)
	}
	if o.WithAllocation {
		q = q.WithAllocation(func(aq *ent.AllocationQuery) { aq.Select(allocation.FieldNodeID, allocation.FieldUUID) })
	}
	if o.WithChassis {
		q = q.WithChassis(func(cq *ent.ChassisQuery) { cq.Select(chassis.FieldID, chassis.FieldUUID) })
	}
	var ns []*ent.Node
	planned := s.planned(ctx, o)
	if len(o.Columns) > 0 {
		cols := []string{node.FieldUUID, node.FieldOwner, node.FieldLessee}
		for _, c := range o.Columns {
			if node.ValidColumn(c) && !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
		ns, err = q.Select(cols...).All(planned)
	} else {
		ns, err = q.All(planned)
	}
	if err != nil {
		return nil, err
	}
	page := &Page{More: more || len(ns) > o.Limit}
	if len(ns) > o.Limit {
		ns = ns[:o.Limit]
	}
	var traits map[int][]string
	if o.WithTraits {
		if traits, err = s.traitsOf(ctx, ns); err != nil {
			return nil, err
		}
	}
	r := newRedactor(s.guard)
	page.Nodes = make([]*View, len(ns))
	for i, n := range ns {
		ts := traits[n.ID]
		if o.WithTraits && ts == nil {
			ts = []string{}
		}
		page.Nodes[i] = r.view(ctx, n, ts)
	}
	return page, nil
}

// ringBatch bounds how many rows of the conductor's group ringPage reads
// at a time: twice the page, since with n conductors in the group about
// one in n is kept.
const ringBatch = 2000

// ringPage walks the query's rows of o.Conductor's group in the page's
// order, from the marker on, and returns the ids of the first o.Limit
// that the ring maps to the conductor, and whether more follow. It
// reads only the id, UUID and sort column, so a page is full, and the
// next one starts where it ended, however few nodes the conductor has:
// Ironic filters a page after reading it, leaving pages short.
func (s *Service) ringPage(ctx context.Context, q *ent.NodeQuery, sk sortKey, o ListOptions) ([]int, bool, error) {
	if o.Conductor.Maps == nil {
		return nil, false, nil
	}
	// Where adds to the query it is called on: the walk's own conditions
	// stay on a copy.
	q = q.Clone().Where(node.ConductorGroup(o.Conductor.Group))
	size := min(ringBatch, 2*(o.Limit+1))
	var ids []int
	for {
		batch, err := q.Clone().Select(node.FieldUUID, sk.col).Limit(size).All(ctx)
		if err != nil {
			return nil, false, err
		}
		for _, n := range batch {
			if !o.Conductor.Maps(n.UUID) {
				continue
			}
			if len(ids) == o.Limit {
				return ids, true, nil
			}
			ids = append(ids, n.ID)
		}
		if len(batch) < size {
			return ids, false, nil
		}
		q = q.Where(after(sk.col, sk.nullable, o.SortDir, batch[len(batch)-1]))
	}
}

// scoped builds the filtered query, deciding list_all versus list once.
func (s *Service) scoped(ctx context.Context, o ListOptions) (*ent.NodeQuery, error) {
	ps, err := s.scope(ctx, o)
	if err != nil {
		return nil, err
	}
	return s.db.Node.Query().Where(ps...), nil
}

// scope is scoped's predicates, for a query of another table to filter
// its nodes by.
func (s *Service) scope(ctx context.Context, o ListOptions) ([]predicate.Node, error) {
	var ps []predicate.Node
	none := policies.Target{}
	if !s.guard.Allowed(ctx, RuleListAll, none) {
		p := policies.PrincipalFrom(ctx)
		if p == nil || p.Project == "" {
			return nil, s.guard.Authorize(ctx, RuleListAll, "node", "", none)
		}
		self := policies.Target{NodeOwner: p.Project, NodeLessee: p.Project}
		if err := s.guard.Authorize(ctx, RuleList, "node", "", self); err != nil {
			return nil, err
		}
		// Asking for another project's nodes by owner or lessee is refused
		// rather than silently answered with nothing.
		if o.Owner != nil && *o.Owner != p.Project {
			return nil, errs.Forbidden("a project-scoped caller may only filter by its own project as owner")
		}
		if o.Lessee != nil && *o.Lessee != p.Project {
			return nil, errs.Forbidden("a project-scoped caller may only filter by its own project as lessee")
		}
		ps = append(ps, ownedOrLeased(p.Project))
	}
	if o.Owner != nil {
		ps = append(ps, node.Owner(*o.Owner))
	}
	if o.Lessee != nil {
		ps = append(ps, node.Lessee(*o.Lessee))
	}
	if o.ProvisionState != nil {
		ps = append(ps, node.ProvisionState(*o.ProvisionState))
	}
	if o.ResourceClass != nil {
		ps = append(ps, node.ResourceClass(*o.ResourceClass))
	}
	if o.Driver != nil {
		ps = append(ps, node.DriverIn(bmc.Spellings(*o.Driver)...))
	}
	if o.Maintenance != nil {
		ps = append(ps, node.Maintenance(*o.Maintenance))
	}
	if o.Project != nil {
		ps = append(ps, ownedOrLeased(*o.Project))
	}
	if o.InstanceUUID != nil {
		ps = append(ps, node.InstanceUUID(strings.ToLower(*o.InstanceUUID)))
	}
	if o.Fault != nil {
		ps = append(ps, node.Fault(*o.Fault))
	}
	if o.ConductorGroup != nil {
		ps = append(ps, node.ConductorGroup(strings.ToLower(*o.ConductorGroup)))
	}
	if o.ChassisUUID != nil {
		id, err := s.db.Chassis.Query().Where(chassis.UUID(strings.ToLower(*o.ChassisUUID))).OnlyID(ctx)
		if ent.IsNotFound(err) {
			return nil, errs.NotFound("Chassis %s could not be found.", *o.ChassisUUID)
		}
		if err != nil {
			return nil, err
		}
		ps = append(ps, node.ChassisID(id))
	}
	if o.DescriptionContains != nil {
		ps = append(ps, node.DescriptionContains(*o.DescriptionContains))
	}
	if o.Retired != nil {
		ps = append(ps, node.Retired(*o.Retired))
	}
	if len(o.Shards) > 0 {
		ps = append(ps, node.ShardIn(o.Shards...))
	}
	if o.Sharded != nil {
		if *o.Sharded {
			ps = append(ps, node.ShardNotNil())
		} else {
			ps = append(ps, node.ShardIsNil())
		}
	}
	// As Ironic: include_children lists parents and children alike and
	// then parent_node is not applied.
	switch {
	case o.IncludeChildren:
	case o.ParentNode != nil:
		ps = append(ps, node.ParentNode(strings.ToLower(*o.ParentNode)))
	default:
		ps = append(ps, node.ParentNodeIsNil())
	}
	if o.Associated != nil {
		if *o.Associated {
			ps = append(ps, node.InstanceUUIDNotNil())
		} else {
			ps = append(ps, node.InstanceUUIDIsNil())
		}
	}
	if o.Search != nil && *o.Search != "" {
		ps = append(ps, node.Or(nameContains(s.db.Dialect, *o.Search), node.UUIDHasPrefix(strings.ToLower(*o.Search))))
	}
	if o.PowerState != nil {
		if *o.PowerState == "" {
			ps = append(ps, node.PowerStateIsNil())
		} else {
			ps = append(ps, node.PowerState(*o.PowerState))
		}
	}
	if o.Trait != nil {
		ps = append(ps, node.HasTraitsWith(trait.Trait(*o.Trait)))
	}
	if o.AnyTrait != nil {
		ps = append(ps, node.HasTraitsWith(trait.TraitIn(o.AnyTrait...)))
	}
	if o.Failed {
		ps = append(ps, node.Or(node.ProvisionStateIn(FailedStates...), node.FaultNotNil(), node.LastErrorNotNil()))
	}
	if o.UUIDs != nil {
		ps = append(ps, node.UUIDIn(o.UUIDs...))
	}
	return ps, nil
}

// Count is how many nodes the filters match for the caller.
func (s *Service) Count(ctx context.Context, o ListOptions) (int, error) {
	q, err := s.scoped(ctx, o)
	if err != nil {
		return 0, err
	}
	return q.Count(s.planned(ctx, o))
}

// StateCount is how many listed nodes are in one provision state, and how
// many of those have failed.
type StateCount struct {
	Total  int `json:"total"`
	Failed int `json:"failed"`
}

// CountStates counts the nodes the filters match in each provision state,
// with the provision state and failed filters aside: the portal's summary
// strip, its "has failed" entry and its "of 201" all come from this one
// scan.
func (s *Service) CountStates(ctx context.Context, o ListOptions) (map[string]StateCount, error) {
	o.ProvisionState, o.Failed = nil, false
	q, err := s.scoped(ctx, o)
	if err != nil {
		return nil, err
	}
	failed := func(sel *entsql.Selector) string {
		states := make([]string, len(FailedStates))
		for i, st := range FailedStates {
			states[i] = "'" + st + "'" // constants without quotes of their own
		}
		return fmt.Sprintf("SUM(CASE WHEN %s IN (%s) OR %s IS NOT NULL OR %s IS NOT NULL THEN 1 ELSE 0 END)",
			sel.C(node.FieldProvisionState), strings.Join(states, ", "), sel.C(node.FieldFault), sel.C(node.FieldLastError))
	}
	var rows []struct {
		State string `json:"provision_state"`
		StateCount
	}
	if err := q.GroupBy(node.FieldProvisionState).Aggregate(ent.As(ent.Count(), "total"), ent.As(failed, "failed")).Scan(s.planned(ctx, o), &rows); err != nil {
		return nil, err
	}
	out := make(map[string]StateCount, len(rows))
	for _, r := range rows {
		out[r.State] = r.StateCount
	}
	return out, nil
}

// planned has PostgreSQL plan a search's statements with their pattern
// each time. pgx prepares every statement, and after five executions
// PostgreSQL may keep one generic plan for all patterns; the one it keeps
// for a search reads the trigram index, which for a pattern most names
// contain ("rack", "H-") meant reading and sorting all 10,000 nodes for a
// page (17 ms) where a plan made for the pattern walks the name index
// (0.1 ms). ent sets the variable for the statement alone.
func (s *Service) planned(ctx context.Context, o ListOptions) context.Context {
	if s.db.Dialect != dialect.Postgres || o.Search == nil || *o.Search == "" {
		return ctx
	}
	return entsql.WithVar(ctx, "plan_cache_mode", "force_custom_plan")
}

// likeEscaper escapes LIKE's wildcards, with \ as the escape.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// nameContains matches names containing sub in any case. Names are ASCII
// (nameRE), so ASCII case folding is exact: SQLite's LIKE already folds
// ASCII case, and went without ent's LOWER(name), which per row cost more
// than the scan of the index it reads; PostgreSQL's ILIKE folds under the
// "C" collation, whose ASCII folding costs a fifth of the database's
// default (C.UTF-8 lowers each name through wide characters), and which
// the trigram index (store.searchIndex) is built with.
func nameContains(dia, sub string) predicate.Node {
	col, op := "", " LIKE "
	if dia == dialect.Postgres {
		col, op = ` COLLATE "C"`, " ILIKE "
	}
	return predicate.Node(func(sel *entsql.Selector) {
		sel.Where(entsql.P(func(b *entsql.Builder) {
			b.WriteString(sel.C(node.FieldName)).WriteString(col).WriteString(op).Arg("%" + likeEscaper.Replace(sub) + "%").WriteString(" ESCAPE ").Arg(`\`)
		}))
	})
}

func sortExpr(sel *entsql.Selector, col string, nullable bool) string {
	if nullable {
		return fmt.Sprintf("COALESCE(%s, '')", sel.C(col))
	}
	return sel.C(col)
}

// after is the keyset predicate for rows past the marker in sort order,
// ties broken by id so pages never repeat or skip a row.
func after(col string, nullable bool, dir string, m *ent.Node) predicate.Node {
	val := markerValue(m, col)
	return predicate.Node(func(sel *entsql.Selector) {
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
			entsql.And(cmp(expr, "=", val), cmp(sel.C(node.FieldID), op, m.ID)),
		))
	})
}

// markerValue is the marker node's value in the sort column.
func markerValue(m *ent.Node, col string) any {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch col {
	case node.FieldUUID:
		return m.UUID
	case node.FieldName:
		return str(m.Name)
	case node.FieldCreatedAt:
		return m.CreatedAt
	case node.FieldProvisionState:
		return m.ProvisionState
	case node.FieldPowerState:
		return str(m.PowerState)
	case node.FieldDriver:
		return m.Driver
	case node.FieldOwner:
		return m.Owner
	case node.FieldLessee:
		return m.Lessee
	case node.FieldResourceClass:
		return str(m.ResourceClass)
	case node.FieldMaintenance:
		return m.Maintenance
	}
	return m.ID
}

// ownedOrLeased is "owner = P OR lessee = P" written as id IN (owner rows
// UNION ALL lessee rows): SQLite then reads each index once and walks
// nodes in id order, where the OR form sorts a temporary B-tree (5.1 ms
// against 3.9 ms for 1,000 of 10,000 nodes); PostgreSQL plans both alike.
func ownedOrLeased(project string) predicate.Node {
	return func(s *entsql.Selector) {
		t := entsql.Table(node.Table)
		owned := entsql.Select(t.C(node.FieldID)).From(t).Where(entsql.EQ(t.C(node.FieldOwner), project))
		leased := entsql.Select(t.C(node.FieldID)).From(t).Where(entsql.EQ(t.C(node.FieldLessee), project))
		s.Where(entsql.In(s.C(node.FieldID), owned.UnionAll(leased)))
	}
}
