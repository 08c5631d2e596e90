package ports

import (
	"context"
	"fmt"
	"slices"
	"strings"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/ent/portgroup"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
)

// ListOptions are a port or portgroup list's filters and paging. Every
// filter given applies; none is dropped for another.
type ListOptions struct {
	// Node and Portgroup name the parent, by UUID or name.
	Node, Portgroup, Address *string
	// Shards keeps the ports or portgroups of nodes in these shards.
	Shards []string
	// DescriptionContains keeps the ports whose description holds it,
	// without regard to case.
	DescriptionContains *string
	// ConductorGroups keeps the ports or portgroups of nodes in these
	// (lower-case) conductor groups.
	ConductorGroups  []string
	Limit            int
	Marker           string
	SortKey, SortDir string
}

// sortable are the columns a list may sort by, and whether each may be
// NULL (sorted as "" so both databases page alike).
var portSort = map[string]bool{
	"id": false, "uuid": false, "address": false, "created_at": false,
	"pxe_enabled": false, "physical_network": true, "is_smartnic": false, "name": true,
}

var pgSort = map[string]bool{
	"id": false, "uuid": false, "address": true, "name": true, "created_at": false,
	"mode": false, "standalone_ports_supported": false,
}

// unsortable are the JSON columns Ironic refuses to sort by, with its
// message.
var unsortable = []string{"extra", "internal_info", "local_link_connection", "properties"}

type paging struct {
	col      string
	nullable bool
	desc     bool
	limit    int
}

func pageOf(o ListOptions, keys map[string]bool) (paging, error) {
	pg := paging{col: "id", limit: o.Limit}
	if pg.limit <= 0 || pg.limit > MaxLimit {
		pg.limit = MaxLimit
	}
	switch o.SortDir {
	case "", "asc":
	case "desc":
		pg.desc = true
	default:
		return pg, errs.BadRequest("sort_dir", "Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", o.SortDir)
	}
	if o.SortKey != "" {
		if slices.Contains(unsortable, o.SortKey) {
			return pg, errs.BadRequest("sort_key", "The sort_key value %s is an invalid field for sorting", o.SortKey)
		}
		nullable, ok := keys[o.SortKey]
		if !ok {
			ks := make([]string, 0, len(keys))
			for k := range keys {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			return pg, errs.BadRequest("sort_key", "sort_key %q is not supported; use one of %s", o.SortKey, strings.Join(ks, ", "))
		}
		pg.col, pg.nullable = o.SortKey, nullable
	}
	return pg, nil
}

func (pg paging) expr(sel *entsql.Selector) string {
	if pg.nullable {
		return fmt.Sprintf("COALESCE(%s, '')", sel.C(pg.col))
	}
	return sel.C(pg.col)
}

func (pg paging) order(sel *entsql.Selector) {
	dir := ""
	if pg.desc {
		dir = " DESC"
	}
	sel.OrderExpr(entsql.Expr(pg.expr(sel)+dir), entsql.Expr(sel.C("id")+dir))
}

// after is the keyset predicate for rows past the marker (value val, row
// id) in sort order, ties broken by id so pages never repeat or skip.
func (pg paging) after(val any, id int) func(*entsql.Selector) {
	return func(sel *entsql.Selector) {
		op := ">"
		if pg.desc {
			op = "<"
		}
		cmp := func(col, op string, v any) *entsql.Predicate {
			return entsql.P(func(b *entsql.Builder) { b.WriteString(col).WriteString(" " + op + " ").Arg(v) })
		}
		e := pg.expr(sel)
		sel.Where(entsql.Or(cmp(e, op, val), entsql.And(cmp(e, "=", val), cmp(sel.C("id"), op, id))))
	}
}

// portMarker and pgMarker are the marker row's value in the sort
// column, NULL read as "" as the ORDER BY reads it.
func portMarker(m *ent.Port, col string) any {
	switch col {
	case "uuid":
		return m.UUID
	case "address":
		return m.Address
	case "created_at":
		return m.CreatedAt
	case "pxe_enabled":
		return m.PxeEnabled
	case "physical_network":
		return deref(m.PhysicalNetwork)
	case "is_smartnic":
		return m.IsSmartnic
	case "name":
		return deref(m.Name)
	}
	return m.ID
}

func pgMarker(m *ent.Portgroup, col string) any {
	switch col {
	case "uuid":
		return m.UUID
	case "address":
		return deref(m.Address)
	case "name":
		return deref(m.Name)
	case "created_at":
		return m.CreatedAt
	case "mode":
		return m.Mode
	case "standalone_ports_supported":
		return m.StandalonePortsSupported
	}
	return m.ID
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// scope returns the project a list is limited to ("" for every port),
// deciding list_all versus list once, as Ironic's check_port_list_policy.
func (s *Service) scope(ctx context.Context, all, list, kind string) (string, error) {
	none := policies.Target{}
	if s.guard.Allowed(ctx, all, none) {
		return "", nil
	}
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.Project == "" {
		return "", s.guard.Authorize(ctx, all, kind, "", none)
	}
	if err := s.guard.Authorize(ctx, list, kind, "", policies.Target{NodeOwner: p.Project, NodeLessee: p.Project}); err != nil {
		return "", err
	}
	return p.Project, nil
}

func ownedOrLeased(project string) predicate.Node {
	return node.Or(node.Owner(project), node.Lessee(project))
}

// ListPorts returns a page of the ports the caller may list: every port
// for list_all, otherwise those on nodes its project owns or leases. A
// parent node or portgroup the caller may not see is not found.
func (s *Service) ListPorts(ctx context.Context, o ListOptions) ([]*Port, bool, error) {
	project, err := s.scope(ctx, RuleListAll, RuleList, "port")
	if err != nil {
		return nil, false, err
	}
	pg, err := pageOf(o, portSort)
	if err != nil {
		return nil, false, err
	}
	q := s.db.Port.Query()
	if project != "" {
		q = q.Where(port.HasNodeWith(ownedOrLeased(project)))
	}
	if o.Node != nil {
		n, err := s.visibleNode(ctx, *o.Node)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(port.NodeID(n.ID))
	}
	if o.Portgroup != nil {
		g, _, err := s.authorizedPortgroup(ctx, *o.Portgroup, RulePGGet)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(port.PortgroupID(g.ID))
	}
	if o.Address != nil {
		mac, err := NormalizeMAC("address", *o.Address)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(port.Address(mac))
	}
	if len(o.Shards) > 0 {
		q = q.Where(port.HasNodeWith(node.ShardIn(o.Shards...)))
	}
	if o.DescriptionContains != nil {
		q = q.Where(port.DescriptionContainsFold(*o.DescriptionContains))
	}
	if len(o.ConductorGroups) > 0 {
		q = q.Where(port.HasNodeWith(node.ConductorGroupIn(o.ConductorGroups...)))
	}
	if o.Marker != "" {
		m, err := lookupPort(ctx, s.db.Client, o.Marker)
		if err == nil {
			var n *ent.Node
			if n, err = s.node(ctx, s.db.Client, m.NodeID); err == nil && (n == nil || !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n))) {
				err = portNotFound(o.Marker)
			}
		}
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a port", o.Marker)
		}
		q = q.Where(predicate.Port(pg.after(portMarker(m, pg.col), m.ID)))
	}
	ps, err := q.Order(pg.order).Limit(pg.limit + 1).
		WithNode(func(nq *ent.NodeQuery) { nq.Select(node.FieldUUID) }).
		WithPortgroup(func(gq *ent.PortgroupQuery) { gq.Select(portgroup.FieldUUID) }).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(ps) > pg.limit
	if more {
		ps = ps[:pg.limit]
	}
	out := make([]*Port, len(ps))
	for i, p := range ps {
		out[i] = &Port{Port: p, NodeUUID: p.Edges.Node.UUID}
		if g := p.Edges.Portgroup; g != nil {
			out[i].PortgroupUUID = &g.UUID
		}
	}
	return out, more, nil
}

// ListPortgroups returns a page of portgroups, scoped as ListPorts.
func (s *Service) ListPortgroups(ctx context.Context, o ListOptions) ([]*Portgroup, bool, error) {
	project, err := s.scope(ctx, RulePGAll, RulePGList, "portgroup")
	if err != nil {
		return nil, false, err
	}
	pg, err := pageOf(o, pgSort)
	if err != nil {
		return nil, false, err
	}
	q := s.db.Portgroup.Query()
	if project != "" {
		q = q.Where(portgroup.HasNodeWith(ownedOrLeased(project)))
	}
	if o.Node != nil {
		n, err := s.visibleNode(ctx, *o.Node)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(portgroup.NodeID(n.ID))
	}
	if o.Address != nil {
		mac, err := NormalizeMAC("address", *o.Address)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(portgroup.Address(mac))
	}
	if len(o.Shards) > 0 {
		q = q.Where(portgroup.HasNodeWith(node.ShardIn(o.Shards...)))
	}
	if len(o.ConductorGroups) > 0 {
		q = q.Where(portgroup.HasNodeWith(node.ConductorGroupIn(o.ConductorGroups...)))
	}
	if o.Marker != "" {
		m, err := lookupPortgroup(ctx, s.db.Client, o.Marker)
		if err == nil {
			var n *ent.Node
			if n, err = s.node(ctx, s.db.Client, m.NodeID); err == nil && (n == nil || !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n))) {
				err = pgNotFound(o.Marker)
			}
		}
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a portgroup", o.Marker)
		}
		q = q.Where(predicate.Portgroup(pg.after(pgMarker(m, pg.col), m.ID)))
	}
	gs, err := q.Order(pg.order).Limit(pg.limit + 1).
		WithNode(func(nq *ent.NodeQuery) { nq.Select(node.FieldUUID) }).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(gs) > pg.limit
	if more {
		gs = gs[:pg.limit]
	}
	out := make([]*Portgroup, len(gs))
	for i, g := range gs {
		out[i] = &Portgroup{Portgroup: g, NodeUUID: g.Edges.Node.UUID}
	}
	return out, more, nil
}
