package api

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/runbooks"
)

// Runbooks appear at 1.92 and their traits sub-resource at 1.112, as in
// Ironic.
func (a *API) registerRunbooks(v1 fiber.Router) {
	gate := since(VerRunbooks, "runbooks")
	traits := subSince(VerRunbookTraits, "runbook traits")
	v1.Get("/runbooks", gate, query(runbookQuery...), a.listRunbooks(false))
	v1.Get("/runbooks/detail", gate, query(runbookQuery...), a.listRunbooks(true))
	v1.Post("/runbooks", gate, a.createRunbook)
	v1.Get("/runbooks/:rb", gate, query(fieldsQuery...), a.getRunbook)
	v1.Patch("/runbooks/:rb", gate, a.patchRunbook)
	v1.Delete("/runbooks/:rb", gate, a.deleteRunbook)
	v1.Get("/runbooks/:rb/traits", gate, traits, query(), a.runbookTraits)
	v1.Put("/runbooks/:rb/traits", gate, traits, a.setRunbookTraits)
	v1.Delete("/runbooks/:rb/traits", gate, traits, a.clearRunbookTraits)
	v1.Put("/runbooks/:rb/traits/:trait", gate, traits, a.addRunbookTrait)
	v1.Delete("/runbooks/:rb/traits/:trait", gate, traits, a.deleteRunbookTrait)
}

func (a *API) runbookTraits(c *fiber.Ctx) error {
	ts, err := a.Runbooks.Traits(c.UserContext(), c.Params("rb"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"traits": ts})
}

// Runbook handlers find the runbook (404) and authorize (403) before they
// read the body (400), so a caller without the right learns nothing from
// a validation error.

func (a *API) setRunbookTraits(c *fiber.Ctx) error {
	if err := a.Runbooks.Authorize(c.UserContext(), c.Params("rb"), runbooks.RuleUpdate); err != nil {
		return err
	}
	var in struct {
		Traits []string `json:"traits"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := a.Runbooks.SetTraits(c.UserContext(), c.Params("rb"), in.Traits); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) clearRunbookTraits(c *fiber.Ctx) error {
	if err := a.Runbooks.SetTraits(c.UserContext(), c.Params("rb"), nil); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// editRunbookTraits reads the current traits and writes them back
// changed; the service validates and authorizes the write.
func (a *API) editRunbookTraits(c *fiber.Ctx, edit func([]string) ([]string, error)) error {
	if err := a.Runbooks.Authorize(c.UserContext(), c.Params("rb"), runbooks.RuleUpdate); err != nil {
		return err
	}
	ts, err := a.Runbooks.Traits(c.UserContext(), c.Params("rb"))
	if err != nil {
		return err
	}
	next, err := edit(ts)
	if err != nil {
		return err
	}
	if err := a.Runbooks.SetTraits(c.UserContext(), c.Params("rb"), next); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) addRunbookTrait(c *fiber.Ctx) error {
	t := c.Params("trait")
	return a.editRunbookTraits(c, func(ts []string) ([]string, error) { return append(ts, t), nil })
}

func (a *API) deleteRunbookTrait(c *fiber.Ctx) error {
	t := c.Params("trait")
	return a.editRunbookTraits(c, func(ts []string) ([]string, error) {
		i := slices.Index(ts, t)
		if i < 0 {
			return nil, errs.NotFound("Runbook %s has no trait %s.", c.Params("rb"), t)
		}
		return slices.Delete(slices.Clone(ts), i, i+1), nil
	})
}

var runbookFields = []string{"uuid", "name", "description", "public", "owner", "disable_ramdisk", "extra", "traits", "steps", "created_at", "updated_at"}

// runbookFieldSince is the version of each runbook field newer than
// runbooks themselves: description and traits came with 1.112.
var runbookFieldSince = map[string]Version{"description": VerRunbookTraits, "traits": VerRunbookTraits}

func runbookJSON(c *fiber.Ctx, r *runbooks.Runbook, fields []string) fiber.Map {
	b := baseURL(c)
	var owner any
	if r.Owner != nil {
		owner = *r.Owner
	}
	var updated any
	if r.UpdatedAt != nil {
		updated = r.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	traits := r.Traits
	if traits == nil {
		traits = []string{}
	}
	all := fiber.Map{
		"uuid": r.UUID, "name": r.Name, "public": r.Public, "owner": owner, "disable_ramdisk": r.DisableRamdisk,
		"extra": r.Extra, "created_at": r.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": updated,
	}
	// Traits and description are shown from 1.112, with the traits
	// sub-resource, as Ironic.
	if ver(c) >= VerRunbookTraits {
		all["traits"] = traits
		all["description"] = optString(r.Description)
	}
	if r.Steps != nil {
		all["steps"] = r.Steps
	}
	out := fiber.Map{}
	for _, f := range fields {
		if v, ok := all[f]; ok {
			out[f] = v
		}
	}
	out["links"] = []fiber.Map{link(b+"/v1/runbooks/"+r.UUID, "self"), link(b+"/runbooks/"+r.UUID, "bookmark")}
	return out
}

func runbookFieldList(c *fiber.Ctx, detail bool) ([]string, bool, error) {
	raw := c.Query("fields")
	if raw == "" {
		if detail {
			return runbookFields, true, nil
		}
		// Ironic's DEFAULT_RETURN_FIELDS for runbooks.
		return []string{"uuid", "name"}, false, nil
	}
	if detail {
		return nil, false, errs.BadRequest("fields", "fields cannot be combined with detail")
	}
	var out []string
	steps := false
	for _, f := range strings.Split(raw, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, k := range runbookFields {
			ok = ok || k == f
		}
		ok = ok && ver(c) >= runbookFieldSince[f]
		if !ok {
			return nil, false, errs.BadRequest("fields", "unknown runbook field %q", f)
		}
		steps = steps || f == "steps"
		out = append(out, f)
	}
	return out, steps, nil
}

func (a *API) listRunbooks(detailPath bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		detail := detailPath || c.QueryBool("detail")
		fields, withSteps, err := runbookFieldList(c, detail)
		if err != nil {
			return err
		}
		o := runbooks.ListOptions{Marker: c.Query("marker"), Detail: withSteps}
		if s := c.Query("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return errs.BadRequest("limit", "limit must be a positive integer, not %q", s)
			}
			o.Limit = n
		}
		if v := c.Query("owner"); v != "" {
			o.Owner = &v
		}
		if v := c.Query("public"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errs.BadRequest("public", "public must be true or false")
			}
			o.Public = &b
		}
		rs, more, err := a.Runbooks.List(c.UserContext(), o)
		if err != nil {
			return err
		}
		out := make([]fiber.Map, len(rs))
		for i, r := range rs {
			out[i] = runbookJSON(c, r, fields)
		}
		res := fiber.Map{"runbooks": out}
		if more {
			res["next"] = nextURL(c, rs[len(rs)-1].UUID)
		}
		return c.JSON(res)
	}
}

func (a *API) getRunbook(c *fiber.Ctx) error {
	r, err := a.Runbooks.Get(c.UserContext(), c.Params("rb"))
	if err != nil {
		return err
	}
	fields := runbookFields
	if raw := c.Query("fields"); raw != "" {
		if fields, _, err = runbookFieldList(c, false); err != nil {
			return err
		}
	}
	return c.JSON(runbookJSON(c, r, fields))
}

func (a *API) createRunbook(c *fiber.Ctx) error {
	if err := a.Runbooks.AuthorizeCreate(c.UserContext()); err != nil {
		return err
	}
	var in runbooks.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	// Before 1.112 Ironic's schema has no description and names a
	// runbook as a trait.
	v := ver(c)
	if in.Description != nil && v < VerRunbookTraits {
		return errs.BadRequest("description", "description requires API version %s or later", VerRunbookTraits)
	}
	in.TraitName = v < VerRunbookTraits
	r, err := a.Runbooks.Create(c.UserContext(), in)
	if err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/runbooks/"+r.UUID)
	return c.Status(201).JSON(runbookJSON(c, r, runbookFields))
}

// patchRunbook leaves the body to the service, which reads it only after
// finding and authorizing the runbook.
func (a *API) patchRunbook(c *fiber.Ctx) error {
	r, err := a.Runbooks.Patch(c.UserContext(), c.Params("rb"), c.Body(), ver(c) >= VerRunbookTraits)
	if err != nil {
		return err
	}
	return c.JSON(runbookJSON(c, r, runbookFields))
}

func (a *API) deleteRunbook(c *fiber.Ctx) error {
	if err := a.Runbooks.Delete(c.UserContext(), c.Params("rb")); err != nil {
		return err
	}
	return c.SendStatus(204)
}
