package web

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/views"
)

// Rules of the users page, as policies/defaults.go names them.
const (
	ruleUserList   = "anvil:user:list"
	ruleUserManage = "anvil:user:manage"
)

// usersPage lists local accounts and their roles for system readers; a
// system admin also gets the forms.
func (p *Portal) usersPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleUserList, "user", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Users")
	if err != nil {
		return err
	}
	pg.Flash = usersFlash[c.Query("done")]
	if e := c.Query("error"); e != "" {
		pg.Error = e
	}
	return p.renderUsers(c, pg, 200, views.GrantConfirm{})
}

var usersFlash = map[string]string{"created": "User created.", "granted": "Role granted.", "revoked": "Role revoked; the user's sessions ended.", "deleted": "User deleted.",
	"password": "Password reset; the user's sessions ended."}

func (p *Portal) renderUsers(c *fiber.Ctx, pg views.Page, status int, confirm views.GrantConfirm) error {
	ctx := c.UserContext()
	us, err := p.IDs.ListUsers(ctx)
	if err != nil {
		return err
	}
	// The search matches a name, or a role as the page writes it
	// ("admin", "member on project blue"), ignoring case.
	q := strings.TrimSpace(c.Query("q"))
	rows := []views.UserRow{}
	for _, u := range us {
		row := views.UserRow{Name: u.Name, LastLogin: u.LastLogin}
		hit := q == "" || containsFold(u.Name, q)
		for _, a := range u.Roles {
			r := views.RoleRow{Scope: a.Scope.String(), Role: a.Role, Value: scopeValue(a.Scope) + "|" + a.Role}
			row.Roles = append(row.Roles, r)
			hit = hit || containsFold(r.Role+" on "+r.Scope, q)
		}
		if hit {
			rows = append(rows, row)
		}
	}
	return render(c, status, views.UsersPage(pg, views.UserList{Rows: rows, Query: q, Total: len(us)}, p.Guard.Allowed(ctx, ruleUserManage, policies.Target{}), confirm))
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// userChange runs one change to a local account after the manage rule; a
// refusal of the input (400, 404, 409) is shown on the page, and success
// goes back to the page (POST, redirect, GET).
func (p *Portal) userChange(c *fiber.Ctx, done string, change func() error) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleUserManage, "user", c.Params("name"), policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	if err := change(); err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		pg, perr := p.page(c, "Users")
		if perr != nil {
			return perr
		}
		pg.Error = err.Error()
		return p.renderUsers(c, pg, errs.Status(err), views.GrantConfirm{})
	}
	return c.Redirect("/admin/users?"+url.Values{"done": {done}}.Encode(), fiber.StatusSeeOther)
}

func (p *Portal) createUser(c *fiber.Ctx) error {
	return p.userChange(c, "created", func() error {
		return p.IDs.CreateUser(c.UserContext(), strings.TrimSpace(c.FormValue("name")), c.FormValue("password"))
	})
}

// assignmentOf reads a scope ("system", a project name, or the
// "project:P|role" value of a revoke button) and role from the form.
func assignmentOf(c *fiber.Ctx) (identity.Assignment, error) {
	scope, role := strings.TrimSpace(c.FormValue("scope")), c.FormValue("role")
	if v := c.FormValue("assignment"); v != "" {
		scope, role, _ = strings.Cut(v, "|")
	}
	sc, ok := parseScope(scope)
	if !ok && scope != "" && !strings.Contains(scope, ":") {
		sc, ok = identity.Scope{Project: scope}, true
	}
	if !ok {
		return identity.Assignment{}, errs.BadRequest("scope", "scope: give system or a project name")
	}
	return identity.Assignment{Scope: sc, Role: role}, nil
}

// grantRole grants a role. Making someone a system admin is asked again
// first, on the page, naming what it gives: a slip in the scope field
// must not hand over everything.
func (p *Portal) grantRole(c *fiber.Ctx) error {
	if a, err := assignmentOf(c); err == nil && a.System && a.Role == "admin" && c.FormValue("confirmed") != "yes" {
		return p.askGrant(c)
	}
	if a, err := assignmentOf(c); err == nil && !a.System && c.FormValue("new_project") != a.Project {
		return p.askNewProject(c, a)
	}
	return p.userChange(c, "granted", func() error {
		a, err := assignmentOf(c)
		if err != nil {
			return err
		}
		return p.IDs.Grant(c.UserContext(), c.Params("name"), a)
	})
}

// askGrant shows the users page with the question before a grant of
// system admin, under the rule the grant itself needs.
func (p *Portal) askGrant(c *fiber.Ctx) error {
	name := c.Params("name")
	if err := p.Guard.Authorize(c.UserContext(), ruleUserManage, "user", name, policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Users")
	if err != nil {
		return err
	}
	return p.renderUsers(c, pg, 200, views.GrantConfirm{User: name, Scope: "system", Role: "admin", Button: "Make " + name + " a system admin",
		Question: "Make " + name + " a system admin? An admin on the system may do " +
			"everything in Anvil: change and delete every project's nodes, manage every user and role (making more admins too) and the policy."})
}

// askNewProject grants a role on a project no node, role or runbook uses
// yet only once confirmed, for a misspelt project would hand the user
// nothing they should have; a known project is granted at once. Asked
// after the grant's own rule and checks, so the question stands in for
// neither a refusal nor a bad field.
func (p *Portal) askNewProject(c *fiber.Ctx, a identity.Assignment) error {
	ctx := c.UserContext()
	name := c.Params("name")
	if err := p.Guard.Authorize(ctx, ruleUserManage, "user", name, policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	unknown, err := p.unknownProjects(ctx, a.Project)
	if err != nil {
		return err
	}
	if len(unknown) == 0 || identity.ValidateAssignment(a) != nil {
		return p.userChange(c, "granted", func() error { return p.IDs.Grant(ctx, name, a) })
	}
	pg, err := p.page(c, "Users")
	if err != nil {
		return err
	}
	return p.renderUsers(c, pg, 200, views.GrantConfirm{User: name, Scope: a.Project, Role: a.Role, NewProject: a.Project,
		Button:   "Yes, create new project " + a.Project + " and grant " + a.Role,
		Question: "No node, role or runbook uses project " + a.Project + " yet. Check the spelling: grant " + name + " " + a.Role + " on a new project " + a.Project + "?"})
}

func (p *Portal) revokeRole(c *fiber.Ctx) error {
	return p.userChange(c, "revoked", func() error {
		a, err := assignmentOf(c)
		if err != nil {
			return err
		}
		return p.IDs.Revoke(c.UserContext(), c.Params("name"), a)
	})
}

func (p *Portal) resetPassword(c *fiber.Ctx) error {
	return p.userChange(c, "password", func() error {
		return p.IDs.SetPassword(c.UserContext(), c.Params("name"), c.FormValue("password"))
	})
}

func (p *Portal) deleteUser(c *fiber.Ctx) error {
	return p.userChange(c, "deleted", func() error {
		if pr := policies.PrincipalFrom(c.UserContext()); pr != nil && pr.User == c.Params("name") {
			return errs.BadRequest("name", "you cannot delete your own account here; ask another administrator")
		}
		return p.IDs.DeleteUser(c.UserContext(), c.Params("name"))
	})
}

// tokensShown is the admin token list's page size.
const tokensShown = 50

// tokensPage lists every user's API tokens, newest first, a page at a
// time, for whoever may list users; whoever may manage them also gets
// Revoke. A token's secret is never stored, so never shown.
func (p *Portal) tokensPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleUserList, "token", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	offset, err := strconv.Atoi(c.Query("offset", "0"))
	if err != nil || offset < 0 {
		return p.fail(c, errs.BadRequest("offset", "offset: give a number of tokens to skip, 0 or more"))
	}
	pg, err := p.page(c, "API tokens of every user")
	if err != nil {
		return err
	}
	ts, more, err := p.IDs.TokensPage(ctx, offset, tokensShown)
	if err != nil {
		return err
	}
	now := time.Now()
	rows := make([]views.AdminTokenRow, len(ts))
	for i, t := range ts {
		rows[i] = views.AdminTokenRow{UUID: t.UUID, User: t.User, Scope: t.Scope.String(), Roles: strings.Join(t.Roles, ", "),
			Description: t.Description, State: "active", Created: t.CreatedAt, Expires: t.ExpiresAt, LastUsed: t.LastUsedAt}
		switch {
		case t.RevokedAt != nil:
			rows[i].State = "revoked"
		case t.ExpiresAt != nil && now.After(*t.ExpiresAt):
			rows[i].State = "expired"
		}
	}
	return render(c, 200, views.AdminTokens(pg, views.AdminTokenList{Rows: rows, Offset: offset, Size: tokensShown, More: more,
		CanRevoke: p.Guard.Allowed(ctx, ruleUserManage, policies.Target{})}))
}

// revokeAnyToken revokes any user's token, under the rule that manages
// users; the identity service audits it against the token's user.
func (p *Portal) revokeAnyToken(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleUserList, "token", c.Params("id"), policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	t, err := p.IDs.Token(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	if err := p.Guard.Authorize(ctx, ruleUserManage, "token", t.UUID, policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	if err := p.IDs.RevokeToken(ctx, t.UUID, t.User); err != nil {
		return p.fail(c, err)
	}
	to := "/admin/tokens"
	if o, err := strconv.Atoi(c.FormValue("offset")); err == nil && o > 0 {
		to += "?offset=" + strconv.Itoa(o)
	}
	return p.flashTo(c, to, "Revoked "+t.User+"'s token on "+t.Scope.String()+"; it no longer authenticates.")
}
