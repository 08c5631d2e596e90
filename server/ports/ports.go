package ports

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/ent/portgroup"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// PortInput is a new port as a caller gives it.
type PortInput struct {
	UUID                string
	Address             string
	Node                string
	Portgroup           *string
	LocalLinkConnection map[string]any
	PXEEnabled          *bool
	PhysicalNetwork     *string
	Extra               map[string]any
	IsSmartNIC          *bool
	Name                *string
	Description         *string
	Vendor              *string
	Category            *string
	// AvailableForDynamicPortgroup is true when not given.
	AvailableForDynamicPortgroup *bool
}

// nodeForCreate finds the node a new port or portgroup names and checks
// the create rule on it. As Ironic's post does, the rule is checked on the
// node whoever may see it (a missing node has no owner or lessee), and
// only then is a missing or hidden node a 400: a project caller gets the
// same 403 for another project's node and for none at all, so neither
// answer says which it was.
func (s *Service) nodeForCreate(ctx context.Context, ident, rule, kind string) (*ent.Node, error) {
	if ident == "" {
		return nil, errs.BadRequest("node_uuid", "node_uuid is required")
	}
	n, err := s.visibleNode(ctx, ident)
	if errs.Status(err) == 404 {
		t := policies.Target{}
		if n, lerr := s.nodes.Lookup(ctx, ident); lerr == nil {
			t = nodes.Target(n)
		}
		if err := s.guard.Authorize(ctx, rule, kind, "", t); err != nil {
			return nil, err
		}
		return nil, errs.BadRequest("node_uuid", "Node %s could not be found.", ident)
	}
	if err != nil {
		return nil, err
	}
	return n, s.guard.Authorize(ctx, rule, kind, "", nodes.Target(n))
}

// CreatePort enrols a port on a node.
func (s *Service) CreatePort(ctx context.Context, in PortInput) (*Port, error) {
	n, err := s.nodeForCreate(ctx, in.Node, RuleCreate, "port")
	if err != nil {
		return nil, err
	}
	var out *Port
	err = s.createPort(ctx, n, &in, &out)
	s.guard.Done(ctx, RuleCreate, "port", in.UUID, err, map[string]any{"address": in.Address, "node": n.UUID})
	return out, err
}

func (s *Service) createPort(ctx context.Context, n *ent.Node, in *PortInput, out **Port) error {
	if err := validatePortInput(in); err != nil {
		return err
	}
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if _, err := lockNode(ctx, tx, n.ID); err != nil {
			return err
		}
		c := tx.Port.Create().SetUUID(in.UUID).SetAddress(in.Address).SetNodeID(n.ID).
			SetLocalLinkConnection(in.LocalLinkConnection).SetExtra(in.Extra).SetInternalInfo(map[string]any{}).
			SetNillablePxeEnabled(in.PXEEnabled).SetNillablePhysicalNetwork(in.PhysicalNetwork).
			SetNillableIsSmartnic(in.IsSmartNIC).SetNillableName(in.Name).SetNillableDescription(in.Description).
			SetNillableVendor(in.Vendor).SetNillableCategory(in.Category).
			SetNillableAvailableForDynamicPortgroup(in.AvailableForDynamicPortgroup)
		if in.Portgroup != nil {
			pg, err := s.memberPortgroup(ctx, tx, *in.Portgroup, n.ID)
			if err != nil {
				return err
			}
			if in.PXEEnabled == nil || *in.PXEEnabled {
				if !pg.StandalonePortsSupported {
					return errs.Conflict("Port group %s doesn't support standalone ports. This port cannot be created as a member of that portgroup as the port's 'pxe_enabled' field was set to True.", pg.UUID)
				}
			}
			if err := checkMemberPhysnet(ctx, tx, pg, 0, in.PhysicalNetwork); err != nil {
				return err
			}
			c.SetPortgroupID(pg.ID)
		}
		p, err := c.Save(ctx)
		if err != nil {
			return constraintError(err, "port", in.UUID, in.Address, in.Name)
		}
		*out, err = s.portView(ctx, tx, p, n.UUID)
		return err
	})
}

// memberPortgroup finds the portgroup a port joins: it must be on the
// port's node; any other, like a missing one, is a 400.
func (s *Service) memberPortgroup(ctx context.Context, c *ent.Client, ident string, nodeID int) (*ent.Portgroup, error) {
	pg, err := lookupPortgroup(ctx, c, ident)
	if err != nil {
		return nil, errs.BadRequest("portgroup_uuid", "Portgroup %s could not be found.", ident)
	}
	if pg.NodeID != nodeID {
		n, err := s.node(ctx, c, pg.NodeID)
		if err != nil {
			return nil, err
		}
		if n == nil || !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
			return nil, errs.BadRequest("portgroup_uuid", "Portgroup %s could not be found.", ident)
		}
		return nil, errs.BadRequest("portgroup_uuid", "Port can not be added to a portgroup belonging to a different node.")
	}
	return pg, nil
}

func validatePortInput(in *PortInput) error {
	if in.UUID == "" {
		in.UUID = uuid.NewString()
	} else if !nodes.IsUUID(in.UUID) {
		return errs.BadRequest("uuid", "Expected a UUID but received %s.", in.UUID)
	}
	in.UUID = strings.ToLower(in.UUID)
	if in.Address == "" {
		return errs.BadRequest("address", "address is required: the port's MAC address")
	}
	var err error
	if in.Address, err = NormalizeMAC("address", in.Address); err != nil {
		return err
	}
	if in.LocalLinkConnection, err = validateLocalLink(in.LocalLinkConnection); err != nil {
		return err
	}
	if in.IsSmartNIC != nil && *in.IsSmartNIC {
		if _, ok := in.LocalLinkConnection["port_id"]; !ok {
			return errs.BadRequest("local_link_connection", "Smart NIC port must have port_id and hostname in local_link_connection")
		}
		if _, ok := in.LocalLinkConnection["hostname"]; !ok {
			return errs.BadRequest("local_link_connection", "Smart NIC port must have port_id and hostname in local_link_connection")
		}
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	return validateStrings(map[string]*string{
		"physical_network": in.PhysicalNetwork, "name": in.Name, "description": in.Description,
		"vendor": in.Vendor, "category": in.Category,
	})
}

// maxLens are the string fields' limits, Ironic's schema maxLength.
var maxLens = map[string]int{"physical_network": 64, "description": 255, "vendor": 32, "category": 80, "mode": 255}

func validateStrings(fs map[string]*string) error {
	for f, v := range fs {
		if v == nil {
			continue
		}
		switch f {
		case "name":
			if err := nodes.ValidateName(f, *v); err != nil {
				return err
			}
		case "physical_network":
			if *v == "" {
				return errs.BadRequest(f, "A non-empty value is required when setting physical_network")
			}
		}
		if max, ok := maxLens[f]; ok && len(*v) > max {
			return errs.BadRequest(f, "%s is %d characters long; at most %d are allowed", f, len(*v), max)
		}
	}
	return nil
}

// localLinkKeys are local_link_connection's keys, Ironic's
// LOCAL_LINK_BASE_SCHEMA; every value is a string.
var localLinkKeys = map[string]bool{
	"port_id": true, "switch_id": true, "hostname": true, "switch_info": true,
	"network_type": true, "vtep-logical-switch": true, "vtep-physical-switch": true,
}

// validateLocalLink checks local_link_connection against Ironic's
// schema: empty; or port_id with switch_id (a switch's MAC or OpenFlow
// datapath ID) or hostname (a Smart NIC); or network_type unmanaged; or
// port_id with both VTEP switches.
func validateLocalLink(llc map[string]any) (map[string]any, error) {
	const f = "local_link_connection"
	if len(llc) == 0 {
		return map[string]any{}, nil
	}
	str := map[string]string{}
	for k, v := range llc {
		if !localLinkKeys[k] {
			return nil, errs.BadRequest(f, "local_link_connection has unknown key %q; allowed are port_id, switch_id, hostname, switch_info, network_type", k)
		}
		s, ok := v.(string)
		if !ok {
			return nil, errs.BadRequest(f, "local_link_connection.%s must be a string", k)
		}
		str[k] = s
	}
	if nt, ok := str["network_type"]; ok && nt != "managed" && nt != "unmanaged" {
		return nil, errs.BadRequest(f, "local_link_connection.network_type must be managed or unmanaged, not %q", nt)
	}
	if (str["vtep-logical-switch"] == "") != (str["vtep-physical-switch"] == "") {
		return nil, errs.BadRequest(f, "local_link_connection needs both vtep-logical-switch and vtep-physical-switch, or neither")
	}
	_, hasPort := str["port_id"]
	_, hasSwitch := str["switch_id"]
	_, hasHost := str["hostname"]
	_, hasVTEP := str["vtep-logical-switch"]
	if !(hasPort && (hasSwitch || hasHost || hasVTEP)) && str["network_type"] != "unmanaged" {
		return nil, errs.BadRequest(f, "local_link_connection needs port_id with switch_id or hostname, or network_type unmanaged")
	}
	if id, ok := str["switch_id"]; ok {
		norm, err := NormalizeMAC(f, id)
		if err != nil {
			if !datapathRE.MatchString(id) {
				return nil, errs.BadRequest(f, "Expected a MAC address or OpenFlow datapath ID but received %s.", id)
			}
			norm = strings.ToLower(id)
		}
		llc["switch_id"] = norm
	}
	return llc, nil
}

// GetPort returns one port the caller may see.
func (s *Service) GetPort(ctx context.Context, ident string) (*Port, error) {
	p, n, err := s.authorizedPort(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	return s.portView(ctx, s.db.Client, p, n.UUID)
}

// DeletePort removes a port; one bound to a VIF only while its node is in
// maintenance, as Ironic.
func (s *Service) DeletePort(ctx context.Context, ident string) error {
	p, _, err := s.authorizedPort(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := lockNode(ctx, tx, p.NodeID)
		if err != nil {
			return err
		}
		cur, err := tx.Port.Get(ctx, p.ID)
		if ent.IsNotFound(err) {
			return portNotFound(ident)
		}
		if err != nil {
			return err
		}
		if vif, ok := cur.InternalInfo[VIFKey]; ok && !n.Maintenance {
			return errs.Conflict("Cannot delete the port %s as it is bound to VIF %v for use.", cur.UUID, vif)
		}
		return tx.Port.DeleteOneID(cur.ID).Exec(ctx)
	})
	s.guard.Done(ctx, RuleDelete, "port", p.UUID, err, map[string]any{"address": p.Address})
	return err
}

// EnsurePort gives the node a port for mac unless it has one: for
// inspection, which reports the NICs it found. The port is created with
// pxe_enabled false, as Ironic's inspection "ports" hook creates it when
// the inventory names no PXE interface (out-of-band inspection never
// does); an existing port is left as it is. It checks no policy and
// works while the conductor holds the node (the caller is that
// conductor), but is audited like any creation. A MAC already on another
// node is a conflict, never moved silently.
func (s *Service) EnsurePort(ctx context.Context, nodeUUID, mac string) (p *ent.Port, created bool, err error) {
	mac, err = NormalizeMAC("address", mac)
	if err != nil {
		return nil, false, err
	}
	n, err := s.nodes.Lookup(ctx, nodeUUID)
	if err != nil {
		return nil, false, err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := takeRow(ctx, tx, n.ID); err != nil {
			return err
		}
		p, err = tx.Port.Query().Where(port.Address(mac)).Only(ctx)
		switch {
		case err == nil && p.NodeID == n.ID:
			return nil
		case err == nil:
			return errs.Conflict("A port with MAC address %s already exists.", mac)
		case !ent.IsNotFound(err):
			return err
		}
		p, err = tx.Port.Create().SetUUID(uuid.NewString()).SetAddress(mac).SetNodeID(n.ID).SetPxeEnabled(false).
			SetExtra(map[string]any{}).SetInternalInfo(map[string]any{}).SetLocalLinkConnection(map[string]any{}).Save(ctx)
		if err != nil {
			return constraintError(err, "port", "", mac, nil)
		}
		created = true
		return nil
	})
	if created || err != nil {
		id := ""
		if p != nil {
			id = p.UUID
		}
		s.guard.Done(ctx, RuleCreate, "port", id, err, map[string]any{"address": mac, "node": n.UUID, "source": "inspection"})
	}
	return p, created, err
}

// portgroupNodeIs reports whether portgroup id is on node; used when a
// port moves between nodes.
func portgroupNodeIs(ctx context.Context, c *ent.Client, pgID, nodeID int) (bool, error) {
	return c.Portgroup.Query().Where(portgroup.ID(pgID), portgroup.NodeID(nodeID)).Exist(ctx)
}
