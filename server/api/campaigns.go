package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/campaigns"
)

// registerCampaigns mounts campaigns (issue #29), an Anvil extension at
// every version: Ironic has no such resource, so no microversion gates it.
func (a *API) registerCampaigns(v1 fiber.Router) {
	v1.Get("/campaigns", query(), a.listCampaigns)
	v1.Post("/campaigns", query(), a.createCampaign)
	v1.Get("/campaigns/:campaign", query(), a.getCampaign)
	v1.Get("/campaigns/:campaign/nodes", query(), a.campaignNodes)
	v1.Put("/campaigns/:campaign/state", query(), a.setCampaignState)
	v1.Post("/campaigns/:campaign/approve", query(), a.approveCampaign)
	v1.Post("/campaigns/:campaign/retry", query(), a.retryCampaign)
	v1.Delete("/campaigns/:campaign", query(), a.deleteCampaign)
}

// campaignFields is a campaign's JSON.
var campaignFields = recTable[*campaigns.View]{
	{"uuid", VerMin, func(x *campaigns.View) any { return x.UUID }},
	{"name", VerMin, func(x *campaigns.View) any { return x.Name }},
	{"runbook", VerMin, func(x *campaigns.View) any { return x.Runbook }},
	{"runbook_name", VerMin, func(x *campaigns.View) any { return x.RunbookName }},
	{"owner", VerMin, func(x *campaigns.View) any { return strOrNil(x.Owner) }},
	{"created_by", VerMin, func(x *campaigns.View) any { return x.CreatedBy }},
	{"state", VerMin, func(x *campaigns.View) any { return x.State }},
	{"max_concurrency", VerMin, func(x *campaigns.View) any { return x.MaxConcurrency }},
	{"max_failures", VerMin, func(x *campaigns.View) any { return x.MaxFailures }},
	{"max_failures_percent", VerMin, func(x *campaigns.View) any { return x.MaxFailuresPercent }},
	{"start_after", VerMin, func(x *campaigns.View) any { return stampp(x.StartAfter) }},
	{"window", VerMin, func(x *campaigns.View) any { return campaigns.WindowOf(x.Campaign) }},
	{"batch_pause", VerMin, func(x *campaigns.View) any { return x.BatchPause }},
	{"batch", VerMin, func(x *campaigns.View) any { return x.Batch }},
	{"retry_of", VerMin, func(x *campaigns.View) any { return strOrNil(x.RetryOf) }},
	{"requires_approval", VerMin, func(x *campaigns.View) any { return x.RequiresApproval }},
	{"owner_approvals", VerMin, func(x *campaigns.View) any { return approvalsJSON(x.Approvals) }},
	{"approved_by", VerMin, func(x *campaigns.View) any { return strOrNil(x.ApprovedBy) }},
	{"approved_at", VerMin, func(x *campaigns.View) any { return stampp(x.ApprovedAt) }},
	{"counts", VerMin, func(x *campaigns.View) any { return x.Counts }},
	{"started_at", VerMin, func(x *campaigns.View) any { return stampp(x.StartedAt) }},
	{"finished_at", VerMin, func(x *campaigns.View) any { return stampp(x.FinishedAt) }},
	{"created_at", VerMin, func(x *campaigns.View) any { return stamp(x.CreatedAt) }},
	{"updated_at", VerMin, func(x *campaigns.View) any { return stampp(x.UpdatedAt) }},
}

// approvalsJSON lists the node owners' approvals a campaign asked for.
func approvalsJSON(as []*ent.CampaignApproval) []fiber.Map {
	out := make([]fiber.Map, len(as))
	for i, a := range as {
		out[i] = fiber.Map{"project": a.Project, "approved_by": strOrNil(a.ApprovedBy), "approved_at": stampp(a.ApprovedAt)}
	}
	return out
}

func campaignJSON(c *fiber.Ctx, x *campaigns.View) fiber.Map {
	m := campaignFields.render(x, nil, ver(c), resLinks(c, "campaigns/"+x.UUID))
	m["nodes"] = resLinks(c, "campaigns/"+x.UUID+"/nodes")
	return m
}

func (a *API) listCampaigns(c *fiber.Ctx) error {
	vs, err := a.Campaigns.List(c.UserContext())
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(vs))
	for i, v := range vs {
		out[i] = campaignJSON(c, v)
	}
	return c.JSON(fiber.Map{"campaigns": out})
}

func (a *API) getCampaign(c *fiber.Ctx) error {
	v, err := a.Campaigns.Get(c.UserContext(), c.Params("campaign"))
	if err != nil {
		return err
	}
	return c.JSON(campaignJSON(c, v))
}

// createCampaign authorizes before it reads the body, so a caller
// without the right learns nothing from validation messages.
func (a *API) createCampaign(c *fiber.Ctx) error {
	if err := a.Campaigns.AuthorizeCreate(c.UserContext()); err != nil {
		return err
	}
	var in campaigns.Input
	if err := bind(c, &in); err != nil {
		return err
	}
	v, err := a.Campaigns.Create(c.UserContext(), &in)
	if err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/campaigns/"+v.UUID)
	return c.Status(201).JSON(campaignJSON(c, v))
}

func (a *API) campaignNodes(c *fiber.Ctx) error {
	rows, err := a.Campaigns.Nodes(c.UserContext(), c.Params("campaign"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(rows))
	for i, r := range rows {
		out[i] = campaignNodeJSON(r)
	}
	return c.JSON(fiber.Map{"nodes": out})
}

func campaignNodeJSON(r *ent.CampaignNode) fiber.Map {
	return fiber.Map{"node_uuid": r.NodeUUID, "status": r.Status, "reason": strOrNil(r.Reason), "run": strOrNil(r.Run),
		"batch": r.Batch, "started_at": stampp(r.StartedAt), "finished_at": stampp(r.FinishedAt)}
}

func (a *API) setCampaignState(c *fiber.Ctx) error {
	if err := a.Campaigns.Authorize(c.UserContext(), c.Params("campaign"), campaigns.RuleUpdate); err != nil {
		return err
	}
	var in struct {
		Target string `json:"target"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := a.Campaigns.SetState(c.UserContext(), c.Params("campaign"), in.Target); err != nil {
		return err
	}
	return c.SendStatus(202)
}

func (a *API) approveCampaign(c *fiber.Ctx) error {
	if err := a.Campaigns.Approve(c.UserContext(), c.Params("campaign")); err != nil {
		return err
	}
	return c.SendStatus(202)
}

func (a *API) deleteCampaign(c *fiber.Ctx) error {
	if err := a.Campaigns.Delete(c.UserContext(), c.Params("campaign")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// retryCampaign creates a campaign over another's failed nodes; the body
// (name, skip_ineligible) is optional.
func (a *API) retryCampaign(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := a.Campaigns.Authorize(ctx, c.Params("campaign"), campaigns.RuleGet); err != nil {
		return err
	}
	if err := a.Campaigns.AuthorizeCreate(ctx); err != nil {
		return err
	}
	var in campaigns.RetryInput
	if len(c.Body()) > 0 {
		if err := bind(c, &in); err != nil {
			return err
		}
	}
	v, err := a.Campaigns.Retry(ctx, c.Params("campaign"), &in)
	if err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/campaigns/"+v.UUID)
	return c.Status(201).JSON(campaignJSON(c, v))
}
