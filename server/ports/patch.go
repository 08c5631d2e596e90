package ports

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/ent/portgroup"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/store"
)

// PortPatchable and PortgroupPatchable are the fields a JSON patch may
// touch, Ironic's PATCH_ALLOWED_FIELDS.
var (
	PortPatchable = []string{"address", "extra", "is_smartnic", "local_link_connection", "node_uuid",
		"physical_network", "portgroup_uuid", "pxe_enabled", "name", "description", "vendor", "category",
		"available_for_dynamic_portgroup"}
	PortgroupPatchable = []string{"address", "extra", "mode", "name", "node_uuid", "properties",
		"standalone_ports_supported", "physical_network", "category"}
)

func topField(path string) string {
	f, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return f
}

// checkOps refuses an operation on a field outside patchable, naming it
// as Ironic does, and lets allowed gate fields by API version.
func checkOps(raw []byte, patchable []string, allowed func(string) error) error {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return err
	}
	for _, op := range ops {
		paths := []string{op.Path}
		if op.Op == "move" || op.Op == "copy" {
			paths = append(paths, op.From)
		}
		for _, p := range paths {
			f := topField(p)
			if !strings.HasPrefix(p, "/") || !slices.Contains(patchable, f) {
				return errs.BadRequest(f, "Cannot patch %s. Only the following can be updated: %s", p, strings.Join(patchable, ", "))
			}
			if allowed != nil {
				if err := allowed(f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func diff(before, after map[string]any) []string {
	var changed []string
	for f, v := range after {
		if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(v)) {
			changed = append(changed, f)
		}
	}
	for f := range before {
		if _, ok := after[f]; !ok {
			changed = append(changed, f)
		}
	}
	sort.Strings(changed)
	return changed
}

func optStr(doc map[string]any, f string) (*string, error) {
	switch v := doc[f].(type) {
	case nil:
		return nil, nil
	case string:
		return &v, nil
	}
	return nil, errs.BadRequest(f, "%s must be a string or null", f)
}

func obj(doc map[string]any, f string) (map[string]any, error) {
	switch v := doc[f].(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return v, nil
	}
	return nil, errs.BadRequest(f, "%s must be an object", f)
}

// boolean reads a flag as Ironic's args.boolean does: a JSON boolean or
// a string such as "true".
func boolean(doc map[string]any, f string) (bool, error) {
	switch v := doc[f].(type) {
	case bool:
		return v, nil
	case string:
		if b, ok := ParseBool(v); ok {
			return b, nil
		}
	}
	return false, errs.BadRequest(f, "%s must be true or false, not %v", f, doc[f])
}

// ParseBool reads a boolean written as a string the way Ironic's
// strutils.bool_from_string does in strict mode.
func ParseBool(s string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, true
	case "0", "f", "false", "off", "n", "no":
		return false, true
	}
	return false, false
}

func str(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// linkNode is Ironic's authorize_node_link: a port or portgroup may move
// only to a node the caller sees and that has the same owner; any other
// answer is the same sentence, so it discloses nothing.
func (s *Service) linkNode(ctx context.Context, c *ent.Client, cur *ent.Node, v any) (*ent.Node, error) {
	id, _ := v.(string)
	invalid := errs.BadRequest("node_uuid", "Unable to apply the requested node_uuid '%v'. Requested value was invalid.", v)
	n, err := s.nodes.Lookup(ctx, id)
	if err != nil || !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) || n.Owner != cur.Owner {
		return nil, invalid
	}
	return n, nil
}

// PatchPort applies an RFC 6902 patch to a port: 404 when the caller may
// not see its node, 403 without the update rule, 400 for a patch that
// does not fit. The read, the patch and the write hold the port's row.
// pgPhysnet is Ironic's 1.102 rule: a portgroup member's physical
// network follows its portgroup's, so a patch setting it is refused.
func (s *Service) PatchPort(ctx context.Context, ident string, raw []byte, allowed func(string) error, pgPhysnet bool) (*Port, error) {
	p, n, err := s.authorizedPort(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	if err := checkOps(raw, PortPatchable, allowed); err != nil {
		return nil, err
	}
	var changed []string
	var out *Port
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := tx.Port.Update().Where(port.ID(p.ID)).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return err
		}
		cur, err := tx.Port.Get(ctx, p.ID)
		if ent.IsNotFound(err) {
			return portNotFound(ident)
		}
		if err != nil {
			return err
		}
		if cur.NodeID != n.ID {
			if n, err = s.node(ctx, tx, cur.NodeID); err != nil {
				return err
			}
			if err := s.authorize(ctx, n, RuleUpdate, "port", cur.UUID, portNotFound(ident)); err != nil {
				return err
			}
		}
		view, err := s.portView(ctx, tx, cur, n.UUID)
		if err != nil {
			return err
		}
		before := map[string]any{
			"address": cur.Address, "node_uuid": n.UUID, "portgroup_uuid": str(view.PortgroupUUID),
			"local_link_connection": cur.LocalLinkConnection, "pxe_enabled": cur.PxeEnabled,
			"physical_network": str(cur.PhysicalNetwork), "extra": cur.Extra, "is_smartnic": cur.IsSmartnic,
			"name": str(cur.Name), "description": str(cur.Description), "vendor": str(cur.Vendor), "category": str(cur.Category),
			"available_for_dynamic_portgroup": cur.AvailableForDynamicPortgroup,
		}
		after, err := patchdoc.Apply(before, raw, "port")
		if err != nil {
			return err
		}
		if changed = diff(before, after); len(changed) == 0 {
			out = view
			return nil
		}
		upd := tx.Port.UpdateOneID(cur.ID)
		nodeID := cur.NodeID
		if slices.Contains(changed, "node_uuid") {
			nn, err := s.linkNode(ctx, tx, n, after["node_uuid"])
			if err != nil {
				return err
			}
			nodeID, n = nn.ID, nn
			upd.SetNodeID(nn.ID)
			if cur.PortgroupID != nil && !slices.Contains(changed, "portgroup_uuid") {
				if ok, err := portgroupNodeIs(ctx, tx, *cur.PortgroupID, nn.ID); err != nil || !ok {
					return errs.BadRequest("portgroup_uuid", "Port can not be added to a portgroup belonging to a different node.")
				}
			}
		}
		strs := map[string]*string{}
		for _, f := range changed {
			switch f {
			case "address":
				a, _ := after[f].(string)
				mac, err := NormalizeMAC(f, a)
				if err != nil {
					return err
				}
				after[f] = mac
				upd.SetAddress(mac)
			case "portgroup_uuid":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				if v == nil {
					upd.ClearPortgroupID()
					continue
				}
				g, err := s.memberPortgroup(ctx, tx, *v, nodeID)
				if err != nil {
					return err
				}
				upd.SetPortgroupID(g.ID)
			case "local_link_connection":
				m, err := obj(after, f)
				if err != nil {
					return err
				}
				if m, err = validateLocalLink(m); err != nil {
					return err
				}
				upd.SetLocalLinkConnection(m)
			case "extra":
				m, err := obj(after, f)
				if err != nil {
					return err
				}
				upd.SetExtra(m)
			case "pxe_enabled", "is_smartnic":
				b, err := boolean(after, f)
				if err != nil {
					return err
				}
				if f == "pxe_enabled" {
					upd.SetPxeEnabled(b)
				} else {
					upd.SetIsSmartnic(b)
				}
			case "available_for_dynamic_portgroup":
				// A JSON boolean, as Ironic's schema; removing it is
				// refused as Ironic's schema refuses the null it leaves.
				b, ok := after[f].(bool)
				if !ok {
					return errs.BadRequest(f, "%s must be true or false, not %v", f, after[f])
				}
				upd.SetAvailableForDynamicPortgroup(b)
			case "physical_network", "name", "description", "vendor", "category":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				strs[f] = v
			case "node_uuid":
			default:
				return errs.BadRequest(f, "Cannot patch /%s. Only the following can be updated: %s", f, strings.Join(PortPatchable, ", "))
			}
		}
		if err := validateStrings(strs); err != nil {
			return err
		}
		for f, v := range strs {
			setOptional(f, v, map[string]func(string){
				"physical_network": func(s string) { upd.SetPhysicalNetwork(s) }, "name": func(s string) { upd.SetName(s) },
				"description": func(s string) { upd.SetDescription(s) }, "vendor": func(s string) { upd.SetVendor(s) },
				"category": func(s string) { upd.SetCategory(s) },
			}, map[string]func(){
				"physical_network": func() { upd.ClearPhysicalNetwork() }, "name": func() { upd.ClearName() },
				"description": func() { upd.ClearDescription() }, "vendor": func() { upd.ClearVendor() },
				"category": func() { upd.ClearCategory() },
			})
		}
		if pgPhysnet && touches(raw, "physical_network") && after["portgroup_uuid"] != nil {
			return errs.BadRequest("physical_network", "physical_network cannot be changed while the port belongs to a portgroup.")
		}
		if slices.Contains(changed, "portgroup_uuid") || slices.Contains(changed, "physical_network") {
			if g, _ := after["portgroup_uuid"].(string); g != "" {
				pg, err := lookupPortgroup(ctx, tx, g)
				if err != nil {
					return err
				}
				phys, _ := optStr(after, "physical_network")
				if err := checkMemberPhysnet(ctx, tx, pg, cur.ID, phys); err != nil {
					return err
				}
			}
		}
		if b, _ := boolean(after, "is_smartnic"); b {
			llc, _ := after["local_link_connection"].(map[string]any)
			if _, ok := llc["hostname"]; !ok {
				return errs.BadRequest("local_link_connection", "Smart NIC port must have port_id and hostname in local_link_connection")
			}
		}
		saved, err := upd.Save(ctx)
		if err != nil {
			addr, _ := after["address"].(string)
			return constraintError(err, "port", cur.UUID, addr, strs["name"])
		}
		out, err = s.portView(ctx, tx, saved, n.UUID)
		return err
	})
	if len(changed) > 0 || err != nil {
		s.guard.Done(ctx, RuleUpdate, "port", p.UUID, err, map[string]any{"changed": changed})
	}
	return out, err
}

func setOptional(f string, v *string, set map[string]func(string), clear map[string]func()) {
	if v == nil {
		clear[f]()
	} else {
		set[f](*v)
	}
}

// PatchPortgroup applies an RFC 6902 patch to a portgroup, as PatchPort.
func (s *Service) PatchPortgroup(ctx context.Context, ident string, raw []byte, allowed func(string) error) (*Portgroup, error) {
	g, n, err := s.authorizedPortgroup(ctx, ident, RulePGUpdate)
	if err != nil {
		return nil, err
	}
	if err := checkOps(raw, PortgroupPatchable, allowed); err != nil {
		return nil, err
	}
	var changed []string
	var out *Portgroup
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := tx.Portgroup.Update().Where(portgroup.ID(g.ID)).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return err
		}
		cur, err := tx.Portgroup.Get(ctx, g.ID)
		if ent.IsNotFound(err) {
			return pgNotFound(ident)
		}
		if err != nil {
			return err
		}
		if cur.NodeID != n.ID {
			if n, err = s.node(ctx, tx, cur.NodeID); err != nil {
				return err
			}
			if err := s.authorize(ctx, n, RulePGUpdate, "portgroup", cur.UUID, pgNotFound(ident)); err != nil {
				return err
			}
		}
		before := map[string]any{
			"address": str(cur.Address), "node_uuid": n.UUID, "name": str(cur.Name), "mode": cur.Mode,
			"properties": cur.Properties, "standalone_ports_supported": cur.StandalonePortsSupported,
			"physical_network": str(cur.PhysicalNetwork), "category": str(cur.Category), "extra": cur.Extra,
		}
		after, err := patchdoc.Apply(before, raw, "portgroup")
		if err != nil {
			return err
		}
		if changed = diff(before, after); len(changed) == 0 {
			out = &Portgroup{Portgroup: cur, NodeUUID: n.UUID}
			return nil
		}
		upd := tx.Portgroup.UpdateOneID(cur.ID)
		var addr string
		var name *string
		physnet := cur.PhysicalNetwork
		for _, f := range changed {
			switch f {
			case "node_uuid":
				nn, err := s.linkNode(ctx, tx, n, after[f])
				if err != nil {
					return err
				}
				if has, err := tx.Port.Query().Where(port.PortgroupID(cur.ID)).Exist(ctx); err != nil || has {
					return errs.BadRequest("node_uuid", "Cannot complete the requested action because portgroup %s contains ports.", cur.UUID)
				}
				n = nn
				upd.SetNodeID(nn.ID)
			case "address":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				if v == nil {
					upd.ClearAddress()
					continue
				}
				if addr, err = NormalizeMAC(f, *v); err != nil {
					return err
				}
				upd.SetAddress(addr)
			case "name":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				if v == nil {
					upd.ClearName()
					continue
				}
				if nodes.ValidateName(f, *v) != nil {
					return errs.BadRequest(f, "Portgroup %s: Cannot change name to invalid name '%s'", ident, *v)
				}
				name = v
				upd.SetName(*v)
			case "mode":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				if v == nil || *v == "" {
					return errs.BadRequest(f, "'mode' is a mandatory attribute and can not be removed")
				}
				if err := validateStrings(map[string]*string{f: v}); err != nil {
					return err
				}
				upd.SetMode(*v)
			case "properties", "extra":
				m, err := obj(after, f)
				if err != nil {
					return err
				}
				if f == "extra" {
					upd.SetExtra(m)
				} else {
					upd.SetProperties(m)
				}
			case "standalone_ports_supported":
				b, err := boolean(after, f)
				if err != nil {
					return err
				}
				upd.SetStandalonePortsSupported(b)
			case "physical_network", "category":
				v, err := optStr(after, f)
				if err != nil {
					return err
				}
				if err := validateStrings(map[string]*string{f: v}); err != nil {
					return err
				}
				if f == "physical_network" {
					physnet = v
				}
				setOptional(f, v, map[string]func(string){
					"physical_network": func(s string) { upd.SetPhysicalNetwork(s) }, "category": func(s string) { upd.SetCategory(s) },
				}, map[string]func(){
					"physical_network": func() { upd.ClearPhysicalNetwork() }, "category": func() { upd.ClearCategory() },
				})
			default:
				return errs.BadRequest(f, "Cannot patch /%s. Only the following can be updated: %s", f, strings.Join(PortgroupPatchable, ", "))
			}
		}
		saved, err := upd.Save(ctx)
		if err != nil {
			return constraintError(err, "portgroup", cur.UUID, addr, name)
		}
		// As Ironic's update_portgroup_physical_network (1.102): a patch
		// naming the portgroup's physical network gives it to every
		// member port too.
		if touches(raw, "physical_network") {
			pu := tx.Port.Update().Where(port.PortgroupID(cur.ID))
			if physnet == nil {
				pu.ClearPhysicalNetwork()
			} else {
				pu.SetPhysicalNetwork(*physnet)
			}
			if err := pu.Exec(ctx); err != nil {
				return err
			}
		}
		out = &Portgroup{Portgroup: saved, NodeUUID: n.UUID}
		return nil
	})
	if len(changed) > 0 || err != nil {
		s.guard.Done(ctx, RulePGUpdate, "portgroup", g.UUID, err, map[string]any{"changed": changed})
	}
	return out, err
}

// touches reports whether an operation of the patch is on field (or
// inside it); the patch has been decoded once already, so it is well formed.
func touches(raw []byte, field string) bool {
	ops, _ := nodes.DecodePatch(raw)
	for _, op := range ops {
		if topField(op.Path) == field {
			return true
		}
	}
	return false
}

// checkMemberPhysnet is Ironic's validate_port_physnet: a port joining a
// portgroup, or changing its physical network inside one, must be on the
// physical network of the other members or, without members, on the
// portgroup's own if it has one (409 otherwise).
func checkMemberPhysnet(ctx context.Context, tx *ent.Client, pg *ent.Portgroup, self int, physnet *string) error {
	others, err := tx.Port.Query().Where(port.PortgroupID(pg.ID), port.IDNEQ(self)).All(ctx)
	if err != nil {
		return err
	}
	var want *string
	switch {
	case len(others) > 0:
		want = others[0].PhysicalNetwork
	case pg.PhysicalNetwork != nil:
		want = pg.PhysicalNetwork
	default:
		return nil
	}
	if deref(want) != deref(physnet) || (want == nil) != (physnet == nil) {
		return errs.Conflict("Port with physical network %s cannot become a member of port group %s which has ports in physical network %s.",
			orNone(physnet), pg.UUID, orNone(want))
	}
	return nil
}

// orNone prints an unset string as Python prints None.
func orNone(p *string) string {
	if p == nil {
		return "None"
	}
	return *p
}
