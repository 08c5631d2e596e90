package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/chassis"
)

func (a *API) registerChassis(v1 fiber.Router) {
	v1.Get("/chassis", query(resListQuery...), a.listChassis(false))
	v1.Get("/chassis/detail", query("limit", "marker", "sort_key", "sort_dir"), a.listChassis(true))
	v1.Post("/chassis", a.createChassis)
	v1.Get("/chassis/:chassis", query(fieldsQuery...), a.getChassis)
	v1.Patch("/chassis/:chassis", a.patchChassis)
	v1.Delete("/chassis/:chassis", a.deleteChassis)
	// A chassis' nodes are the node list with the chassis from the path
	// as its chassis_uuid filter, as Ironic serves them.
	v1.Get("/chassis/:chassis/nodes", query(chassisNodesQuery...), a.listNodes(false))
	v1.Get("/chassis/:chassis/nodes/detail", query(chassisNodesQuery...), a.listNodes(true))
}

// chassisNodesQuery is the node list's, less chassis_uuid, which the path
// gives.
var chassisNodesQuery = func() []string {
	var out []string
	for _, q := range nodeListQuery {
		if q != "chassis_uuid" {
			out = append(out, q)
		}
	}
	return out
}()

// chassisFields is the chassis JSON; every field is as old as the API.
var chassisFields = recTable[*ent.Chassis]{
	{"uuid", VerMin, func(x *ent.Chassis) any { return x.UUID }},
	{"description", VerMin, func(x *ent.Chassis) any { return strOrNil(x.Description) }},
	{"extra", VerMin, func(x *ent.Chassis) any { return orEmpty(x.Extra) }},
	{"created_at", VerMin, func(x *ent.Chassis) any { return stamp(x.CreatedAt) }},
	{"updated_at", VerMin, func(x *ent.Chassis) any { return stampp(x.UpdatedAt) }},
}

var chassisDefaults = []string{"uuid", "description"}

func chassisJSON(c *fiber.Ctx, x *ent.Chassis, only []string) fiber.Map {
	m := chassisFields.render(x, only, ver(c), resLinks(c, "chassis/"+x.UUID))
	if only == nil {
		m["nodes"] = resLinks(c, "chassis/"+x.UUID+"/nodes")
	}
	return m
}

func (a *API) listChassis(detail bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		o, fs, err := resList(c, chassisFields, chassisDefaults, detail, VerFields, VerDetailQuery)
		if err != nil {
			return err
		}
		cs, more, err := a.Chassis.List(c.UserContext(), o)
		if err != nil {
			return err
		}
		out := make([]fiber.Map, len(cs))
		for i, x := range cs {
			out[i] = chassisJSON(c, x, fs)
		}
		last := ""
		if len(cs) > 0 {
			last = cs[len(cs)-1].UUID
		}
		return sendList(c, "chassis", out, more, last)
	}
}

func (a *API) createChassis(c *fiber.Ctx) error {
	var in chassis.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	x, err := a.Chassis.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/chassis/" + x.UUID)
	return c.Status(201).JSON(chassisJSON(c, x, nil))
}

func (a *API) getChassis(c *fiber.Ctx) error {
	fs, err := resFieldsOne(c, chassisFields, VerFields)
	if err != nil {
		return err
	}
	x, err := a.Chassis.Get(c.UserContext(), c.Params("chassis"))
	if err != nil {
		return err
	}
	return c.JSON(chassisJSON(c, x, fs))
}

func (a *API) patchChassis(c *fiber.Ctx) error {
	x, err := a.Chassis.Patch(c.UserContext(), c.Params("chassis"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(chassisJSON(c, x, nil))
}

func (a *API) deleteChassis(c *fiber.Ctx) error {
	if err := a.Chassis.Delete(c.UserContext(), c.Params("chassis")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
