// Package ports is the service layer for ports, portgroups and the VIFs
// attached to them. A port belongs to a node and has no owner of its own:
// every rule is checked against its node's owner and lessee, as Ironic's
// port rules are, and a caller who may not see the node gets 404 for the
// port as if it did not exist.
package ports

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/ent/portgroup"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Policy rules this package enforces, named as Ironic names them.
const (
	RuleGet      = "baremetal:port:get"
	RuleList     = "baremetal:port:list"
	RuleListAll  = "baremetal:port:list_all"
	RuleCreate   = "baremetal:port:create"
	RuleUpdate   = "baremetal:port:update"
	RuleDelete   = "baremetal:port:delete"
	RulePGGet    = "baremetal:portgroup:get"
	RulePGList   = "baremetal:portgroup:list"
	RulePGAll    = "baremetal:portgroup:list_all"
	RulePGCreate = "baremetal:portgroup:create"
	RulePGUpdate = "baremetal:portgroup:update"
	RulePGDelete = "baremetal:portgroup:delete"
	RuleVIFList  = "baremetal:node:vif:list"
	RuleVIFAdd   = "baremetal:node:vif:attach"
	RuleVIFDel   = "baremetal:node:vif:detach"
)

// VIFKey is where a port or portgroup records its tenant VIF in
// internal_info, as Ironic's flat and neutron network interfaces do.
const VIFKey = "tenant_vif_port_id"

// DefaultMode is a new portgroup's bonding mode, Ironic's
// default_portgroup_mode.
const DefaultMode = "active-backup"

// MaxLimit is the largest page, as for nodes.
const MaxLimit = nodes.MaxLimit

// Service serves ports, portgroups and VIFs for the principal in each
// call's context.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	nodes *nodes.Service
	// NetworkInterface names a node's network interface; "noop" makes
	// VIF calls succeed without recording anything, as Ironic's noop
	// interface does. Nil means every node is "flat".
	NetworkInterface func(*ent.Node) string
}

// noop reports whether n's network interface is Ironic's noop.
func (s *Service) noop(n *ent.Node) bool {
	return s.NetworkInterface != nil && s.NetworkInterface(n) == "noop"
}

// New returns the port service; ns resolves and authorizes nodes.
func New(db *store.DB, g *guard.Guard, ns *nodes.Service) *Service {
	return &Service{db: db, guard: g, nodes: ns}
}

// Port is a port with the UUIDs of its node and portgroup.
type Port struct {
	*ent.Port
	NodeUUID      string
	PortgroupUUID *string
}

// Portgroup is a portgroup with its node's UUID.
type Portgroup struct {
	*ent.Portgroup
	NodeUUID string
}

func portNotFound(ident string) error { return errs.NotFound("Port %s could not be found.", ident) }
func pgNotFound(ident string) error {
	return errs.NotFound("Portgroup %s could not be found.", ident)
}

// NormalizeMAC validates a MAC address and returns it lower case, with
// Ironic's message for one that is not.
func NormalizeMAC(field, s string) (string, error) {
	if !macRE.MatchString(s) {
		return "", errs.BadRequest(field, "Expected a MAC address but received %s.", s)
	}
	return strings.ToLower(s), nil
}

// macRE is oslo's is_valid_mac, which Ironic uses: six pairs of hex
// digits separated by colons or dashes.
var macRE = regexp.MustCompile(`^(?i)([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$`)

// node reads a port's or portgroup's node; nil when it is gone.
func (s *Service) node(ctx context.Context, c *ent.Client, id int) (*ent.Node, error) {
	n, err := c.Node.Query().Where(node.ID(id)).
		Select(node.FieldUUID, node.FieldOwner, node.FieldLessee, node.FieldMaintenance,
			node.FieldProvisionState, node.FieldReservation).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	return n, err
}

// visibleNode finds a node the caller may see; any other is "not found",
// the same answer for a node that exists and one that does not.
func (s *Service) visibleNode(ctx context.Context, ident string) (*ent.Node, error) {
	n, err := s.nodes.Lookup(ctx, ident)
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
		return nil, errs.NotFound("Node %s could not be found.", ident)
	}
	return n, nil
}

// authorize checks rule against the node: 404 when the caller may not see
// the node (so the port, whose existence the caller learns only through
// the node, is not found either), 403 when it may see but not do this.
func (s *Service) authorize(ctx context.Context, n *ent.Node, rule, kind, id string, hidden error) error {
	t := policies.Target{}
	if n != nil {
		t = nodes.Target(n)
	}
	if !s.guard.Allowed(ctx, nodes.RuleGet, t) {
		// Audited as a denial, answered as not found.
		_ = s.guard.Authorize(ctx, nodes.RuleGet, kind, id, t)
		return hidden
	}
	return s.guard.Authorize(ctx, rule, kind, id, t)
}

func lookupPort(ctx context.Context, c *ent.Client, ident string) (*ent.Port, error) {
	q := c.Port.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(port.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(port.Name(ident))
	}
	p, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, portNotFound(ident)
	}
	return p, err
}

func lookupPortgroup(ctx context.Context, c *ent.Client, ident string) (*ent.Portgroup, error) {
	q := c.Portgroup.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(portgroup.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(portgroup.Name(ident))
	}
	pg, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, pgNotFound(ident)
	}
	return pg, err
}

// authorizedPort finds a port and checks rule against its node. As
// Ironic validates the path first, a port is named by its UUID or name
// (deleted by its UUID only), and anything else, such as a MAC address,
// is a 400 rather than a 404.
func (s *Service) authorizedPort(ctx context.Context, ident, rule string) (*ent.Port, *ent.Node, error) {
	switch {
	case rule == RuleDelete && !nodes.IsUUID(ident):
		return nil, nil, errs.BadRequest("port_uuid", "Expected UUID for port_uuid: %s", ident)
	case !nodes.IsUUID(ident) && nodes.ValidateName("port_ident", ident) != nil:
		return nil, nil, errs.BadRequest("port_ident", "Expected UUID or name for port_ident: %s", ident)
	}
	p, err := lookupPort(ctx, s.db.Client, ident)
	if err != nil {
		return nil, nil, err
	}
	n, err := s.node(ctx, s.db.Client, p.NodeID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.authorize(ctx, n, rule, "port", p.UUID, portNotFound(ident)); err != nil {
		return nil, nil, err
	}
	return p, n, nil
}

func (s *Service) authorizedPortgroup(ctx context.Context, ident, rule string) (*ent.Portgroup, *ent.Node, error) {
	pg, err := lookupPortgroup(ctx, s.db.Client, ident)
	if err != nil {
		return nil, nil, err
	}
	n, err := s.node(ctx, s.db.Client, pg.NodeID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.authorize(ctx, n, rule, "portgroup", pg.UUID, pgNotFound(ident)); err != nil {
		return nil, nil, err
	}
	return pg, n, nil
}

func (s *Service) portView(ctx context.Context, c *ent.Client, p *ent.Port, nodeUUID string) (*Port, error) {
	v := &Port{Port: p, NodeUUID: nodeUUID}
	if p.PortgroupID != nil {
		u, err := c.Portgroup.Query().Where(portgroup.ID(*p.PortgroupID)).Select(portgroup.FieldUUID).String(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return nil, err
		}
		if err == nil {
			v.PortgroupUUID = &u
		}
	}
	return v, nil
}

// lockNode takes the node's row for the rest of the transaction, as the
// node's own patch does: ports, portgroups and VIFs of one node then
// change one request at a time, and a node a conductor holds is refused
// as Ironic refuses a locked node.
func lockNode(ctx context.Context, tx *ent.Client, id int) (*ent.Node, error) {
	cnt, err := tx.Node.Update().Where(node.ID(id), node.ReservationIsNil()).SetUpdatedAt(time.Now()).Save(ctx)
	if err != nil {
		return nil, err
	}
	n, err := tx.Node.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if cnt == 0 && n.Reservation != nil {
		return nil, errs.NodeLocked(n.UUID, "host "+*n.Reservation)
	}
	return n, nil
}

// takeRow takes the node's row whoever holds its reservation: for the
// conductor's own calls, made under that reservation.
func takeRow(ctx context.Context, tx *ent.Client, id int) error {
	return tx.Node.Update().Where(node.ID(id)).SetUpdatedAt(time.Now()).Exec(ctx)
}

// constraintError names the unique field a write collided on, in Ironic's
// words. The MAC conflict says only that the address is taken, never by
// which port or node: a MAC identifies one NIC everywhere, so it is
// unique across projects as in Ironic, but the answer discloses nothing a
// caller could not already know by owning that NIC.
func constraintError(err error, kind, uuid, address string, name *string) error {
	if !ent.IsConstraintError(err) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address"):
		return &errs.Error{Status: 409, Field: "address", Msg: fmt.Sprintf("A %s with MAC address %s already exists.", kind, address)}
	case name != nil && strings.Contains(msg, "name"):
		return &errs.Error{Status: 409, Field: "name", Msg: fmt.Sprintf("A %s with name %s already exists.", kind, *name)}
	case strings.Contains(msg, "uuid"):
		return &errs.Error{Status: 409, Field: "uuid", Msg: fmt.Sprintf("A %s with UUID %s already exists.", kind, uuid)}
	case strings.Contains(msg, "FOREIGN") || strings.Contains(msg, "foreign"):
		return errs.Conflict("The node of this %s was deleted meanwhile.", kind)
	}
	return errs.Conflict("the %s conflicts with an existing one: %v", kind, err)
}

// datapathRE is an OpenFlow datapath ID, which Ironic accepts as a
// switch_id: 16 hex digits.
var datapathRE = regexp.MustCompile(`^(?i)(0x)?[0-9a-f]{16}$`)
