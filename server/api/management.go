package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/bmc"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
)

// Versions of the management endpoints, as Ironic added them.
const (
	VerInjectNMI      Version = 29 // PUT management/inject_nmi
	VerIndicators     Version = 63 // management/indicators
	VerChangeBootMode Version = 76 // PUT states/boot_mode and states/secure_boot
)

func (a *API) registerManagement(v1 fiber.Router) {
	// Their version is checked after authorization, as Ironic does: a
	// reader of an older version is told 403, not that the route is new.
	v1.Put("/nodes/:node/states/boot_mode", a.setBootMode)
	v1.Put("/nodes/:node/states/secure_boot", a.setSecureBoot)
	v1.Get("/nodes/:node/management/indicators", subSince(VerIndicators, "indicators"), query(), a.listIndicators)
	v1.Get("/nodes/:node/management/indicators/:indicator", subSince(VerIndicators, "indicators"), query(), a.getIndicator)
	v1.Put("/nodes/:node/management/indicators/:indicator", subSince(VerIndicators, "indicators"), a.setIndicator)
	v1.Put("/nodes/:node/management/inject_nmi", subSince(VerInjectNMI, "inject_nmi"), a.injectNMI)
	v1.Get("/nodes/:node/states/console", query(), a.getConsole)
	// The path ironic-tempest-plugin's get_console calls, which Ironic's
	// object routing also answers.
	v1.Get("/nodes/states/console/:node", query(), a.getConsole)
	v1.Put("/nodes/:node/states/console", a.setConsole)
	v1.Get("/nodes/:node/screenshot", query(), a.getScreenshot)
}

// getScreenshot serves the node's last console screenshot as the image
// it is (checked when it was kept), never sniffed as anything else.
func (a *API) getScreenshot(c *fiber.Ctx) error {
	s, err := a.Ops.Screenshot(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	c.Set("Content-Type", map[string]string{"png": "image/png", "jpg": "image/jpeg"}[s.FileType])
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Last-Modified", s.CreatedAt.UTC().Format(http.TimeFormat))
	return c.Send(s.Image)
}

// getConsole answers Ironic's {console_enabled, console_info}.
func (a *API) getConsole(c *fiber.Ctx) error {
	on, info, err := a.Ops.ConsoleState(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	var ci any
	if info != nil {
		ci = info
	}
	return c.JSON(fiber.Map{"console_enabled": on, "console_info": ci})
}

func (a *API) setConsole(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetConsole); err != nil {
		return err
	}
	var in struct {
		Enabled *bool `json:"enabled"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Enabled == nil {
		return errs.BadRequest("enabled", "enabled is required: true or false")
	}
	if err := a.Ops.SetConsole(c.UserContext(), c.Params("node"), *in.Enabled); err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/nodes/"+c.Params("node")+"/states/console")
	return c.SendStatus(202)
}

func (a *API) statesAccepted(c *fiber.Ctx) error {
	c.Set("Location", baseURL(c)+"/v1/nodes/"+c.Params("node")+"/states")
	return c.SendStatus(202)
}

// bootModeVersion is Ironic's 404 for a boot mode or secure boot change
// asked below the version that added them.
func bootModeVersion(c *fiber.Ctx) error {
	if ver(c) < VerChangeBootMode {
		return errs.NotFound("This endpoint is supported starting with the API version %s", VerChangeBootMode)
	}
	return nil
}

func (a *API) setBootMode(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetBootMode); err != nil {
		return err
	}
	if err := bootModeVersion(c); err != nil {
		return err
	}
	var in struct {
		Target *string `json:"target"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Target == nil {
		return errs.BadRequest("target", "target is required: uefi or bios")
	}
	if err := a.Ops.SetBootMode(c.UserContext(), c.Params("node"), *in.Target); err != nil {
		return err
	}
	return a.statesAccepted(c)
}

func (a *API) setSecureBoot(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetSecureBoot); err != nil {
		return err
	}
	if err := bootModeVersion(c); err != nil {
		return err
	}
	var in struct {
		Target *bool `json:"target"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Target == nil {
		return errs.BadRequest("target", "target is required: true or false")
	}
	if err := a.Ops.SetSecureBoot(c.UserContext(), c.Params("node"), *in.Target); err != nil {
		return err
	}
	return a.statesAccepted(c)
}

// indicatorJSON is Ironic's indicator: name is "<id>@<component>", the
// name its own URL takes.
func indicatorJSON(c *fiber.Ctx, node string, l bmc.Indicator) fiber.Map {
	name := l.ID + "@" + l.Component
	path := "/nodes/" + node + "/management/indicators/" + name
	return fiber.Map{"name": name, "component": l.Component, "readonly": l.ReadOnly, "states": l.States,
		"links": []fiber.Map{link(baseURL(c)+"/v1"+path, "self"), link(baseURL(c)+path, "bookmark")}}
}

func (a *API) listIndicators(c *fiber.Ctx) error {
	n, list, err := a.Ops.Indicators(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(list))
	for i, l := range list {
		out[i] = indicatorJSON(c, n.UUID, l)
	}
	return c.JSON(fiber.Map{"indicators": out})
}

func (a *API) getIndicator(c *fiber.Ctx) error {
	l, err := a.Ops.Indicator(c.UserContext(), c.Params("node"), c.Params("indicator"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"state": l.State})
}

func (a *API) setIndicator(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetIndicator); err != nil {
		return err
	}
	var in struct {
		State *string `json:"state"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.State == nil {
		return errs.BadRequest("state", "state is required: on, off or blinking")
	}
	if err := a.Ops.SetIndicator(c.UserContext(), c.Params("node"), c.Params("indicator"), *in.State); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// injectNMI takes no body; Ironic's clients send none or {}.
func (a *API) injectNMI(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleInjectNMI); err != nil {
		return err
	}
	if len(c.Body()) > 0 {
		var in struct{}
		if err := bind(c, &in); err != nil {
			return err
		}
	}
	if err := a.Ops.InjectNMI(c.UserContext(), c.Params("node")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
