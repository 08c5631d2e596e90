package web

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/views"
)

// requestForm fills the pickers with the free nodes' counts; class is the
// class asked for, else the one with the most free nodes.
func (p *Portal) requestForm(c *fiber.Ctx, class string, chosen []string) (views.RequestForm, error) {
	av, err := p.Allocations.Available(c.UserContext())
	if err != nil {
		return views.RequestForm{}, err
	}
	f := views.RequestForm{Class: class, Chosen: map[string]bool{}}
	for _, rc := range slices.Sorted(maps.Keys(av.Classes)) {
		f.Classes = append(f.Classes, views.Choice{Value: rc, Available: av.Classes[rc]})
		if class == "" && av.Classes[rc] > av.Classes[f.Class] {
			f.Class = rc
		}
	}
	if class != "" && av.Classes[class] == 0 {
		// A class with no free node stays chosen, so a refusal reads
		// against what was asked.
		f.Classes = append(f.Classes, views.Choice{Value: class})
	}
	for _, t := range slices.Sorted(maps.Keys(av.Traits[f.Class])) {
		f.Traits = append(f.Traits, views.Choice{Value: t, Available: av.Traits[f.Class][t]})
	}
	for _, t := range chosen {
		f.Chosen[t] = true
	}
	return f, nil
}

func (p *Portal) requestNodePage(c *fiber.Ctx) error {
	pg, err := p.page(c, "Request a node")
	if err != nil {
		return err
	}
	f, err := p.requestForm(c, strings.TrimSpace(c.Query("resource_class")), nil)
	if err != nil {
		return err
	}
	return render(c, 200, views.RequestNode(pg, f))
}

// requestNode allocates and, once the conductor has reserved a node, sends
// the browser to it; a refusal shows the form again with the reason.
func (p *Portal) requestNode(c *fiber.Ctx) error {
	ctx := c.UserContext()
	in := allocations.Input{ResourceClass: strings.TrimSpace(c.FormValue("resource_class"))}
	for _, t := range c.Request().PostArgs().PeekMulti("traits") {
		if t := strings.TrimSpace(string(t)); t != "" {
			in.Traits = append(in.Traits, t)
		}
	}
	a, err := p.Allocations.Create(ctx, in)
	if err == nil {
		// The conductor settles the allocation in moments; the page
		// answers with the outcome rather than "allocating".
		a, err = p.Allocations.Await(ctx, a, 10*time.Second)
	}
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	sess := sessionOf(c)
	switch {
	case err != nil:
	case a.State == allocations.StateActive:
		sess.Flash = fmt.Sprintf("%s reserved for %s.", nameOr(a.NodeName, a.NodeUUID), views.OwnerText(deref(a.Owner)))
		if err := p.Sessions.Save(c, sess); err != nil {
			return err
		}
		return c.Redirect("/nodes/"+a.NodeUUID, fiber.StatusSeeOther)
	case a.State == allocations.StateAllocating:
		sess.Flash = "Still looking for a node: every suitable one is busy for now. The allocation below settles within 30 seconds."
		if err := p.Sessions.Save(c, sess); err != nil {
			return err
		}
		return c.Redirect("/allocations", fiber.StatusSeeOther)
	default:
		// The failed allocation holds nothing; it goes, so that "My
		// allocations" lists what is held rather than every miss.
		if derr := p.Allocations.Delete(ctx, a.UUID); derr != nil && errs.Status(derr) >= 500 {
			return derr
		}
		err = errs.Conflict("No node is free: %s", deref(a.LastError))
	}
	pg, perr := p.page(c, "Request a node")
	if perr != nil {
		return perr
	}
	pg.Error = err.Error()
	f, ferr := p.requestForm(c, in.ResourceClass, in.Traits)
	if ferr != nil {
		return ferr
	}
	return render(c, errs.Status(err), views.RequestNode(pg, f))
}

func nameOr(name, uuid string) string {
	if name != "" {
		return name
	}
	return uuid
}

// listed bounds "My allocations": a project holds a handful.
const listed = 500

func (p *Portal) allocationsPage(c *fiber.Ctx) error {
	pg, err := p.page(c, "My allocations")
	if err != nil {
		return err
	}
	as, more, err := p.Allocations.List(c.UserContext(), p.Nodes, allocations.ListOptions{Limit: listed, SortKey: "created_at", SortDir: "desc"})
	if err != nil {
		return p.fail(c, err)
	}
	rows := make([]views.AllocationRow, len(as))
	for i, a := range as {
		rows[i] = views.AllocationRow{UUID: a.UUID, Name: deref(a.Name), State: a.State, Owner: deref(a.Owner), NodeUUID: a.NodeUUID,
			NodeName: a.NodeName, Created: a.CreatedAt.UTC().Format(time.RFC3339), LastError: deref(a.LastError)}
	}
	return render(c, 200, views.Allocations(pg, rows, more))
}

// releaseAllocation is DELETE /v1/allocations/{id} for the browser: the
// same service call, so the same 404 for an allocation the viewer may not
// see and 403 for one it may see but not release.
func (p *Portal) releaseAllocation(c *fiber.Ctx) error {
	ctx := c.UserContext()
	a, err := p.Allocations.Get(ctx, c.Params("id"))
	if err == nil {
		err = p.Allocations.Delete(ctx, a.UUID)
	}
	if err != nil {
		return p.fail(c, err)
	}
	sess := sessionOf(c)
	sess.Flash = "Released " + nameOr(a.NodeName, a.UUID) + "."
	if a.NodeUUID == "" {
		sess.Flash = "Removed allocation " + nameOr(deref(a.Name), a.UUID) + "."
	}
	if err := p.Sessions.Save(c, sess); err != nil {
		return err
	}
	return c.Redirect("/allocations", fiber.StatusSeeOther)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
