package api

import "github.com/gofiber/fiber/v2"

// validateNode serves GET /v1/nodes/{node}/validate: each interface's
// verdict on the node's stored settings.
func (a *API) validateNode(c *fiber.Ctx) error {
	res, err := a.Ops.Validate(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	return c.JSON(res)
}
