package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/nodes"
)

func (a *API) registerShards(v1 fiber.Router) {
	// Ironic's shard query schema allows any argument and ignores it.
	v1.Get("/shards", subSince(VerShard, "shards"), a.listShards)
	v1.Get("/shards/:shard", subSince(VerShard, "shards"), func(*fiber.Ctx) error { return fiber.ErrNotFound })
	v1.Get("/nodes/:node/children", subSince(VerParentNode, "child nodes"), query(), a.listChildren)
}

func (a *API) listShards(c *fiber.Ctx) error {
	if err := a.Guard.Authorize(c.UserContext(), nodes.RuleShardsGet, "shard", "", policies.Target{}); err != nil {
		return err
	}
	s, err := a.Nodes.Shards(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"shards": s})
}

func (a *API) listChildren(c *fiber.Ctx) error {
	parent, kids, err := a.Nodes.Children(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{
		"children": kids,
		"links":    link(baseURL(c)+"/v1/nodes?parent_node="+parent, "children"),
	})
}
