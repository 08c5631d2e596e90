package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
)

// Rules for vendor passthru, as Ironic names them.
const (
	ruleNodeVendorPassthru   = "baremetal:node:vendor_passthru"
	ruleDriverVendorPassthru = "baremetal:driver:vendor_passthru"
)

// registerVendorPassthru serves vendor passthru as Ironic does for a
// driver whose vendor interface is no-vendor, which is every driver Anvil
// has: no methods, and a call to any method is a 400.
func (a *API) registerVendorPassthru(v1 fiber.Router) {
	v1.Get("/nodes/:node/vendor_passthru/methods", query(), a.nodeVendorMethods)
	v1.All("/nodes/:node/vendor_passthru", query("method"), a.nodeVendorCall)
	v1.Get("/drivers/:driver/vendor_passthru/methods", query(), a.driverVendorMethods)
	v1.All("/drivers/:driver/vendor_passthru", query("method"), a.driverVendorCall)
}

func (a *API) nodeVendorMethods(c *fiber.Ctx) error {
	if _, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), ruleNodeVendorPassthru); err != nil {
		return err
	}
	return c.JSON(fiber.Map{})
}

func (a *API) nodeVendorCall(c *fiber.Ctx) error {
	if _, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), ruleNodeVendorPassthru); err != nil {
		return err
	}
	return noVendorMethod(c)
}

func (a *API) driverVendorMethods(c *fiber.Ctx) error {
	if err := a.authorizeDriver(c, ruleDriverVendorPassthru); err != nil {
		return err
	}
	if err := knownDriver(c.Params("driver")); err != nil {
		return err
	}
	return c.JSON(fiber.Map{})
}

func (a *API) driverVendorCall(c *fiber.Ctx) error {
	if err := a.authorizeDriver(c, ruleDriverVendorPassthru); err != nil {
		return err
	}
	if err := knownDriver(c.Params("driver")); err != nil {
		return err
	}
	return noVendorMethod(c)
}

// noVendorMethod is the conductor's answer for a method the vendor
// interface does not route, in Ironic's words.
func noVendorMethod(c *fiber.Ctx) error {
	m := c.Query("method")
	if m == "" {
		return errs.BadRequest("method", "Method not specified")
	}
	return errs.BadRequest("method", "No handler for method %s", m)
}
