package web

import (
	"fmt"
	"github.com/anvilproject/anvil/policies"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// campaignPageSize is how many of a campaign's nodes its page shows at once.
const campaignPageSize = 50

// campaignView is a campaign as its pages show it, with the buttons the
// viewer's policy allows in its current state: the service decides again
// when one is pressed.
func (p *Portal) campaignView(c *fiber.Ctx, v *campaigns.View) views.Campaign {
	ctx := c.UserContext()
	out := views.Campaign{UUID: v.UUID, Name: v.Name, Runbook: v.RunbookName, State: v.State, CreatedBy: v.CreatedBy,
		Owner: deref(v.Owner), ApprovedBy: deref(v.ApprovedBy), MaxConcurrency: v.MaxConcurrency,
		MaxFailures: strconv.Itoa(v.MaxFailures), StartAfter: v.StartAfter, StartedAt: v.StartedAt, FinishedAt: v.FinishedAt,
		CreatedAt: v.CreatedAt, Pending: v.Counts.Pending, Running: v.Counts.Running, Succeeded: v.Counts.Succeeded,
		Failed: v.Counts.Failed, Skipped: v.Counts.Skipped}
	if w := campaigns.WindowOf(v.Campaign); w != nil {
		out.Window = w.String()
	}
	out.BatchPause = v.BatchPause
	if v.MaxFailuresPercent != nil {
		out.MaxFailures = fmt.Sprintf("%d%% (%d)", *v.MaxFailuresPercent, v.MaxFailures)
	}
	t := campaigns.Target(v.Campaign)
	may := func(rule string) bool { return p.Guard.Allowed(ctx, rule, t) }
	finished := slices.Contains([]string{campaigns.StateCompleted, campaigns.StateFailed, campaigns.StateCancelled}, v.State)
	if may(campaigns.RuleUpdate) {
		out.CanPause = v.State == campaigns.StateRunning || v.State == campaigns.StateScheduled
		out.CanResume = v.State == campaigns.StatePaused
		out.CanCancel = !finished
	}
	own := false
	if pr := policies.PrincipalFrom(ctx); pr != nil && pr.User == v.CreatedBy && !may(campaigns.RuleApproveOwn) {
		own = true
	}
	out.CanApprove = v.State == campaigns.StatePendingApproval && may(campaigns.RuleApprove) && !own
	out.Approvers = "Approved by " + campaigns.ApproverText + "."
	if own {
		out.Approvers = "You created it, so someone else approves it: " + campaigns.ApproverText + "."
	}
	out.CanDelete = finished && v.Counts.Running == 0 && may(campaigns.RuleDelete)
	out.CanRetry = finished && v.Counts.Failed > 0 && p.Campaigns.MayCreate(ctx)
	return out
}

// campaignsPage lists the campaigns the viewer may see.
func (p *Portal) campaignsPage(c *fiber.Ctx) error {
	vs, err := p.Campaigns.List(c.UserContext())
	if err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Campaigns")
	if err != nil {
		return err
	}
	cs := make([]views.Campaign, len(vs))
	for i, v := range vs {
		cs[i] = p.campaignView(c, v)
	}
	return render(c, 200, views.CampaignsPage(pg, cs))
}

// campaignDetail reads a campaign and one page of its nodes, filtered by
// the status in the address, with each node's name and state now as the
// viewer may see them.
func (p *Portal) campaignDetail(c *fiber.Ctx) (views.CampaignDetail, error) {
	ctx := c.UserContext()
	v, err := p.Campaigns.Get(ctx, c.Params("id"))
	if err != nil {
		return views.CampaignDetail{}, err
	}
	rows, err := p.Campaigns.Nodes(ctx, v.UUID)
	if err != nil {
		return views.CampaignDetail{}, err
	}
	d := views.CampaignDetail{Campaign: p.campaignView(c, v), CSRF: sessionOf(c).CSRF, PageNo: 1}
	// An unknown status shows every node, as the filter's first choice.
	if s := c.Query("status"); slices.Contains(views.CampaignStatuses, s) {
		d.Status = s
		rows = slices.DeleteFunc(rows, func(r *ent.CampaignNode) bool { return r.Status != s })
	}
	d.Matching = len(rows)
	d.Pages = max(1, (len(rows)+campaignPageSize-1)/campaignPageSize)
	if n, err := strconv.Atoi(c.Query("page")); err == nil && n > 1 {
		d.PageNo = min(n, d.Pages)
	}
	rows = rows[min((d.PageNo-1)*campaignPageSize, len(rows)):min(d.PageNo*campaignPageSize, len(rows))]
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.NodeUUID
	}
	seen := map[string]*nodes.View{}
	if len(ids) > 0 {
		page, err := p.Nodes.List(ctx, nodes.ListOptions{UUIDs: ids, Limit: len(ids)})
		if err != nil {
			return d, err
		}
		for _, n := range page.Nodes {
			seen[n.UUID] = n
		}
	}
	for _, r := range rows {
		n := views.CampaignNode{UUID: r.NodeUUID, Label: r.NodeUUID, Status: r.Status, Reason: deref(r.Reason),
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
		if v, ok := seen[r.NodeUUID]; ok {
			n.Label, n.State = label(v), v.ProvisionState
		}
		d.Nodes = append(d.Nodes, n)
	}
	return d, nil
}

// campaignPage shows a campaign and follows its progress.
func (p *Portal) campaignPage(c *fiber.Ctx) error {
	d, err := p.campaignDetail(c)
	if err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, d.Name)
	if err != nil {
		return err
	}
	return render(c, 200, views.CampaignPage(pg, d))
}

// campaignLive is the changing part of a campaign's page, for its own refresh.
func (p *Portal) campaignLive(c *fiber.Ctx) error {
	d, err := p.campaignDetail(c)
	if err != nil {
		return p.fail(c, err)
	}
	return render(c, 200, views.CampaignLive(d))
}

// campaignAct answers a campaign's button: to the page act names (the
// campaign's, the list after a delete, the new campaign after a retry),
// saying what happened, or back to the campaign saying why it was
// refused. A hidden or missing campaign is the error page, as the API's
// 404.
func (p *Portal) campaignAct(c *fiber.Ctx, act func(id string) (to string, err error), done string) error {
	id := c.Params("id")
	to, err := act(id)
	switch st := errs.Status(err); {
	case err == nil:
		return p.flashTo(c, to, done)
	case st == 404 || st == 403 || st >= 500:
		return p.fail(c, err)
	default:
		return p.flashTo(c, "/campaigns/"+id, err.Error())
	}
}

func (p *Portal) campaignState(c *fiber.Ctx) error {
	target := c.FormValue("target")
	said := map[string]string{campaigns.StatePaused: "Paused: running nodes finish, no more start.",
		campaigns.StateRunning: "Resumed.", campaigns.StateCancelled: "Cancelled: nodes not yet started are skipped; running ones finish."}[target]
	return p.campaignAct(c, func(id string) (string, error) {
		return "/campaigns/" + id, p.Campaigns.SetState(c.UserContext(), id, target)
	}, said)
}

func (p *Portal) campaignApprove(c *fiber.Ctx) error {
	return p.campaignAct(c, func(id string) (string, error) {
		return "/campaigns/" + id, p.Campaigns.Approve(c.UserContext(), id)
	}, "Approved.")
}

func (p *Portal) campaignDelete(c *fiber.Ctx) error {
	return p.campaignAct(c, func(id string) (string, error) {
		return "/campaigns", p.Campaigns.Delete(c.UserContext(), id)
	}, "The campaign's record was deleted.")
}

// campaignRetry rolls the runbook again over a campaign's failed nodes,
// as a new campaign with the same settings, and opens it. A node its
// failure left in maintenance must be recovered first: the refusal names
// each one.
func (p *Portal) campaignRetry(c *fiber.Ctx) error {
	return p.campaignAct(c, func(id string) (string, error) {
		v, err := p.Campaigns.Retry(c.UserContext(), id, &campaigns.RetryInput{})
		if err != nil {
			return "", err
		}
		return "/campaigns/" + v.UUID, nil
	}, "A new campaign retries the failed nodes.")
}

// rolloutOf reads a runbook action's campaign settings, with defaults for
// a first showing: a name saying what runs where, up to 20 nodes at once.
func rolloutOf(c *fiber.Ctx, rb string, eligible int) views.Rollout {
	r := views.Rollout{Name: strings.TrimSpace(c.FormValue("name")), MaxConcurrency: strings.TrimSpace(c.FormValue("max_concurrency")),
		MaxFailures: strings.TrimSpace(c.FormValue("max_failures")), StartAfter: c.FormValue("start_after"),
		RequiresApproval: c.FormValue("requires_approval") == "1", WindowFrom: strings.TrimSpace(c.FormValue("window_from")),
		WindowTo: strings.TrimSpace(c.FormValue("window_to")), WindowTimezone: strings.TrimSpace(c.FormValue("window_timezone")),
		BatchPause: strings.TrimSpace(c.FormValue("batch_pause"))}
	for _, d := range c.Request().PostArgs().PeekMulti("window_days") {
		r.WindowDays = append(r.WindowDays, string(d))
	}
	if r.Name == "" {
		r.Name = fmt.Sprintf("%s on %d nodes", rb, eligible)
	}
	if r.MaxConcurrency == "" {
		r.MaxConcurrency = strconv.Itoa(max(1, min(eligible, 20)))
	}
	// The service's default, shown: the first failure stops new starts.
	if r.MaxFailures == "" {
		r.MaxFailures = "0"
	}
	return r
}

// rolloutInput turns the form's settings into a campaign request over the
// selected nodes; the service records the ineligible ones as skipped, with
// their reason, so every selected node's outcome is kept.
func rolloutInput(r views.Rollout, rb *runbooks.Runbook, sel []*nodes.View) (*campaigns.Input, error) {
	in := &campaigns.Input{Name: r.Name, Runbook: rb.UUID, RequiresApproval: r.RequiresApproval, SkipIneligible: true}
	for _, v := range sel {
		in.Nodes = append(in.Nodes, v.UUID)
	}
	n, err := strconv.Atoi(r.MaxConcurrency)
	if err != nil {
		return nil, errs.BadRequest("max_concurrency", "max_concurrency must be a whole number from 1 to %d", campaigns.MaxConcurrency)
	}
	in.MaxConcurrency = &n
	if r.MaxFailures != "" {
		in.MaxFailures = r.MaxFailures
	}
	if r.BatchPause != "" {
		p, err := strconv.Atoi(r.BatchPause)
		if err != nil {
			return nil, errs.BadRequest("batch_pause", "batch_pause must be a whole number of seconds from 0 to %d", campaigns.MaxBatchPause)
		}
		in.BatchPause = &p
	}
	// Any part of a window asks for one: the service says what is
	// missing (days without hours) or wrong.
	if len(r.WindowDays) > 0 || r.WindowFrom != "" || r.WindowTo != "" || r.WindowTimezone != "" {
		in.Window = &campaigns.Window{Days: r.WindowDays, From: r.WindowFrom, To: r.WindowTo, Timezone: r.WindowTimezone}
	}
	if r.StartAfter != "" {
		// A datetime-local field: minutes, or seconds when the browser
		// offers them, read as UTC as the label says.
		t, err := time.ParseInLocation("2006-01-02T15:04", r.StartAfter, time.UTC)
		if err != nil {
			t, err = time.ParseInLocation("2006-01-02T15:04:05", r.StartAfter, time.UTC)
		}
		if err != nil {
			return nil, errs.BadRequest("start_after", "start_after must be a date and time such as 2026-01-02T15:04, not %q", r.StartAfter)
		}
		s := t.Format(time.RFC3339)
		in.StartAfter = &s
	}
	return in, nil
}
