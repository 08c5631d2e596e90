package api

import (
	"slices"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/deploytemplates"
)

func (a *API) registerDeployTemplates(v1 fiber.Router) {
	dt := v1.Group("/deploy_templates", requireDeployTemplates)
	dt.Get("/", query(resListQuery...), a.listDeployTemplates)
	dt.Post("/", a.createDeployTemplate)
	dt.Get("/:dt", query(fieldsQuery...), a.getDeployTemplate)
	dt.Patch("/:dt", a.patchDeployTemplate)
	dt.Delete("/:dt", a.deleteDeployTemplate)
}

// requireDeployTemplates hides deploy templates from clients older than
// 1.55: a read is a 404, anything else a 405, as Ironic answers.
func requireDeployTemplates(c *fiber.Ctx) error {
	if ver(c) >= VerDeployTmpl {
		return c.Next()
	}
	if c.Method() == fiber.MethodGet {
		return fiber.ErrNotFound
	}
	return fiber.NewError(fiber.StatusMethodNotAllowed, "The API version does not allow deploy templates")
}

var deployTemplateFields = recTable[*deploytemplates.Template]{
	{"uuid", VerDeployTmpl, func(x *deploytemplates.Template) any { return x.UUID }},
	{"name", VerDeployTmpl, func(x *deploytemplates.Template) any { return x.Name }},
	{"steps", VerDeployTmpl, func(x *deploytemplates.Template) any {
		if x.Steps == nil {
			return []deploytemplates.Step{}
		}
		return x.Steps
	}},
	{"extra", VerDeployTmpl, func(x *deploytemplates.Template) any { return orEmpty(x.Extra) }},
	{"created_at", VerDeployTmpl, func(x *deploytemplates.Template) any { return stamp(x.CreatedAt) }},
	{"updated_at", VerDeployTmpl, func(x *deploytemplates.Template) any { return stampp(x.UpdatedAt) }},
}

var deployTemplateDefaults = []string{"uuid", "name"}

func deployTemplateJSON(c *fiber.Ctx, x *deploytemplates.Template, only []string) fiber.Map {
	return deployTemplateFields.render(x, only, ver(c), resLinks(c, "deploy_templates/"+x.UUID))
}

func (a *API) listDeployTemplates(c *fiber.Ctx) error {
	o, fs, err := resList(c, deployTemplateFields, deployTemplateDefaults, false, VerDeployTmpl, VerDeployTmpl)
	if err != nil {
		return err
	}
	ts, more, err := a.DeployTemplates.List(c.UserContext(), o, fs == nil || slices.Contains(fs, "steps"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(ts))
	last := ""
	for i, x := range ts {
		out[i], last = deployTemplateJSON(c, x, fs), x.UUID
	}
	return sendList(c, "deploy_templates", out, more, last)
}

func (a *API) createDeployTemplate(c *fiber.Ctx) error {
	var in deploytemplates.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	x, err := a.DeployTemplates.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/deploy_templates/" + x.UUID)
	return c.Status(201).JSON(deployTemplateJSON(c, x, nil))
}

func (a *API) getDeployTemplate(c *fiber.Ctx) error {
	fs, err := resFieldsOne(c, deployTemplateFields, VerDeployTmpl)
	if err != nil {
		return err
	}
	x, err := a.DeployTemplates.Get(c.UserContext(), c.Params("dt"))
	if err != nil {
		return err
	}
	return c.JSON(deployTemplateJSON(c, x, fs))
}

func (a *API) patchDeployTemplate(c *fiber.Ctx) error {
	x, err := a.DeployTemplates.Patch(c.UserContext(), c.Params("dt"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(deployTemplateJSON(c, x, nil))
}

func (a *API) deleteDeployTemplate(c *fiber.Ctx) error {
	if err := a.DeployTemplates.Delete(c.UserContext(), c.Params("dt")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
