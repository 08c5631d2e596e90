package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/wipes"
)

// registerWipes mounts wipe records (issue #40), an Anvil extension at
// every version: Ironic keeps no wipe records, so no microversion gates
// them. They are read-only: the conductor writes them.
func (a *API) registerWipes(v1 fiber.Router) {
	v1.Get("/wipe_records", query("node", "limit"), a.listWipes)
	v1.Get("/wipe_records/:record", query(), a.getWipe)
}

// wipeFields is a wipe record's JSON.
var wipeFields = recTable[*ent.WipeRecord]{
	{"uuid", VerMin, func(x *ent.WipeRecord) any { return x.UUID }},
	{"node_uuid", VerMin, func(x *ent.WipeRecord) any { return x.NodeUUID }},
	{"node_name", VerMin, func(x *ent.WipeRecord) any { return strOrNil(x.NodeName) }},
	{"owner", VerMin, func(x *ent.WipeRecord) any { return strOrNil(x.Owner) }},
	{"lessee", VerMin, func(x *ent.WipeRecord) any { return strOrNil(x.Lessee) }},
	{"allocation", VerMin, func(x *ent.WipeRecord) any { return strOrNil(x.Allocation) }},
	{"allocation_owner", VerMin, func(x *ent.WipeRecord) any { return strOrNil(x.AllocationOwner) }},
	{"policy", VerMin, func(x *ent.WipeRecord) any { return x.Policy }},
	{"result", VerMin, func(x *ent.WipeRecord) any { return x.Result }},
	{"message", VerMin, func(x *ent.WipeRecord) any { return x.Message }},
	{"disks", VerMin, func(x *ent.WipeRecord) any { return x.Disks }},
	{"agent_log", VerMin, func(x *ent.WipeRecord) any { return x.AgentLog }},
	{"conductor", VerMin, func(x *ent.WipeRecord) any { return x.Conductor }},
	{"started_at", VerMin, func(x *ent.WipeRecord) any { return stamp(x.StartedAt) }},
	{"finished_at", VerMin, func(x *ent.WipeRecord) any { return stamp(x.FinishedAt) }},
	{"duration_seconds", VerMin, func(x *ent.WipeRecord) any { return x.FinishedAt.Sub(x.StartedAt).Seconds() }},
}

func wipeJSON(c *fiber.Ctx, x *ent.WipeRecord) fiber.Map {
	return wipeFields.render(x, nil, ver(c), resLinks(c, "wipe_records/"+x.UUID))
}

func (a *API) listWipes(c *fiber.Ctx) error {
	o := wipes.ListOptions{Node: c.Query("node")}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return errs.BadRequest("limit", "limit must be a positive integer, not %q", l)
		}
		o.Limit = n
	}
	rs, err := a.Wipes.List(c.UserContext(), o)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(rs))
	for i, r := range rs {
		out[i] = wipeJSON(c, r)
	}
	return c.JSON(fiber.Map{"wipe_records": out})
}

func (a *API) getWipe(c *fiber.Ctx) error {
	r, err := a.Wipes.Get(c.UserContext(), c.Params("record"))
	if err != nil {
		return err
	}
	return c.JSON(wipeJSON(c, r))
}
