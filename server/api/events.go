package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
)

// RuleAuditList guards the audit log, which Ironic does not have.
const RuleAuditList = "anvil:audit:list"

// listEvents serves GET /v1/events: the audit log, newest first.
func (a *API) listEvents(c *fiber.Ctx) error {
	if err := a.Guard.Authorize(c.UserContext(), RuleAuditList, "audit", "", policies.Target{}); err != nil {
		return err
	}
	q := audit.Query{
		User: c.Query("user"), Project: c.Query("project"), Result: c.Query("result"),
		Rule: c.Query("rule"), TargetID: c.Query("target_id"),
	}
	for name, dst := range map[string]*int{"limit": &q.Limit, "marker": &q.Marker} {
		if s := c.Query(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return errs.BadRequest(name, "%s must be a positive integer, not %q", name, s)
			}
			*dst = n
		}
	}
	evs, more, err := a.Audit.List(c.UserContext(), q)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(evs))
	for i, e := range evs {
		out[i] = fiber.Map{
			"id": e.ID, "created_at": e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000+00:00"),
			"request_id": e.RequestID, "user": e.User, "project": e.Project, "scope": e.Scope,
			"rule": e.Rule, "method": e.Method, "path": e.Path, "target_type": e.TargetType,
			"target_id": e.TargetID, "result": e.Result, "status": e.Status, "detail": e.Detail,
		}
	}
	res := fiber.Map{"events": out}
	if more && len(evs) > 0 {
		res["next"] = nextURL(c, strconv.Itoa(evs[len(evs)-1].ID))
	}
	return c.JSON(res)
}
