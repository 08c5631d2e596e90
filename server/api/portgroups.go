package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/ports"
)

func (a *API) registerPortgroups(v1 fiber.Router) {
	pg := requirePortgroups
	v1.Get("/portgroups", pg, query(pgListQuery...), a.listPortgroups(false, false))
	v1.Get("/portgroups/detail", pg, query(pgListQuery...), a.listPortgroups(true, false))
	v1.Post("/portgroups", pg, a.createPortgroup)
	v1.Get("/portgroups/:pg", pg, query(fieldsQuery...), a.getPortgroup)
	v1.Patch("/portgroups/:pg", pg, a.patchPortgroup)
	v1.Delete("/portgroups/:pg", pg, a.deletePortgroup)
	v1.Get("/portgroups/:pg/ports", pg, query(subPortQuery...), a.listPorts(false, "portgroup"))
	v1.Get("/portgroups/:pg/ports/detail", pg, query(subPortQuery...), a.listPorts(true, "portgroup"))
	v1.Get("/nodes/:node/portgroups", pg, query(subPGQuery...), a.listPortgroups(false, true))
	v1.Get("/nodes/:node/portgroups/detail", pg, query(subPGQuery...), a.listPortgroups(true, true))
}

var (
	pgListQuery = []string{"node", "address", "detail", "fields", "limit", "marker", "sort_key", "sort_dir",
		"shard", "conductor_groups"}
	subPGQuery = []string{"address", "detail", "fields", "limit", "marker", "sort_key", "sort_dir",
		"shard", "conductor_groups"}
)

// requirePortgroups answers below 1.23 as Ironic: portgroups do not exist
// there (404); their sub-resources need 1.24.
func requirePortgroups(c *fiber.Ctx) error {
	need := VerPortgroups
	if strings.HasPrefix(c.Path(), "/v1/nodes/") || strings.HasSuffix(c.Path(), "/ports") || strings.HasSuffix(c.Path(), "/ports/detail") {
		need = VerPortgroupSub
	}
	if ver(c) < need {
		return errs.NotFound("portgroups require API version %s or later", need)
	}
	return c.Next()
}

// pgTable is a portgroup's JSON, Ironic's portgroup.py with the version
// of each field.
var pgTable = &resTable[*ports.Portgroup]{
	path:       "portgroups",
	shardSince: VerPortgroupShard,
	defaults:   []string{"uuid", "address", "name"},
	uuid:       func(g *ports.Portgroup) string { return g.UUID },
	fields: []resField[*ports.Portgroup]{
		{"uuid", VerPortgroups, func(g *ports.Portgroup) any { return g.UUID }},
		{"address", VerPortgroups, func(g *ports.Portgroup) any { return optString(g.Address) }},
		{"name", VerPortgroups, func(g *ports.Portgroup) any { return optString(g.Name) }},
		{"node_uuid", VerPortgroups, func(g *ports.Portgroup) any { return g.NodeUUID }},
		{"standalone_ports_supported", VerPortgroups, func(g *ports.Portgroup) any { return g.StandalonePortsSupported }},
		{"mode", VerPortgroupMode, func(g *ports.Portgroup) any { return g.Mode }},
		{"properties", VerPortgroupMode, func(g *ports.Portgroup) any { return orEmpty(g.Properties) }},
		{"physical_network", VerPortgroupPhysnet, func(g *ports.Portgroup) any { return optString(g.PhysicalNetwork) }},
		{"category", VerPortgroupCategory, func(g *ports.Portgroup) any { return optString(g.Category) }},
		{"dynamic_portgroup", VerDynamicPortgroup, func(g *ports.Portgroup) any { return g.DynamicPortgroup }},
		{"internal_info", VerPortgroups, func(g *ports.Portgroup) any { return orEmpty(g.InternalInfo) }},
		{"extra", VerPortgroups, func(g *ports.Portgroup) any { return orEmpty(g.Extra) }},
		{"created_at", VerPortgroups, func(g *ports.Portgroup) any { return g.CreatedAt }},
		{"updated_at", VerPortgroups, func(g *ports.Portgroup) any { return g.UpdatedAt }},
	},
	moreName: "ports",
	more: func(w *jw, _ *ports.Portgroup, self, bookmark string) {
		w.key("ports")
		w.b = append(w.b, `[{"href":`...)
		w.b = appendString(w.b, self+"/ports")
		w.b = append(w.b, `,"rel":"self"},{"href":`...)
		w.b = appendString(w.b, bookmark+"/ports")
		w.b = append(w.b, `,"rel":"bookmark"}]`...)
	},
}

func (a *API) listPortgroups(detail, underNode bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		o, sel, err := pgTable.listOpts(c, ver(c), detail)
		if err != nil {
			return err
		}
		if underNode {
			n := c.Params("node")
			o.Node = &n
		} else if n := c.Query("node"); n != "" {
			o.Node = &n
		}
		gs, more, err := a.Ports.ListPortgroups(c.UserContext(), o)
		if err != nil {
			return err
		}
		return pgTable.sendList(c, "portgroups", gs, sel, more)
	}
}

func (a *API) getPortgroup(c *fiber.Ctx) error {
	sel, err := pgTable.selectFields(c.Query("fields"), ver(c), false, false)
	if err != nil {
		return err
	}
	g, err := a.Ports.GetPortgroup(c.UserContext(), c.Params("pg"))
	if err != nil {
		return err
	}
	return pgTable.send(c, g, sel, 200)
}

type portgroupCreate struct {
	UUID                     string         `json:"uuid"`
	NodeUUID                 string         `json:"node_uuid"`
	Address                  *string        `json:"address"`
	Name                     *string        `json:"name"`
	Mode                     *string        `json:"mode"`
	Properties               map[string]any `json:"properties"`
	StandalonePortsSupported optBool        `json:"standalone_ports_supported"`
	PhysicalNetwork          *string        `json:"physical_network"`
	Category                 *string        `json:"category"`
	Extra                    map[string]any `json:"extra"`
}

func (a *API) createPortgroup(c *fiber.Ctx) error {
	v := ver(c)
	var in portgroupCreate
	if err := bind(c, &in); err != nil {
		return err
	}
	gate := pgTable.gate(v)
	for f, set := range map[string]bool{
		"mode": in.Mode != nil, "properties": in.Properties != nil,
		"physical_network": in.PhysicalNetwork != nil, "category": in.Category != nil,
	} {
		if set {
			if err := gate(f); err != nil {
				return err
			}
		}
	}
	g, err := a.Ports.CreatePortgroup(c.UserContext(), ports.PortgroupInput{
		UUID: in.UUID, Node: in.NodeUUID, Address: in.Address, Name: in.Name, Mode: in.Mode,
		Properties: in.Properties, StandalonePortsSupported: in.StandalonePortsSupported.v,
		PhysicalNetwork: in.PhysicalNetwork, Category: in.Category, Extra: in.Extra,
	})
	if err != nil {
		return err
	}
	sel, _ := pgTable.selectFields("", v, false, false)
	c.Location(baseURL(c) + "/v1/portgroups/" + g.UUID)
	return pgTable.send(c, g, sel, 201)
}

func (a *API) patchPortgroup(c *fiber.Ctx) error {
	v := ver(c)
	g, err := a.Ports.PatchPortgroup(c.UserContext(), c.Params("pg"), c.Body(), pgTable.gate(v))
	if err != nil {
		return err
	}
	sel, _ := pgTable.selectFields("", v, false, false)
	return pgTable.send(c, g, sel, 200)
}

func (a *API) deletePortgroup(c *fiber.Ctx) error {
	if err := a.Ports.DeletePortgroup(c.UserContext(), c.Params("pg")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
