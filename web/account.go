package web

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/views"
)

// Token rules, as the identity service audits them.
const (
	ruleTokenCreate = "anvil:token:create"
	ruleTokenRevoke = "anvil:token:revoke"
)

func (p *Portal) tokenRows(c *fiber.Ctx, pr *policies.Principal) ([]views.TokenRow, error) {
	if !pr.Local() {
		// An SSO identity has no local account and no tokens, even when a
		// local account shares its name.
		return nil, nil
	}
	ts, err := p.IDs.ListTokens(c.UserContext(), pr.User)
	if err != nil {
		if errs.Status(err) == 404 {
			return nil, nil // an OIDC user has no local account, hence no tokens
		}
		return nil, err
	}
	now := time.Now()
	rows := make([]views.TokenRow, len(ts))
	for i, t := range ts {
		state := "active"
		if t.RevokedAt != nil {
			state = "revoked"
		} else if t.ExpiresAt != nil && now.After(*t.ExpiresAt) {
			state = "expired"
		}
		rows[i] = views.TokenRow{UUID: t.UUID, Scope: t.Scope.String(), Roles: strings.Join(t.Roles, ", "), Description: t.Description,
			State: state, Created: t.CreatedAt, Expires: t.ExpiresAt, LastUsed: t.LastUsedAt}
	}
	return rows, nil
}

// ladder returns the roles the principal may put in a token: those it
// holds among Anvil's roles, strongest first, service last.
func ladder(pr *policies.Principal) []string {
	var out []string
	for _, r := range policies.KnownRoles() {
		if pr.HasRole(r) {
			out = append(out, r)
		}
	}
	return out
}

func (p *Portal) account(c *fiber.Ctx) error {
	pg, err := p.page(c, "API tokens")
	if err != nil {
		return err
	}
	pr := policies.PrincipalFrom(c.UserContext())
	rows, err := p.tokenRows(c, pr)
	if err != nil {
		return err
	}
	if pr.Method == "oidc" && pg.Flash == "" {
		pg.Flash = "You signed in with SSO: API calls can use your identity provider's token as a Bearer token."
	}
	keys, err := p.savedKeys(c.UserContext())
	if err != nil {
		return err
	}
	return render(c, 200, views.Account(pg, rows, ladder(pr), "", pr.Local(), keyRows(keys), views.KeyForm{}))
}

// renderAccount shows the account page again with the SSH key form as
// sent and its problems.
func (p *Portal) renderAccount(c *fiber.Ctx, status int, f views.KeyForm) error {
	pg, err := p.page(c, "API tokens")
	if err != nil {
		return err
	}
	pr := policies.PrincipalFrom(c.UserContext())
	rows, err := p.tokenRows(c, pr)
	if err != nil {
		return err
	}
	keys, err := p.savedKeys(c.UserContext())
	if err != nil {
		return err
	}
	return render(c, status, views.Account(pg, rows, ladder(pr), "", pr.Local(), keyRows(keys), f))
}

// tokens re-renders the token section (htmx) or the whole page.
func (p *Portal) tokens(c *fiber.Ctx, secret, problem string) error {
	pg, err := p.page(c, "API tokens")
	if err != nil {
		return err
	}
	pg.Error = problem
	pr := policies.PrincipalFrom(c.UserContext())
	rows, err := p.tokenRows(c, pr)
	if err != nil {
		return err
	}
	status := 200
	if problem != "" {
		status = 400
	}
	if c.Get("HX-Request") == "true" {
		if status != 200 {
			// htmx swaps only 2xx by default; a 200 keeps the message visible.
			status = 200
		}
		return render(c, status, views.Tokens(pg, rows, secret))
	}
	keys, err := p.savedKeys(c.UserContext())
	if err != nil {
		return err
	}
	return render(c, status, views.Account(pg, rows, ladder(pr), secret, pr.Local(), keyRows(keys), views.KeyForm{}))
}

func (p *Portal) createToken(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pr := policies.PrincipalFrom(ctx)
	if err := p.Guard.Authorize(ctx, ruleTokenCreate, "token", "", policies.Target{}); err != nil {
		return p.tokens(c, "", err.Error())
	}
	var expires time.Duration
	if v := c.FormValue("expires"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return p.tokens(c, "", "expires: choose one of the offered lifetimes")
		}
		expires = d
	}
	var roles []string
	for _, r := range c.Request().PostArgs().PeekMulti("roles") {
		roles = append(roles, string(r))
	}
	secret, _, err := p.IDs.CreateToken(ctx, identity.TokenRequest{
		User: pr.User, Scope: identity.Scope{System: pr.System, Project: pr.Project}, Roles: roles,
		Expires: expires, Description: strings.TrimSpace(c.FormValue("description")),
	})
	if err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.tokens(c, "", err.Error())
	}
	return p.tokens(c, secret, "")
}

func (p *Portal) revokeToken(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pr := policies.PrincipalFrom(ctx)
	if err := p.Guard.Authorize(ctx, ruleTokenRevoke, "token", c.Params("id"), policies.Target{}); err != nil {
		return p.tokens(c, "", err.Error())
	}
	if !pr.Local() {
		return p.tokens(c, "", "An SSO identity has no Anvil tokens.")
	}
	if err := p.IDs.RevokeToken(ctx, c.Params("id"), pr.User); err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.tokens(c, "", err.Error())
	}
	return p.tokens(c, "", "")
}

// passwordPath is the change-password page, the only page an account
// that must change its password is served (see signedIn).
const passwordPath = "/account/password"

func (p *Portal) passwordPage(c *fiber.Ctx) error {
	return p.renderPassword(c, 200, "")
}

func (p *Portal) renderPassword(c *fiber.Ctx, status int, problem string) error {
	pr := policies.PrincipalFrom(c.UserContext())
	if !pr.Local() {
		return p.fail(c, errs.NotFound("an SSO identity has no Anvil password; change it with your identity provider"))
	}
	pg, err := p.page(c, "Change password")
	if err != nil {
		return err
	}
	pg.Error = problem
	next := c.FormValue("next") // the query of a GET, the form of a POST
	if !safeNext(next) {
		next = ""
	}
	return render(c, status, views.ChangePassword(pg, next, identity.MinPasswordLen, pr.MustChangePassword))
}

// changePassword replaces the signed-in account's own password. The
// session it was changed in stays; the account's others end.
func (p *Portal) changePassword(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pr := policies.PrincipalFrom(ctx)
	if !pr.Local() {
		return p.fail(c, errs.NotFound("an SSO identity has no Anvil password; change it with your identity provider"))
	}
	current, next := c.FormValue("current"), c.FormValue("new")
	if next != c.FormValue("confirm") {
		return p.renderPassword(c, 400, "The two new passwords differ; type the same one twice.")
	}
	if err := p.IDs.ChangePassword(ctx, pr.User, current, next, clientip.Of(c), sessionOf(c).ID); err != nil {
		if st := errs.Status(err); st >= 500 {
			return err
		}
		return p.renderPassword(c, errs.Status(err), err.Error())
	}
	to := "/nodes"
	if n := c.FormValue("next"); safeNext(n) {
		to = n
	}
	return p.flashTo(c, to, "Your password was changed.")
}
