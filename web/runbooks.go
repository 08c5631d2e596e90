package web

import (
	"context"
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
	row.Description = deref(r.Description)
	if r.Owner != nil {
		row.Owner = *r.Owner
	}
	row.Steps, row.Traits = runbookSteps(r.Steps), runbookTraits(r)
	return row
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
	reach, err := p.reaches(ctx, rs)
	if err != nil {
		return p.fail(c, err)
	}
	rows := make([]views.RunbookRow, len(rs))
	for i, r := range rs {
		rows[i] = runbookRow(r)
		rows[i].Editable = p.Guard.Allowed(ctx, runbooks.RuleUpdate, runbooks.Target(r.Runbook))
		rows[i].Carriers, rows[i].Eligible = reach[r.UUID].Carriers, reach[r.UUID].Eligible
	}
	canCreate := p.Guard.Allowed(ctx, runbooks.RuleCreate, createTarget(policies.PrincipalFrom(ctx)))
	if id := c.Query("saved"); id != "" {
		if i := slices.IndexFunc(rs, func(r *runbooks.Runbook) bool { return r.UUID == id }); i >= 0 {
			pg.Flash = savedMessage(rs[i]) + " " + p.whereItRuns(ctx, rs[i], reach[id])
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

// whereItRuns tells whoever saved r where it can run today and how it
// reaches more nodes: by adding its trait under "Choose where it runs"
// when the viewer may change their project's nodes' traits, else by
// asking those who may.
func (p *Portal) whereItRuns(ctx context.Context, r *runbooks.Runbook, n reach) string {
	traits := strings.Join(runbookTraits(r), " or ")
	now := fmt.Sprintf("No node of yours can run it yet: it runs on nodes that carry %s.", traits)
	switch {
	case n.Eligible > len(n.Names):
		now = fmt.Sprintf("It can run today on %d of your nodes, among them %s.", n.Eligible, strings.Join(n.Names, ", "))
	case n.Eligible == 1:
		now = "It can run today on 1 of your nodes: " + n.Names[0] + "."
	case n.Eligible > 1:
		now = fmt.Sprintf("It can run today on %d of your nodes: %s.", n.Eligible, strings.Join(n.Names, ", "))
	}
	project := ""
	if pr := policies.PrincipalFrom(ctx); pr != nil && !pr.System {
		project = pr.Project
	}
	if p.Guard.Allowed(ctx, nodes.RuleTraitsSet, policies.Target{NodeOwner: project}) {
		return now + " To run it on more, give them " + traits + " under “Choose where it runs”."
	}
	who := "an operator"
	if project != "" {
		who = "project " + project + "'s managers or admins, or an operator,"
	}
	return now + " To run it on more, ask " + who + " to give them " + traits + "."
}

// runnable fills the runbooks the viewer may see whose trait the node
// has, each with the reason it cannot run now ("" when it can): the
// node's state, a run in progress, a policy rule, or the node not
// accepting it. The server checks all of it again when one is run.
func (p *Portal) runnable(c *fiber.Ctx, d *views.NodeDetail, v *nodes.View) {
	ctx := c.UserContext()
	switch {
	case d.Busy:
		d.RunWhy = "Runbooks wait while the node is " + v.ProvisionState + "."
	case v.ProvisionState == nodes.StateManageable:
		d.RunVerb = "clean"
	case v.ProvisionState == nodes.StateActive:
		d.RunVerb = "service"
	default:
		d.RunWhy = "Runbooks run on manageable or active nodes; this node is " + v.ProvisionState + "."
	}
	if d.RunWhy == "" && !p.Guard.Allowed(ctx, conductor.RuleProvisionRunbook, nodes.Target(v.Node)) {
		d.RunWhy = p.denied(ctx, "may not run runbooks on this node", conductor.RuleProvisionRunbook)
	}
	rs, _, err := p.Runbooks.List(ctx, runbooks.ListOptions{Detail: true})
	if err != nil {
		return
	}
	rs = slices.DeleteFunc(rs, func(r *runbooks.Runbook) bool { return !runbooks.MatchesTraits(r.Runbook, v.Traits) })
	// Counted only while the node is idle: a busy node's page asks for
	// its status every second, and its runbooks wait anyway.
	var reach map[string]reach
	if !d.Busy {
		reach, _ = p.reaches(ctx, rs)
	}
	for _, r := range rs {
		row := runbookRow(r)
		if n, ok := reach[r.UUID]; ok {
			row.Eligible, row.Counted = n.Eligible, true
		}
		switch {
		case d.RunWhy != "":
			row.Why = d.RunWhy
		case !p.Guard.Allowed(ctx, runbooks.RuleUse, runbooks.Target(r.Runbook)):
			row.Why = p.denied(ctx, "may not use this runbook", runbooks.RuleUse)
		default:
			if err := runbooks.Accepts(r.Runbook, v.Node, v.Traits); err != nil {
				row.Why = "Not available: " + err.Error()
			}
		}
		d.Runnable = append(d.Runnable, row)
	}
}

// run is a node's last clean or service run, as the conductor recorded it.
type run struct {
	target, runbook string
	steps           []conductor.Step
}

func lastRun(v *nodes.View) (run, bool) {
	target, rb, steps, ok := conductor.LastRun(v.Node.DriverInternalInfo)
	return run{target, rb, steps}, ok
}

// what names the run for a confirmation: "runbook X" or its steps.
func (r run) what() string {
	if r.runbook != "" {
		return "run runbook " + r.runbook + " again"
	}
	names := make([]string, len(r.steps))
	for i, s := range r.steps {
		names[i] = s.Interface + "." + s.Step
	}
	return "run the steps " + strings.Join(names, ", ") + " again"
}

// recoverWhy is why the viewer may not recover v from its failed run r
// ("" when they may), as Ops.Recover decides it: those who may change
// the provision state and clear maintenance may; others under
// anvil:node:recover only for a runbook its publisher left retryable.
func (p *Portal) recoverWhy(ctx context.Context, v *nodes.View, r run) string {
	t := nodes.Target(v.Node)
	if v.Maintenance && !conductor.StepFault(v.Node) {
		return "The node is in maintenance for a reason other than its failed run; project " + orSystem(v.Owner) + " or an operator clears it first."
	}
	if p.Guard.Allowed(ctx, conductor.RuleProvision, t) && p.Guard.Allowed(ctx, nodes.RuleClearMaintenance, t) {
		return ""
	}
	if !p.Guard.Allowed(ctx, conductor.RuleRecover, t) {
		return p.denied(ctx, "may not recover the node", conductor.RuleRecover)
	}
	who := "project " + orSystem(v.Owner) + " or an operator can recover the node; “Ask the owner to look” tells them."
	if r.runbook == "" {
		return "The failed run was of explicit steps, not a runbook: " + who
	}
	rb, err := p.Runbooks.Get(ctx, r.runbook)
	if err != nil {
		return "Runbook " + r.runbook + " is gone or hidden from you: " + who
	}
	if !runbooks.Retryable(rb.Runbook) {
		return "Runbook " + r.runbook + " is not retryable: its publisher opted out; " + who
	}
	return ""
}

// retryWhy is why the viewer may not run r again ("" when they may): the
// rules the run needs when asked for alone.
func (p *Portal) retryWhy(ctx context.Context, v *nodes.View, r run) string {
	t := nodes.Target(v.Node)
	for _, rule := range conductor.ProvisionRules(r.target, r.runbook != "", r.runbook == "", false) {
		if !p.Guard.Allowed(ctx, rule, t) {
			return p.denied(ctx, "may not run this again", rule)
		}
	}
	if r.runbook == "" {
		return ""
	}
	rb, err := p.Runbooks.Get(ctx, r.runbook)
	if err != nil {
		return "Not available: runbook " + r.runbook + " is gone or hidden from you."
	}
	if !p.Guard.Allowed(ctx, runbooks.RuleUse, runbooks.Target(rb.Runbook)) {
		return p.denied(ctx, "may not use runbook "+r.runbook, runbooks.RuleUse)
	}
	if err := runbooks.Accepts(rb.Runbook, v.Node, v.Traits); err != nil {
		return "Not available: " + err.Error()
	}
	return ""
}

// nodeRetry runs a failed node's last run again (Ops.Recover): the node
// leaves the failed state and the maintenance its failure set, and the
// same runbook or steps start, all in one change.
func (p *Portal) nodeRetry(c *fiber.Ctx) error {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	r, ok := lastRun(v)
	if !ok || (v.ProvisionState != nodes.StateCleanFailed && v.ProvisionState != nodes.StateServiceFailed) {
		return p.status(c, "Nothing to retry: the node is "+v.ProvisionState+" and no failed run of it is recorded.")
	}
	err = p.Ops.Recover(ctx, v.UUID, conductor.RecoverRetry)
	switch {
	case err != nil && errs.Status(err) >= 500:
		return err
	case err != nil:
		return p.status(c, errText(err))
	}
	what := "the steps"
	if r.runbook != "" {
		what = "runbook " + r.runbook
	}
	return p.statusNote(c, "Started "+what+" again.")
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
