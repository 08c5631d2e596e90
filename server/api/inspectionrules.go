package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/inspectionrules"
)

// Inspection rules appear at 1.96: older requests are refused (a read
// 404, anything else 405) as Ironic refuses them.
func (a *API) registerInspectionRules(v1 fiber.Router) {
	ir := v1.Group("/inspection_rules", requireInspectionRules)
	ir.Get("/", query(append([]string{"phase"}, resListQuery...)...), a.listInspectionRules)
	ir.Post("/", a.createInspectionRule)
	ir.Get("/:rule", query(fieldsQuery...), a.getInspectionRule)
	ir.Patch("/:rule", a.patchInspectionRule)
	ir.Delete("/:rule", a.deleteInspectionRule)
}

func requireInspectionRules(c *fiber.Ctx) error {
	if ver(c) >= VerInspectionRules {
		return c.Next()
	}
	const msg = "The API version does not allow inspection rules"
	if c.Method() == fiber.MethodGet {
		return errs.NotFound("%s", msg)
	}
	return fiber.NewError(fiber.StatusMethodNotAllowed, msg)
}

// hidden shows a sensitive rule's conditions and actions as null, as
// Ironic's rules_sanitize does.
func hidden[T any](r *inspectionrules.Rule, v T) any {
	if r.Sensitive {
		return nil
	}
	return v
}

var inspectionRuleFields = recTable[*inspectionrules.Rule]{
	{"uuid", VerInspectionRules, func(r *inspectionrules.Rule) any { return r.UUID }},
	{"description", VerInspectionRules, func(r *inspectionrules.Rule) any { return strOrNil(r.Description) }},
	{"priority", VerInspectionRules, func(r *inspectionrules.Rule) any { return r.Priority }},
	{"sensitive", VerInspectionRules, func(r *inspectionrules.Rule) any { return r.Sensitive }},
	{"phase", VerInspectionRules, func(r *inspectionrules.Rule) any { return r.Phase }},
	{"conditions", VerInspectionRules, func(r *inspectionrules.Rule) any {
		if r.Conditions == nil {
			return hidden(r, []any{})
		}
		return hidden(r, r.Conditions)
	}},
	{"actions", VerInspectionRules, func(r *inspectionrules.Rule) any { return hidden(r, r.Actions) }},
	{"created_at", VerInspectionRules, func(r *inspectionrules.Rule) any { return stamp(r.CreatedAt) }},
	{"updated_at", VerInspectionRules, func(r *inspectionrules.Rule) any { return stampp(r.UpdatedAt) }},
}

var inspectionRuleDefaults = []string{"uuid", "priority", "phase", "description"}

func inspectionRuleJSON(c *fiber.Ctx, r *inspectionrules.Rule, only []string) fiber.Map {
	return inspectionRuleFields.render(r, only, ver(c), resLinks(c, "inspection_rules/"+r.UUID))
}

func (a *API) listInspectionRules(c *fiber.Ctx) error {
	o, fs, err := resList(c, inspectionRuleFields, inspectionRuleDefaults, false, VerInspectionRules, VerInspectionRules)
	if err != nil {
		return err
	}
	rs, more, err := a.InspectionRules.List(c.UserContext(), o, c.Query("phase"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(rs))
	last := ""
	for i, r := range rs {
		out[i], last = inspectionRuleJSON(c, r, fs), r.UUID
	}
	return sendList(c, "inspection_rules", out, more, last)
}

func (a *API) createInspectionRule(c *fiber.Ctx) error {
	var in inspectionrules.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	r, err := a.InspectionRules.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/inspection_rules/" + r.UUID)
	return c.Status(201).JSON(inspectionRuleJSON(c, r, nil))
}

func (a *API) getInspectionRule(c *fiber.Ctx) error {
	fs, err := resFieldsOne(c, inspectionRuleFields, VerInspectionRules)
	if err != nil {
		return err
	}
	r, err := a.InspectionRules.Get(c.UserContext(), c.Params("rule"))
	if err != nil {
		return err
	}
	return c.JSON(inspectionRuleJSON(c, r, fs))
}

func (a *API) patchInspectionRule(c *fiber.Ctx) error {
	r, err := a.InspectionRules.Patch(c.UserContext(), c.Params("rule"), c.Body())
	if err != nil {
		return err
	}
	return c.JSON(inspectionRuleJSON(c, r, nil))
}

func (a *API) deleteInspectionRule(c *fiber.Ctx) error {
	if err := a.InspectionRules.Delete(c.UserContext(), c.Params("rule")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
