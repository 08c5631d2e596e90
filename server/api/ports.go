package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
)

func (a *API) registerPorts(v1 fiber.Router) {
	v1.Get("/ports", query(portListQuery...), a.listPorts(false, ""))
	v1.Get("/ports/detail", query(portListQuery...), a.listPorts(true, ""))
	v1.Post("/ports", a.createPort)
	v1.Get("/ports/:port", query(fieldsQuery...), a.getPort)
	v1.Patch("/ports/:port", a.patchPort)
	v1.Delete("/ports/:port", a.deletePort)
	v1.Get("/nodes/:node/ports", query(subPortQuery...), a.listPorts(false, "node"))
	v1.Get("/nodes/:node/ports/detail", query(subPortQuery...), a.listPorts(true, "node"))
	v1.Get("/nodes/:node/vifs", query(), a.listVIFs)
	v1.Post("/nodes/:node/vifs", a.attachVIF)
	v1.Delete("/nodes/:node/vifs/:vif", a.detachVIF)
	a.registerPortgroups(v1)
}

// Query parameters of the port lists, as Ironic defines them; under a
// node or portgroup the parent is the path, so naming another is refused.
var (
	portListQuery = []string{"node", "node_uuid", "address", "portgroup", "detail", "fields", "limit", "marker",
		"sort_key", "sort_dir", "shard", "description_contains", "conductor_groups"}
	subPortQuery = []string{"address", "detail", "fields", "limit", "marker", "sort_key", "sort_dir",
		"shard", "description_contains", "conductor_groups"}
)

// portTable is a port's JSON, Ironic's port.py with the version of each
// field.
var portTable = &resTable[*ports.Port]{
	path:       "ports",
	shardSince: VerShard,
	defaults:   []string{"uuid", "address"},
	uuid:       func(p *ports.Port) string { return p.UUID },
	fields: []resField[*ports.Port]{
		{"uuid", VerMin, func(p *ports.Port) any { return p.UUID }},
		{"address", VerMin, func(p *ports.Port) any { return p.Address }},
		{"node_uuid", VerMin, func(p *ports.Port) any { return p.NodeUUID }},
		{"portgroup_uuid", VerPortgroupSub, func(p *ports.Port) any { return optString(p.PortgroupUUID) }},
		{"local_link_connection", VerPortAdvancedNet, func(p *ports.Port) any { return orEmpty(p.LocalLinkConnection) }},
		{"pxe_enabled", VerPortAdvancedNet, func(p *ports.Port) any { return p.PxeEnabled }},
		{"physical_network", VerPortPhysnet, func(p *ports.Port) any { return optString(p.PhysicalNetwork) }},
		{"internal_info", VerPortInternalInfo, func(p *ports.Port) any { return orEmpty(p.InternalInfo) }},
		{"extra", VerMin, func(p *ports.Port) any { return orEmpty(p.Extra) }},
		{"is_smartnic", VerPortSmartNIC, func(p *ports.Port) any { return p.IsSmartnic }},
		{"name", VerPortName, func(p *ports.Port) any { return optString(p.Name) }},
		{"description", VerPortDescription, func(p *ports.Port) any { return optString(p.Description) }},
		{"vendor", VerPortVendor, func(p *ports.Port) any { return optString(p.Vendor) }},
		{"category", VerPortCategory, func(p *ports.Port) any { return optString(p.Category) }},
		{"available_for_dynamic_portgroup", VerDynamicPortgroup, func(p *ports.Port) any { return p.AvailableForDynamicPortgroup }},
		{"created_at", VerMin, func(p *ports.Port) any { return p.CreatedAt }},
		{"updated_at", VerMin, func(p *ports.Port) any { return p.UpdatedAt }},
	},
}

func (a *API) listPorts(detail bool, parent string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		v := ver(c)
		o, sel, err := portTable.listOpts(c, v, detail)
		if err != nil {
			return err
		}
		switch parent {
		case "node":
			n := c.Params("node")
			o.Node = &n
		case "portgroup":
			g := c.Params("pg")
			o.Portgroup = &g
		default:
			if n := c.Query("node"); n != "" {
				if !nodes.IsUUID(n) && v < VerName {
					return errs.NotAcceptable("a node name as the node filter requires API version %s or later", VerName)
				}
				o.Node = &n
			}
			if n := c.Query("node_uuid"); n != "" {
				if !nodes.IsUUID(n) {
					return errs.BadRequest("node_uuid", "Expected a UUID but received %s.", n)
				}
				if o.Node != nil && *o.Node != n {
					return errs.BadRequest("node_uuid", "node and node_uuid name different nodes; give one")
				}
				o.Node = &n
			}
			if g := c.Query("portgroup"); g != "" {
				if err := requireVersion(v, VerPortgroupSub, "the portgroup filter"); err != nil {
					return err
				}
				o.Portgroup = &g
			}
		}
		ps, more, err := a.Ports.ListPorts(c.UserContext(), o)
		if err != nil {
			return err
		}
		return portTable.sendList(c, "ports", vtepHidden(v, ps...), sel, more)
	}
}

func (a *API) getPort(c *fiber.Ctx) error {
	sel, err := portTable.selectFields(c.Query("fields"), ver(c), false, false)
	if err != nil {
		return err
	}
	p, err := a.Ports.GetPort(c.UserContext(), c.Params("port"))
	if err != nil {
		return err
	}
	return portTable.send(c, vtepHidden(ver(c), p)[0], sel, 200)
}

// portCreate is the create body; unknown fields are refused by bind.
type portCreate struct {
	UUID                string         `json:"uuid"`
	Address             string         `json:"address"`
	NodeUUID            string         `json:"node_uuid"`
	NodeIdent           string         `json:"node_ident"`
	PortgroupUUID       *string        `json:"portgroup_uuid"`
	LocalLinkConnection map[string]any `json:"local_link_connection"`
	PXEEnabled          optBool        `json:"pxe_enabled"`
	PhysicalNetwork     *string        `json:"physical_network"`
	Extra               map[string]any `json:"extra"`
	IsSmartNIC          optBool        `json:"is_smartnic"`
	Name                *string        `json:"name"`
	Description         *string        `json:"description"`
	Vendor              *string        `json:"vendor"`
	Category            *string        `json:"category"`
	// AvailableForDynamicPortgroup is a JSON boolean only, as Ironic's
	// schema takes it (not the string forms pxe_enabled accepts).
	AvailableForDynamicPortgroup *bool `json:"available_for_dynamic_portgroup"`
}

func (a *API) createPort(c *fiber.Ctx) error {
	v := ver(c)
	var in portCreate
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := portNodeIdent(v, &in); err != nil {
		return err
	}
	if in.LocalLinkConnection != nil && !vtepAllowed(v) {
		for _, k := range vtepKeys {
			if _, ok := in.LocalLinkConnection[k]; ok {
				return errs.NotAcceptable("local_link_connection.%s is accepted only from API version %s to %s", k, VerOVNVTEP, VerNoOVNVTEP-1)
			}
		}
	}
	gate := portTable.gate(v)
	for f, set := range map[string]bool{
		"portgroup_uuid": in.PortgroupUUID != nil, "local_link_connection": in.LocalLinkConnection != nil,
		"pxe_enabled": in.PXEEnabled.v != nil, "physical_network": in.PhysicalNetwork != nil,
		"is_smartnic": in.IsSmartNIC.v != nil, "name": in.Name != nil, "description": in.Description != nil,
		"vendor": in.Vendor != nil, "category": in.Category != nil,
		"available_for_dynamic_portgroup": in.AvailableForDynamicPortgroup != nil,
	} {
		if set {
			if err := gate(f); err != nil {
				return err
			}
		}
	}
	p, err := a.Ports.CreatePort(c.UserContext(), ports.PortInput{
		UUID: in.UUID, Address: in.Address, Node: in.NodeUUID, Portgroup: in.PortgroupUUID,
		LocalLinkConnection: in.LocalLinkConnection, PXEEnabled: in.PXEEnabled.v, PhysicalNetwork: in.PhysicalNetwork,
		Extra: in.Extra, IsSmartNIC: in.IsSmartNIC.v, Name: in.Name, Description: in.Description,
		Vendor: in.Vendor, Category: in.Category, AvailableForDynamicPortgroup: in.AvailableForDynamicPortgroup,
	})
	if err != nil {
		return err
	}
	sel, _ := portTable.selectFields("", v, false, false)
	c.Location(baseURL(c) + "/v1/ports/" + p.UUID)
	return portTable.send(c, vtepHidden(v, p)[0], sel, 201)
}

func (a *API) patchPort(c *fiber.Ctx) error {
	v := ver(c)
	p, err := a.Ports.PatchPort(c.UserContext(), c.Params("port"), c.Body(), portTable.gate(v), v >= VerPortgroupPhysnet)
	if err != nil {
		return err
	}
	sel, _ := portTable.selectFields("", v, false, false)
	return portTable.send(c, vtepHidden(v, p)[0], sel, 200)
}

func (a *API) deletePort(c *fiber.Ctx) error {
	if err := a.Ports.DeletePort(c.UserContext(), c.Params("port")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// requireVIFs answers below 1.28 as Ironic: the sub-resource does not
// exist there.
func requireVIFs(c *fiber.Ctx) error {
	if ver(c) < VerVIFs {
		return errs.NotFound("/v1/nodes/{node}/vifs requires API version %s or later", VerVIFs)
	}
	return nil
}

func (a *API) listVIFs(c *fiber.Ctx) error {
	if err := requireVIFs(c); err != nil {
		return err
	}
	ids, err := a.Ports.VIFs(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(ids))
	for i, id := range ids {
		out[i] = fiber.Map{"id": id}
	}
	return c.JSON(fiber.Map{"vifs": out})
}

func (a *API) attachVIF(c *fiber.Ctx) error {
	if err := requireVIFs(c); err != nil {
		return err
	}
	// Ironic lets a VIF carry any other keys; it reads id and, from 1.67,
	// the port or portgroup to use.
	var in map[string]any
	if err := bind(c, &in); err != nil {
		return err
	}
	str := func(k string) (string, error) {
		x, ok := in[k]
		if !ok {
			return "", nil
		}
		s, ok := x.(string)
		if !ok {
			return "", errs.BadRequest(k, "%s must be a string", k)
		}
		return s, nil
	}
	var r ports.VIFRequest
	var err error
	if r.ID, err = str("id"); err != nil {
		return err
	}
	if ver(c) >= VerVIFAttachPort {
		if r.Port, err = str("port_uuid"); err != nil {
			return err
		}
		if r.Portgroup, err = str("portgroup_uuid"); err != nil {
			return err
		}
	}
	if err := a.Ports.AttachVIF(c.UserContext(), c.Params("node"), r); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) detachVIF(c *fiber.Ctx) error {
	if err := requireVIFs(c); err != nil {
		return err
	}
	if err := a.Ports.DetachVIF(c.UserContext(), c.Params("node"), c.Params("vif")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// portNodeIdent settles the node of a new port: node_ident (a UUID or
// name) from 1.94, or node_uuid, but not both, as Ironic's PORT_SCHEMA.
func portNodeIdent(v Version, in *portCreate) error {
	if in.NodeIdent == "" {
		return nil
	}
	if v < VerPortNodeIdent {
		return errs.NotAcceptable("node_ident requires API version %s or later", VerPortNodeIdent)
	}
	if in.NodeUUID != "" {
		return errs.BadRequest("node_ident", "give node_ident or node_uuid, not both")
	}
	in.NodeUUID = in.NodeIdent
	return nil
}

// vtepKeys are the OVN VTEP switch keys of local_link_connection, which
// Ironic accepted from 1.90 and dropped again at 1.105.
var vtepKeys = []string{"vtep-logical-switch", "vtep-physical-switch"}

func vtepAllowed(v Version) bool { return v >= VerOVNVTEP && v < VerNoOVNVTEP }

// vtepHidden shows a port whose local_link_connection holds VTEP keys
// with an empty one outside 1.90–1.104, as Ironic's port_sanitize does.
func vtepHidden(v Version, ps ...*ports.Port) []*ports.Port {
	if vtepAllowed(v) {
		return ps
	}
	out := make([]*ports.Port, len(ps))
	for i, p := range ps {
		out[i] = p
		for _, k := range vtepKeys {
			if _, ok := p.LocalLinkConnection[k]; ok {
				cp := *p
				cp.LocalLinkConnection = map[string]any{}
				out[i] = &cp
				break
			}
		}
	}
	return out
}
