package api

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/errs"
)

func (a *API) registerAllocations(v1 fiber.Router) {
	v1.Get("/allocations", query(allocQuery...), a.listAllocations)
	v1.Post("/allocations", a.createAllocation)
	v1.Get("/allocations/:a", query(), a.getAllocation)
	v1.Delete("/allocations/:a", a.deleteAllocation)
	v1.Get("/nodes/:node/allocation", query(), a.nodeAllocation)
}

func allocationJSON(c *fiber.Ctx, x *allocations.Allocation) fiber.Map {
	b := baseURL(c)
	opt := func(s *string) any {
		if s == nil {
			return nil
		}
		return *s
	}
	var nodeUUID, updated any
	if x.NodeUUID != "" {
		nodeUUID = x.NodeUUID
	}
	if x.UpdatedAt != nil {
		updated = x.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	traits, cands := x.Traits, x.CandidateNodes
	if traits == nil {
		traits = []string{}
	}
	if cands == nil {
		cands = []string{}
	}
	return fiber.Map{
		"uuid": x.UUID, "name": opt(x.Name), "resource_class": x.ResourceClass, "traits": traits, "candidate_nodes": cands,
		"owner": opt(x.Owner), "state": x.State, "node_uuid": nodeUUID, "last_error": opt(x.LastError), "extra": x.Extra,
		"created_at": x.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": updated,
		"links": []fiber.Map{link(b+"/v1/allocations/"+x.UUID, "self"), link(b+"/allocations/"+x.UUID, "bookmark")},
	}
}

func (a *API) listAllocations(c *fiber.Ctx) error {
	as, err := a.Allocations.List(c.UserContext(), c.Query("state"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(as))
	for i, x := range as {
		out[i] = allocationJSON(c, x)
	}
	return c.JSON(fiber.Map{"allocations": out})
}

func (a *API) createAllocation(c *fiber.Ctx) error {
	if ver(c) < VerAllocations {
		return errs.NotAcceptable("allocations require API version %s or later", VerAllocations)
	}
	var in allocations.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	x, err := a.Allocations.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/allocations/"+x.UUID)
	return c.Status(201).JSON(allocationJSON(c, x))
}

func (a *API) getAllocation(c *fiber.Ctx) error {
	x, err := a.Allocations.Get(c.UserContext(), c.Params("a"))
	if err != nil {
		return err
	}
	return c.JSON(allocationJSON(c, x))
}

func (a *API) nodeAllocation(c *fiber.Ctx) error {
	x, err := a.Allocations.ForNode(c.UserContext(), a.Nodes, c.Params("node"))
	if err != nil {
		return err
	}
	return c.JSON(allocationJSON(c, x))
}

func (a *API) deleteAllocation(c *fiber.Ctx) error {
	if err := a.Allocations.Delete(c.UserContext(), c.Params("a")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
