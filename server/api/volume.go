package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/volume"
)

func (a *API) registerVolume(v1 fiber.Router) {
	vol := v1.Group("/volume", requireVolume)
	vol.Get("/", query(), a.volumeRoot)
	vol.Get("/connectors", query(volumeListQuery...), a.listConnectors)
	vol.Post("/connectors", a.createConnector)
	vol.Get("/connectors/:vc", query(fieldsQuery...), a.getConnector)
	vol.Patch("/connectors/:vc", a.patchConnector)
	vol.Delete("/connectors/:vc", a.deleteConnector)
	vol.Get("/targets", query(volumeListQuery...), a.listTargets)
	vol.Post("/targets", a.createTarget)
	vol.Get("/targets/:vt", query(fieldsQuery...), a.getTarget)
	vol.Patch("/targets/:vt", a.patchTarget)
	vol.Delete("/targets/:vt", a.deleteTarget)
	v1.Get("/nodes/:node/volume", requireVolume, query(), a.volumeRoot)
	v1.Get("/nodes/:node/volume/connectors", requireVolume, query(resListQuery...), a.listConnectors)
	v1.Get("/nodes/:node/volume/targets", requireVolume, query(resListQuery...), a.listTargets)
}

var volumeListQuery = append([]string{"node"}, resListQuery...)

// requireVolume hides /volume from clients older than 1.32, as Ironic.
func requireVolume(c *fiber.Ctx) error {
	if ver(c) < VerVolume {
		return fiber.ErrNotFound
	}
	return c.Next()
}

// volumeRoot serves /v1/volume and /v1/nodes/{node}/volume: links to the
// connectors and targets.
func (a *API) volumeRoot(c *fiber.Ctx) error {
	path := "volume/"
	if id := c.Params("node"); id != "" {
		if _, err := a.Nodes.Authorized(c.UserContext(), id, volume.RuleGet); err != nil {
			return err
		}
		path = "nodes/" + id + "/volume/"
	} else if err := a.Guard.Authorize(c.UserContext(), volume.RuleGet, "volume", "", policies.Target{}); err != nil {
		return err
	}
	return c.JSON(fiber.Map{
		"links":      resLinks(c, path),
		"connectors": resLinks(c, path+"connectors"),
		"targets":    resLinks(c, path+"targets"),
	})
}

var connectorFields = recTable[*volume.Connector]{
	{"uuid", VerVolume, func(x *volume.Connector) any { return x.UUID }},
	{"node_uuid", VerVolume, func(x *volume.Connector) any { return x.NodeUUID }},
	{"type", VerVolume, func(x *volume.Connector) any { return x.Type }},
	{"connector_id", VerVolume, func(x *volume.Connector) any { return x.ConnectorID }},
	{"extra", VerVolume, func(x *volume.Connector) any { return orEmpty(x.Extra) }},
	{"created_at", VerVolume, func(x *volume.Connector) any { return stamp(x.CreatedAt) }},
	{"updated_at", VerVolume, func(x *volume.Connector) any { return stampp(x.UpdatedAt) }},
}

var connectorDefaults = []string{"uuid", "node_uuid", "type", "connector_id"}

func connectorJSON(c *fiber.Ctx, x *volume.Connector, only []string) fiber.Map {
	return connectorFields.render(x, only, ver(c), resLinks(c, "volume/connectors/"+x.UUID))
}

// volumeList reads a volume list's options: the node from the path or
// ?node=, paging, and the fields. Ironic accepts ?detail= on these lists
// from 1.32.
func volumeList[T any](c *fiber.Ctx, t recTable[T], defaults []string) (volume.ListOptions, []string, error) {
	o, fs, err := resList(c, t, defaults, false, VerVolume, VerVolume)
	lo := volume.ListOptions{Options: o, Node: c.Query("node")}
	if id := c.Params("node"); id != "" {
		lo.Node = id
	}
	return lo, fs, err
}

func (a *API) listConnectors(c *fiber.Ctx) error {
	o, fs, err := volumeList(c, connectorFields, connectorDefaults)
	if err != nil {
		return err
	}
	xs, more, err := a.Volume.ListConnectors(c.UserContext(), o)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(xs))
	last := ""
	for i, x := range xs {
		out[i], last = connectorJSON(c, x, fs), x.UUID
	}
	return sendList(c, "connectors", out, more, last)
}

func (a *API) createConnector(c *fiber.Ctx) error {
	var in volume.ConnectorInput
	if err := bind(c, &in); err != nil {
		return err
	}
	for f, v := range map[string]string{"node_uuid": in.NodeUUID, "type": in.Type, "connector_id": in.ConnectorID} {
		if v == "" {
			return errs.BadRequest(f, "%s is a required property", f)
		}
	}
	x, err := a.Volume.CreateConnector(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/volume/connectors/" + x.UUID)
	return c.Status(201).JSON(connectorJSON(c, x, nil))
}

func (a *API) getConnector(c *fiber.Ctx) error {
	fs, err := resFieldsOne(c, connectorFields, VerVolume)
	if err != nil {
		return err
	}
	x, err := a.Volume.GetConnector(c.UserContext(), c.Params("vc"))
	if err != nil {
		return err
	}
	return c.JSON(connectorJSON(c, x, fs))
}

func (a *API) patchConnector(c *fiber.Ctx) error {
	x, err := a.Volume.PatchConnector(c.UserContext(), c.Params("vc"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(connectorJSON(c, x, nil))
}

func (a *API) deleteConnector(c *fiber.Ctx) error {
	if err := a.Volume.DeleteConnector(c.UserContext(), c.Params("vc")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

var targetFields = recTable[*volume.Target]{
	{"uuid", VerVolume, func(x *volume.Target) any { return x.UUID }},
	{"node_uuid", VerVolume, func(x *volume.Target) any { return x.NodeUUID }},
	{"volume_type", VerVolume, func(x *volume.Target) any { return x.VolumeType }},
	{"boot_index", VerVolume, func(x *volume.Target) any { return x.BootIndex }},
	{"volume_id", VerVolume, func(x *volume.Target) any { return x.VolumeID }},
	{"properties", VerVolume, func(x *volume.Target) any { return orEmpty(x.Properties) }},
	{"extra", VerVolume, func(x *volume.Target) any { return orEmpty(x.Extra) }},
	{"created_at", VerVolume, func(x *volume.Target) any { return stamp(x.CreatedAt) }},
	{"updated_at", VerVolume, func(x *volume.Target) any { return stampp(x.UpdatedAt) }},
}

var targetDefaults = []string{"uuid", "node_uuid", "volume_type", "boot_index", "volume_id"}

func targetJSON(c *fiber.Ctx, x *volume.Target, only []string) fiber.Map {
	return targetFields.render(x, only, ver(c), resLinks(c, "volume/targets/"+x.UUID))
}

func (a *API) listTargets(c *fiber.Ctx) error {
	o, fs, err := volumeList(c, targetFields, targetDefaults)
	if err != nil {
		return err
	}
	xs, more, err := a.Volume.ListTargets(c.UserContext(), o)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(xs))
	last := ""
	for i, x := range xs {
		out[i], last = targetJSON(c, x, fs), x.UUID
	}
	return sendList(c, "targets", out, more, last)
}

func (a *API) createTarget(c *fiber.Ctx) error {
	var in volume.TargetInput
	if err := bind(c, &in); err != nil {
		return err
	}
	for f, v := range map[string]string{"node_uuid": in.NodeUUID, "volume_type": in.VolumeType, "volume_id": in.VolumeID} {
		if v == "" {
			return errs.BadRequest(f, "%s is a required property", f)
		}
	}
	x, err := a.Volume.CreateTarget(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/volume/targets/" + x.UUID)
	return c.Status(201).JSON(targetJSON(c, x, nil))
}

func (a *API) getTarget(c *fiber.Ctx) error {
	fs, err := resFieldsOne(c, targetFields, VerVolume)
	if err != nil {
		return err
	}
	x, err := a.Volume.GetTarget(c.UserContext(), c.Params("vt"))
	if err != nil {
		return err
	}
	return c.JSON(targetJSON(c, x, fs))
}

func (a *API) patchTarget(c *fiber.Ctx) error {
	x, err := a.Volume.PatchTarget(c.UserContext(), c.Params("vt"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(targetJSON(c, x, nil))
}

func (a *API) deleteTarget(c *fiber.Ctx) error {
	if err := a.Volume.DeleteTarget(c.UserContext(), c.Params("vt")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
