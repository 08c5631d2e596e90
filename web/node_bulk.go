package web

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/bulkrun"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// A bulk action takes at most this many nodes, a page of the API's
// longest list.
const bulkMax = nodes.MaxLimit

var bulkActions = []string{"runbook", "power", "maintenance"}

// started is the result of an action the conductor goes on with after
// the request; the results page settles it once the node is done.
const started = "Started"

// bulkArgs are a bulk action and its arguments as the forms post them.
type bulkArgs struct {
	action, runbook, power, maintenance, reason string
}

func bulkArgsOf(c *fiber.Ctx) bulkArgs {
	return bulkArgs{action: c.FormValue("action"), runbook: c.FormValue("runbook"), power: c.FormValue("power"),
		maintenance: c.FormValue("maintenance"), reason: strings.TrimSpace(c.FormValue("reason"))}
}

// selection reads the selected nodes the viewer may see, with traits:
// the ids posted, or with "all" every node the list's filter matches. Ids
// of nodes that do not exist and of nodes the viewer may not see are
// counted alike and otherwise dropped, so a selection learns nothing about
// another project's nodes.
func (p *Portal) selection(c *fiber.Ctx) (found []*nodes.View, missing, capped int, err error) {
	ctx := c.UserContext()
	var o nodes.ListOptions
	var ids []string
	if c.FormValue("all") == "1" {
		v, _ := url.ParseQuery(c.FormValue("filter"))
		q := parseListQuery(v)
		o = q.options()
		o.Numbered = true
	} else {
		for _, raw := range c.Request().PostArgs().PeekMulti("node") {
			id := strings.ToLower(string(raw))
			if !nodes.IsUUID(id) {
				missing++
				continue
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		if len(ids) > bulkMax {
			return nil, 0, 0, errs.BadRequest("node", "a bulk action takes at most %d nodes; %d were selected", bulkMax, len(ids))
		}
		if len(ids) == 0 {
			return nil, missing, 0, nil
		}
		o = nodes.ListOptions{UUIDs: ids, SortKey: "name", Numbered: true}
	}
	o.Limit, o.WithTraits = bulkMax, true
	page, err := p.Nodes.List(ctx, o)
	if err != nil {
		return nil, 0, 0, err
	}
	if ids != nil {
		missing += len(ids) - len(page.Nodes)
	}
	if page.More {
		if capped, err = p.Nodes.Count(ctx, o); err != nil {
			return nil, 0, 0, err
		}
	}
	return page.Nodes, missing, capped, nil
}

// bulkRunbooks are the runbooks the viewer may use.
func (p *Portal) bulkRunbooks(c *fiber.Ctx) ([]*runbooks.Runbook, error) {
	ctx := c.UserContext()
	rs, _, err := p.Runbooks.List(ctx, runbooks.ListOptions{})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(rs, func(r *runbooks.Runbook) bool {
		return !p.Guard.Allowed(ctx, runbooks.RuleUse, runbooks.Target(r.Runbook))
	}), nil
}

// plan decides the bulk page: the arguments' choices and, once they are
// complete, which nodes are eligible and why the others are not.
func (p *Portal) plan(c *fiber.Ctx, a bulkArgs, sel []*nodes.View) (views.Bulk, *runbooks.Runbook, error) {
	b := views.Bulk{Action: a.action, Runbook: a.runbook, Power: a.power, Maintenance: a.maintenance, Reason: a.reason}
	var rb *runbooks.Runbook
	switch a.action {
	case "runbook":
		rs, err := p.bulkRunbooks(c)
		if err != nil {
			return b, nil, err
		}
		reach, err := p.reaches(c.UserContext(), rs)
		if err != nil {
			return b, nil, err
		}
		for _, r := range rs {
			b.Runbooks = append(b.Runbooks, views.RunbookRow{UUID: r.UUID, Name: r.Name, Eligible: reach[r.UUID].Eligible, Counted: true})
			if r.Name == a.runbook {
				rb = r
			}
		}
		b.Ready, b.What = rb != nil, "Run "+a.runbook
	case "power":
		b.Ready = slices.Contains([]string{"power on", "power off", "rebooting"}, a.power)
		b.What = map[string]string{"power on": "Power on", "power off": "Power off", "rebooting": "Reboot"}[a.power]
	case "maintenance":
		b.Ready = a.maintenance == "on" || a.maintenance == "off"
		b.What = map[string]string{"on": "Put into maintenance", "off": "Take out of maintenance"}[a.maintenance]
	}
	byWhy := map[string]int{}
	for _, v := range sel {
		b.IDs = append(b.IDs, v.UUID)
		if !b.Ready {
			continue
		}
		why := p.ineligible(c, a, rb, v)
		if why == "" {
			b.Eligible = append(b.Eligible, nodeRow(v, isSystem(c.UserContext())))
			continue
		}
		i, ok := byWhy[why]
		if !ok {
			i = len(b.Ineligible)
			byWhy[why] = i
			b.Ineligible = append(b.Ineligible, views.Reason{Why: why})
		}
		b.Ineligible[i].Nodes = append(b.Ineligible[i].Nodes, label(v))
	}
	if rb != nil {
		b.Rollout = rolloutOf(c, rb.Name, len(b.Eligible))
	}
	return b, rb, nil
}

func label(v *nodes.View) string {
	if v.Name != nil && *v.Name != "" {
		return *v.Name
	}
	return v.UUID
}

// ineligible says why a node cannot take the action now, in the words the
// node page uses, or "" when it can. The services decide again when the
// action runs.
func (p *Portal) ineligible(c *fiber.Ctx, a bulkArgs, rb *runbooks.Runbook, v *nodes.View) string {
	ctx := c.UserContext()
	t := nodes.Target(v.Node)
	switch a.action {
	case "power":
		switch {
		case !p.Guard.Allowed(ctx, conductor.RuleSetPower, t):
			return p.denied(ctx, "may not change power", conductor.RuleSetPower)
		case v.TargetPowerState != nil:
			return "A power action is already in progress."
		case slices.Contains(busyStates, v.ProvisionState):
			return "Power actions wait while the node is " + v.ProvisionState + "."
		}
	case "runbook":
		// The campaign the action creates skips these nodes, as the
		// campaign service does; a busy or locked node is not one of
		// them: it waits for its turn.
		if v.Maintenance {
			return "The node is in maintenance."
		}
		if v.ProvisionState != nodes.StateManageable && v.ProvisionState != nodes.StateActive {
			return "Runbooks run on manageable or active nodes; this node is " + v.ProvisionState + "."
		}
		if !p.Guard.Allowed(ctx, conductor.RuleProvisionRunbook, t) {
			return p.denied(ctx, "may not run runbooks on this node", conductor.RuleProvisionRunbook)
		}
		if err := runbooks.Accepts(rb.Runbook, v.Node, v.Traits); err != nil {
			if errs.Status(err) == 403 {
				return fmt.Sprintf("Runbook %s is project %s's; it runs only on nodes that project owns.", rb.Name, deref(rb.Owner))
			}
			if len(rb.Traits) > 0 {
				return fmt.Sprintf("The node has none of the runbook's traits (%s).", strings.Join(rb.Traits, ", "))
			}
			return fmt.Sprintf("The node lacks trait %s, which the runbook requires.", rb.Name)
		}
	case "maintenance":
		on := a.maintenance == "on"
		rule := nodes.RuleSetMaintenance
		if !on {
			rule = nodes.RuleClearMaintenance
		}
		switch {
		case !p.Guard.Allowed(ctx, rule, t):
			return p.denied(ctx, "may not change maintenance", rule)
		case on && v.Maintenance:
			return "The node is already in maintenance."
		case !on && !v.Maintenance:
			return "The node is not in maintenance."
		}
	}
	return ""
}

// bulkPage shows a bulk action's choices and, once chosen, who is
// eligible; posting it again with other choices checks again.
func (p *Portal) bulkPage(c *fiber.Ctx) error {
	a := bulkArgsOf(c)
	if !slices.Contains(bulkActions, a.action) {
		return p.ErrorPage(c, 400, "Choose one of the bulk actions: Run runbook, Power or Maintenance.")
	}
	pg, err := p.page(c, "Bulk action")
	if err != nil {
		return err
	}
	sel, missing, capped, err := p.selection(c)
	if err != nil {
		return p.fail(c, err)
	}
	b, _, err := p.plan(c, a, sel)
	if err != nil {
		return err
	}
	b.Missing, b.Capped = missing, capped
	if len(sel) == 0 {
		pg.Error = "No nodes are selected: tick the nodes to act on in the list, or “Select all matching”."
	}
	return render(c, 200, views.BulkPage(pg, b))
}

// bulkAgain answers a GET of a bulk page, which exists only as the
// answer to its form; signing in again after a session ended while it
// was shown returns there. The list shows the nodes' state now.
func (p *Portal) bulkAgain(c *fiber.Ctx) error { return c.Redirect("/nodes", fiber.StatusSeeOther) }

// bulkRun takes the action on each eligible node through the service the
// node page's button calls, authorized for that node, and shows what
// happened to each.
func (p *Portal) bulkRun(c *fiber.Ctx) error {
	a := bulkArgsOf(c)
	if !slices.Contains(bulkActions, a.action) {
		return p.ErrorPage(c, 400, "Choose one of the bulk actions: Run runbook, Power or Maintenance.")
	}
	pg, err := p.page(c, "Bulk action")
	if err != nil {
		return err
	}
	sel, _, _, err := p.selection(c)
	if err != nil {
		return p.fail(c, err)
	}
	b, rb, err := p.plan(c, a, sel)
	if err != nil {
		return err
	}
	if !b.Ready {
		pg.Error = "Choose what to do first."
		return render(c, 400, views.BulkPage(pg, b))
	}
	if a.action == "runbook" {
		return p.rollOut(c, pg, b, rb, sel)
	}
	ctx := c.UserContext()
	results := map[string][2]string{}
	for _, v := range sel {
		if why := p.ineligible(c, a, rb, v); why != "" {
			results[v.UUID] = [2]string{"skip", "Left alone: " + why}
			continue
		}
		var err error
		done := started
		switch a.action {
		case "power":
			err = p.Ops.SetPower(ctx, v.UUID, a.power)
		case "runbook":
			verb := "clean"
			if v.ProvisionState == nodes.StateActive {
				verb = "service"
			}
			err = p.Ops.Provision(ctx, v.UUID, conductor.ProvisionRequest{Target: verb, Runbook: rb.UUID})
		case "maintenance":
			err = p.Nodes.SetMaintenance(ctx, v.UUID, a.maintenance == "on", a.reason)
			done = "Done"
		}
		switch {
		case err == nil:
			results[v.UUID] = [2]string{"ok", done}
		case errs.Status(err) >= 500:
			p.Log.Error("bulk action", "action", a.action, "node", v.UUID, "err", err)
			results[v.UUID] = [2]string{"bad", "Failed: an internal error (logged)."}
		default:
			results[v.UUID] = [2]string{"bad", "Refused: " + err.Error()}
		}
	}
	// The results are kept under a random name and shown at their own
	// address: a reload or another tab shows them again, and a reload
	// does not post the action twice.
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	token := base64.RawURLEncoding.EncodeToString(raw)
	now := time.Now()
	// Runs kept past their time are dropped here rather than by a
	// sweeper, as sessions are.
	if _, err := p.DB.BulkRun.Delete().Where(bulkrun.ExpiresAtLT(now)).Exec(ctx); err != nil {
		return err
	}
	if err := p.DB.BulkRun.Create().SetToken(token).SetPrincipal(sessionOf(c).Principal()).SetWhat(b.What).
		SetResults(results).SetCreatedAt(now).SetExpiresAt(now.Add(AbsoluteTimeout)).Exec(ctx); err != nil {
		return err
	}
	return c.Redirect("/nodes/bulk/results/"+token, fiber.StatusSeeOther)
}

// rollOut rolls a runbook over the selection as a campaign, which keeps
// each node's result, and shows its page; a setting the service refuses
// shows the form again, saying why.
func (p *Portal) rollOut(c *fiber.Ctx, pg views.Page, b views.Bulk, rb *runbooks.Runbook, sel []*nodes.View) error {
	in, err := rolloutInput(b.Rollout, rb, sel)
	if err == nil {
		var v *campaigns.View
		if v, err = p.Campaigns.Create(c.UserContext(), in); err == nil {
			return c.Redirect("/campaigns/"+v.UUID, fiber.StatusSeeOther)
		}
	}
	st := errs.Status(err)
	if st >= 500 {
		return err
	}
	pg.Error = err.Error()
	return render(c, st, views.BulkPage(pg, b))
}

// bulkRunOf reads the viewer's own bulk run named in the address; another
// principal's is not found, as one that never existed or expired.
func (p *Portal) bulkRunOf(c *fiber.Ctx) (*ent.BulkRun, error) {
	r, err := p.DB.BulkRun.Query().Where(bulkrun.Token(c.Params("token")), bulkrun.Principal(sessionOf(c).Principal()),
		bulkrun.ExpiresAtGT(time.Now())).Only(c.UserContext())
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("These bulk results are not on record: they expired, or belong to someone else.")
	}
	return r, err
}

// bulkResults shows a bulk run's results page.
func (p *Portal) bulkResults(c *fiber.Ctx) error {
	r, err := p.bulkRunOf(c)
	if err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, r.What)
	if err != nil {
		return err
	}
	rows, err := p.progress(c, r)
	if err != nil {
		return err
	}
	return render(c, 200, views.BulkResults(pg, r.Token, fmt.Sprintf("%s: %d nodes", r.What, len(rows)), rows))
}

// bulkProgress is the results table again, for its own refresh.
func (p *Portal) bulkProgress(c *fiber.Ctx) error {
	r, err := p.bulkRunOf(c)
	if err != nil {
		return p.fail(c, err)
	}
	rows, err := p.progress(c, r)
	if err != nil {
		return err
	}
	return render(c, 200, views.BulkProgress(r.Token, rows))
}

// progress reads the current state of a run's nodes, in one query that
// returns only the nodes the viewer may see. A started action whose node
// is no longer busy gets its outcome: failed with the node's last error,
// or done; it is stored, so later changes to the node do not rewrite it.
func (p *Portal) progress(c *fiber.Ctx, run *ent.BulkRun) ([]views.BulkResult, error) {
	results := run.Results
	ids := make([]string, 0, len(results))
	for id := range results {
		if nodes.IsUUID(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	page, err := p.Nodes.List(c.UserContext(), nodes.ListOptions{UUIDs: ids, SortKey: "name", Numbered: true, Limit: bulkMax})
	if err != nil {
		return nil, err
	}
	rows := make([]views.BulkResult, 0, len(page.Nodes))
	settled := false
	for _, v := range page.Nodes {
		r := views.BulkResult{Node: nodeRow(v, isSystem(c.UserContext())), Kind: results[v.UUID][0], Result: results[v.UUID][1]}
		r.Busy = slices.Contains(busyStates, v.ProvisionState) || v.TargetPowerState != nil
		if r.Result == started && !r.Busy {
			r.Kind, r.Result = "ok", "Done"
			if e := deref(v.LastError); e != "" {
				r.Kind, r.Result = "bad", "Failed: "+firstLine(e)
			}
			results[v.UUID], settled = [2]string{r.Kind, r.Result}, true
		}
		r.Step = stepText(v)
		rows = append(rows, r)
	}
	if settled {
		if err := p.DB.BulkRun.UpdateOne(run).SetResults(results).Exec(c.UserContext()); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// firstLine is the first line of a node's last error; the results table
// shows the whole text in the node's row.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// stepText is a run's progress in words, "Step 2 of 3: deploy.wait", or
// "" when no steps are running.
func stepText(v *nodes.View) string {
	for _, kind := range []string{"clean", "service"} {
		m := v.CleanStep
		if kind == "service" {
			m = v.ServiceStep
		}
		step, _ := m["step"].(string)
		// The node's own record: progress is shown to whoever sees the
		// node, as on its page, without the rest of driver_internal_info.
		total, ok := v.Node.DriverInternalInfo[kind+"_step_total"].(float64)
		if step == "" || !ok {
			continue
		}
		idx, _ := v.Node.DriverInternalInfo[kind+"_step_index"].(float64)
		iface, _ := m["interface"].(string)
		return fmt.Sprintf("Step %d of %d: %s.%s", int(idx)+1, int(total), iface, step)
	}
	return ""
}
