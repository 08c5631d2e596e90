package web

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

func runbookRow(r *runbooks.Runbook) views.RunbookRow {
	row := views.RunbookRow{UUID: r.UUID, Name: r.Name, Public: r.Public}
	if r.Owner != nil {
		row.Owner = *r.Owner
	}
	for _, s := range r.Steps {
		row.Steps = append(row.Steps, s.Interface+"."+s.Step+argsText(s.Args))
	}
	return row
}

func argsText(args map[string]any) string {
	if len(args) == 0 {
		return ""
	}
	var parts []string
	for k, v := range args {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

func (p *Portal) runbooksPage(c *fiber.Ctx) error {
	pg, err := p.page(c, "Runbooks")
	if err != nil {
		return err
	}
	rs, _, err := p.Runbooks.List(c.UserContext(), runbooks.ListOptions{Detail: true})
	if err != nil {
		return p.fail(c, err)
	}
	ctx := c.UserContext()
	rows := make([]views.RunbookRow, len(rs))
	for i, r := range rs {
		rows[i] = runbookRow(r)
		rows[i].Editable = p.Guard.Allowed(ctx, runbooks.RuleUpdate, runbooks.Target(r.Runbook))
	}
	canCreate := p.Guard.Allowed(ctx, runbooks.RuleCreate, createTarget(policies.PrincipalFrom(ctx)))
	if id := c.Query("saved"); id != "" {
		if r, err := p.Runbooks.Get(ctx, id); err == nil {
			pg.Flash = savedMessage(r)
		}
	}
	return render(c, 200, views.Runbooks(pg, rows, canCreate))
}

// savedMessage says who a saved runbook now reaches.
func savedMessage(r *runbooks.Runbook) string {
	switch {
	case r.Public:
		return fmt.Sprintf("Saved %s: public — every project may run it on nodes with its trait.", r.Name)
	case r.Owner != nil:
		return fmt.Sprintf("Saved %s: private to project %s — it runs on nodes that project owns.", r.Name, *r.Owner)
	}
	return fmt.Sprintf("Saved %s: private to the system — only system users may run it.", r.Name)
}

// runnable fills the runbooks the viewer may run on the node: use is
// allowed and the node accepts the runbook (its owner's or the system's,
// with a matching trait). The server checks all of it again when one is run.
func (p *Portal) runnable(c *fiber.Ctx, d *views.NodeDetail, v *nodes.View) {
	ctx := c.UserContext()
	switch v.ProvisionState {
	case nodes.StateManageable:
		d.RunVerb = "clean"
	case nodes.StateActive:
		d.RunVerb = "service"
	default:
		d.RunWhy = "Runbooks run on manageable or active nodes; this node is " + v.ProvisionState + "."
		return
	}
	if !p.Guard.Allowed(ctx, conductor.RuleProvisionRunbook, nodes.Target(v.Node)) {
		d.RunWhy = p.denied(ctx, "may not run runbooks on this node", conductor.RuleProvisionRunbook)
		return
	}
	rs, _, err := p.Runbooks.List(ctx, runbooks.ListOptions{Detail: true})
	if err != nil {
		return
	}
	for _, r := range rs {
		if runbooks.Accepts(r.Runbook, v.Node, v.Traits) == nil && p.Guard.Allowed(ctx, runbooks.RuleUse, runbooks.Target(r.Runbook)) {
			d.Runnable = append(d.Runnable, runbookRow(r))
		}
	}
}

func (p *Portal) nodeRunbook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	verb := "clean"
	if v.ProvisionState == nodes.StateActive {
		verb = "service"
	}
	err = p.Ops.Provision(ctx, v.UUID, conductor.ProvisionRequest{Target: verb, Runbook: c.FormValue("runbook")})
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	return p.status(c, errText(err))
}
