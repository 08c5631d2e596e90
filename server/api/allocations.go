package api

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/errs"
)

func (a *API) registerAllocations(v1 fiber.Router) {
	gate := since(VerAllocations, "allocations")
	v1.Get("/allocations", gate, query(allocQuery...), a.listAllocations)
	v1.Post("/allocations", gate, a.createAllocation)
	v1.Get("/allocations/:a", gate, query(fieldsQuery...), a.getAllocation)
	v1.Patch("/allocations/:a", gate, a.patchAllocation)
	v1.Delete("/allocations/:a", gate, a.deleteAllocation)
	sub := subSince(VerAllocations, "allocations")
	v1.Get("/nodes/:node/allocation", sub, query(fieldsQuery...), a.nodeAllocation)
	v1.Delete("/nodes/:node/allocation", sub, a.deleteNodeAllocation)
}

var allocationFields = []string{"uuid", "name", "resource_class", "traits", "candidate_nodes", "owner", "state",
	"node_uuid", "last_error", "extra", "created_at", "updated_at"}

// allocationFieldList parses ?fields=, naming an unknown field.
func allocationFieldList(c *fiber.Ctx) ([]string, error) {
	raw := c.Query("fields")
	if raw == "" {
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(raw, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allocationFields, f) {
			return nil, errs.BadRequest("fields", "Field(s) %q are not valid", f)
		}
		if f == "owner" && ver(c) < VerAllocOwner {
			return nil, requireVersion(ver(c), VerAllocOwner, "the owner field of allocations")
		}
		out = append(out, f)
	}
	return out, nil
}

// only keeps the fields asked for, and the links, as Ironic does.
func only(m fiber.Map, fields []string) fiber.Map {
	if fields == nil {
		return m
	}
	for k := range m {
		if k != "links" && !slices.Contains(fields, k) {
			delete(m, k)
		}
	}
	return m
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
	// A backfilled node without a resource class leaves the
	// allocation without one, which Ironic shows as null.
	var rc any
	if x.ResourceClass != "" {
		rc = x.ResourceClass
	}
	m := fiber.Map{
		"uuid": x.UUID, "name": opt(x.Name), "resource_class": rc, "traits": traits, "candidate_nodes": cands,
		"owner": opt(x.Owner), "state": x.State, "node_uuid": nodeUUID, "last_error": opt(x.LastError), "extra": x.Extra,
		"created_at": x.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": updated,
		"links": []fiber.Map{link(b+"/v1/allocations/"+x.UUID, "self"), link(b+"/allocations/"+x.UUID, "bookmark")},
	}
	// Ironic's hide_fields_in_newer_versions: owner came in 1.60.
	if ver(c) < VerAllocOwner {
		delete(m, "owner")
	}
	return m
}

func (a *API) listAllocations(c *fiber.Ctx) error {
	fields, err := allocationFieldList(c)
	if err != nil {
		return err
	}
	o := allocations.ListOptions{Marker: c.Query("marker"), SortKey: c.Query("sort_key"), SortDir: c.Query("sort_dir")}
	for name, dst := range map[string]**string{"state": &o.State, "node": &o.Node, "resource_class": &o.ResourceClass, "owner": &o.Owner} {
		if c.Context().QueryArgs().Has(name) {
			v := c.Query(name)
			*dst = &v
		}
	}
	if o.Owner != nil && ver(c) < VerAllocOwner {
		return requireVersion(ver(c), VerAllocOwner, "the owner filter on allocations")
	}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return errs.BadRequest("limit", "limit must be a non-negative integer, not %q", s)
		}
		o.Limit = n
	}
	as, more, err := a.Allocations.List(c.UserContext(), a.Nodes, o)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(as))
	for i, x := range as {
		out[i] = only(allocationJSON(c, x), fields)
	}
	res := fiber.Map{"allocations": out}
	if more {
		res["next"] = nextURL(c, as[len(as)-1].UUID)
	}
	return c.JSON(res)
}

func (a *API) createAllocation(c *fiber.Ctx) error {
	var in allocations.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Node != nil && ver(c) < VerAllocBackfill {
		return errs.BadRequest("node", "Cannot set node when creating an allocation in this API version; use %s or later", VerAllocBackfill)
	}
	if in.Owner != nil && ver(c) < VerAllocOwner {
		return requireVersion(ver(c), VerAllocOwner, "the owner field of allocations")
	}
	x, err := a.Allocations.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/allocations/"+x.UUID)
	return c.Status(201).JSON(allocationJSON(c, x))
}

func (a *API) getAllocation(c *fiber.Ctx) error {
	fields, err := allocationFieldList(c)
	if err != nil {
		return err
	}
	x, err := a.Allocations.Get(c.UserContext(), c.Params("a"))
	if err != nil {
		return err
	}
	return c.JSON(only(allocationJSON(c, x), fields))
}

func (a *API) nodeAllocation(c *fiber.Ctx) error {
	fields, err := allocationFieldList(c)
	if err != nil {
		return err
	}
	x, err := a.Allocations.ForNode(c.UserContext(), a.Nodes, c.Params("node"))
	if err != nil {
		return err
	}
	return c.JSON(only(allocationJSON(c, x), fields))
}

// patchAllocation changes name and extra; Ironic answers 405 below the
// version that added it.
func (a *API) patchAllocation(c *fiber.Ctx) error {
	if ver(c) < VerAllocUpdate {
		return fiber.NewError(fiber.StatusMethodNotAllowed, "The API version does not allow updating allocations; use "+VerAllocUpdate.String()+" or later")
	}
	x, err := a.Allocations.Update(c.UserContext(), c.Params("a"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(allocationJSON(c, x))
}

func (a *API) deleteNodeAllocation(c *fiber.Ctx) error {
	if err := a.Allocations.DeleteForNode(c.UserContext(), a.Nodes, c.Params("node")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) deleteAllocation(c *fiber.Ctx) error {
	if err := a.Allocations.Delete(c.UserContext(), c.Params("a")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
