package web

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/views"
)

// sessionsPage lists every signed-in browser for whoever may list users;
// whoever may manage them also gets Revoke. A session is named by its
// record's number, never by its cookie's secret.
func (p *Portal) sessionsPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleUserList, "session", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Active sessions")
	if err != nil {
		return err
	}
	list := views.SessionList{User: strings.TrimSpace(c.Query("user")), Page: max(c.QueryInt("page", 1), 1)}
	ss, total, err := p.IDs.ListSessions(ctx, identity.SessionQuery{Current: sessionOf(c).ID, User: list.User,
		Offset: (list.Page - 1) * sessionsShown, Limit: sessionsShown})
	if err != nil {
		return err
	}
	list.Total, list.Pages = total, max((total+sessionsShown-1)/sessionsShown, 1)
	rows := make([]views.SessionRow, len(ss))
	for i, s := range ss {
		rows[i] = views.SessionRow{Ref: strconv.Itoa(s.Ref), User: s.Principal, Kind: "local", ClientAddr: s.ClientAddr,
			Created: s.Created, Seen: s.Seen, Current: s.Current}
		if s.SSO {
			// "sso|issuer|subject": the subject at its provider.
			parts := strings.SplitN(s.Principal, "|", 3)
			rows[i].Kind = "SSO"
			if len(parts) == 3 {
				rows[i].User = parts[2] + " at " + parts[1]
			}
		}
	}
	list.Rows = rows
	return render(c, 200, views.SessionsPage(pg, list, p.Guard.Allowed(ctx, ruleUserManage, policies.Target{})))
}

// sessionsShown is a page of the sessions list: a fleet's operators and
// tenants may hold thousands of sessions at once.
const sessionsShown = 50

// revokeSession ends one session at once; the identity service audits it
// against the session's user.
func (p *Portal) revokeSession(c *fiber.Ctx) error {
	ctx := c.UserContext()
	ref, err := strconv.Atoi(c.Params("ref"))
	if err != nil || ref <= 0 {
		return p.fail(c, errs.NotFound("no session %q", c.Params("ref")))
	}
	if err := p.Guard.Authorize(ctx, ruleUserManage, "session", c.Params("ref"), policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	if err := p.IDs.RevokeSession(ctx, ref); err != nil {
		return p.fail(c, err)
	}
	return p.flashTo(c, "/admin/sessions", "Session ended; that browser must sign in again.")
}
