package web

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/a-h/templ"
	"github.com/gofiber/fiber/v2"
	"golang.org/x/sync/singleflight"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/wipes"
	"github.com/anvilproject/anvil/static"
	"github.com/anvilproject/anvil/views"
)

// SSO is the OpenID Connect provider the portal signs users in with.
type SSO interface {
	// AuthCodeURL is where the browser signs in; an error while the
	// provider cannot be reached.
	AuthCodeURL(state, nonce, verifier string) (string, error)
	// Exchange completes the code flow and returns the identity with the
	// role assignments its claims carry.
	Exchange(ctx context.Context, code, verifier, nonce string) (identity.SSOUser, error)
	// Refresh reads an identity's roles again with its refresh token; an
	// error wrapping oidclogin.ErrGrantEnded means the provider refused.
	Refresh(ctx context.Context, u identity.SSOUser) (identity.SSOUser, error)
	// VerifyLogout checks a back-channel logout token and returns whom
	// it signs out.
	VerifyLogout(ctx context.Context, raw string) (issuer, subject, sid string, err error)
}

// Portal serves the browser pages.
type Portal struct {
	// DB keeps bulk runs' results (ent.BulkRun).
	DB    *store.DB
	IDs   *identity.Service
	Nodes *nodes.Service
	Ops   *conductor.Ops
	// Runbooks and Allocations back the self-service pages.
	Runbooks    *runbooks.Service
	Allocations *allocations.Service
	// Campaigns roll a runbook over nodes: the node list's runbook action
	// and the campaign pages.
	Campaigns *campaigns.Service
	// Wipes reads wipe records for the node and wipe record pages.
	Wipes *wipes.Service
	// AgentLogs reads the ramdisk agent's logs of failed runs for the
	// node page; nil when the server keeps none.
	AgentLogs *agentlogs.Service
	// Ports creates the ports the enrol form lists.
	Ports *ports.Service
	// Firmware offers uploaded images to the runbook editor.
	Firmware *fwimages.Store
	// DeployImages are the images the Deploy panel offers (serve
	// --deploy-images).
	DeployImages []deployimages.Image
	// Leasing backs the offers, leases, owner and usage pages.
	Leasing *leasing.Service
	// Inbox backs the inbox, its threads and the header's unread count.
	Inbox *inbox.Service
	// PolicyStatus is the override status system users see in the header.
	PolicyStatus func() string
	// Admin backs the admin console.
	Admin    *Admin
	Guard    *guard.Guard
	Sessions *Sessions
	SSO      SSO // nil when OIDC is not configured
	// RolesMaxAge is how long an SSO session acts on the roles its
	// provider last gave before asking again; zero means
	// DefaultRolesMaxAge.
	RolesMaxAge time.Duration
	Log         *slog.Logger
	refreshing  singleflight.Group
	// facets shares the node list's pick-list counts for a few seconds.
	facets facetCache
}

const sessionLocal = "anvil.session"

// Register mounts the portal on app.
func (p *Portal) Register(app *fiber.App) {
	// Ahead of every route registered after it: the portal's, and the
	// API's, which lose nothing by them.
	app.Use(securityHeaders)
	// A change through this replica (portal or API) drops the shared
	// pick-list counts, so whoever made it sees it counted at once.
	app.Use(func(c *fiber.Ctx) error {
		err := c.Next()
		if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
			p.facets.forget()
		}
		return err
	})
	app.Get("/static/:hash/:name", serveStatic)
	// The session (and its CSRF check) wraps portal routes only: the JSON
	// API authenticates with tokens and has no cookies to forge.
	s := p.session
	app.Get("/login", s, p.loginPage)
	app.Post("/login", s, p.login)
	app.Post("/logout", s, p.logout)
	app.Get("/auth/oidc/login", s, p.ssoStart)
	app.Get("/auth/oidc/callback", s, p.ssoCallback)
	// The provider calls it, server to server: no session, no CSRF token;
	// the logout token's signature is the proof.
	app.Post("/auth/oidc/backchannel-logout", p.backchannelLogout)
	app.Get("/", browsersOnly)
	app.Get("/nodes", s, p.signedIn, p.home)
	app.Post("/nodes/bulk", s, p.signedIn, p.bulkPage)
	app.Post("/nodes/bulk/run", s, p.signedIn, p.bulkRun)
	app.Get("/nodes/bulk/results/:token", s, p.signedIn, p.bulkResults)
	app.Get("/nodes/bulk/results/:token/progress", s, p.signedIn, p.bulkProgress)
	app.Get("/nodes/bulk/:step?", p.bulkAgain)
	// Before /nodes/:id, which would take "new" for a node's name.
	app.Get("/nodes/new", s, p.signedIn, p.newNodePage)
	app.Post("/nodes/new", s, p.signedIn, p.enrol)
	app.Get("/nodes/new/driver", s, p.signedIn, p.enrolDriver)
	app.Post("/nodes/new/test", s, p.signedIn, p.enrolTest)
	app.Get("/nodes/import", s, p.signedIn, p.importPage)
	app.Post("/nodes/import", s, p.signedIn, p.importNodes)
	app.Get("/nodes/:id", s, p.signedIn, p.nodePage)
	app.Get("/nodes/:id/status", s, p.signedIn, p.nodeStatus)
	app.Get("/nodes/:id/runs/:run", s, p.signedIn, p.nodeRunPage)
	app.Post("/nodes/:id/power", s, p.signedIn, p.nodePower)
	app.Post("/nodes/:id/power/cancel", s, p.signedIn, p.nodePowerCancel)
	app.Post("/nodes/:id/clean", s, p.signedIn, p.nodeClean)
	app.Post("/nodes/:id/runbook", s, p.signedIn, p.nodeRunbook)
	app.Post("/nodes/:id/provision", s, p.signedIn, p.nodeProvision)
	app.Post("/nodes/:id/deploy", s, p.signedIn, p.nodeDeploy)
	app.Post("/nodes/:id/undeploy", s, p.signedIn, p.nodeUndeploy)
	app.Post("/nodes/:id/tenancy", s, p.signedIn, p.nodeTenancy)
	app.Get("/nodes/:id/tenancy/check", s, p.signedIn, p.nodeTenancyCheck)
	app.Post("/nodes/:id/retry", s, p.signedIn, p.nodeRetry)
	app.Post("/nodes/:id/notify", s, p.signedIn, p.nodeNotify)
	app.Post("/nodes/:id/maintenance", s, p.signedIn, p.nodeMaintenance)
	app.Post("/nodes/:id/lifecycle", s, p.signedIn, p.nodeLifecycle)
	app.Post("/nodes/:id/traits", s, p.signedIn, p.nodeTraits)
	app.Post("/nodes/:id/retire", s, p.signedIn, p.nodeRetire)
	app.Post("/nodes/:id/delete", s, p.signedIn, p.nodeDelete)
	app.Post("/nodes/:id/bmc", s, p.signedIn, p.nodeBMC)
	app.Post("/nodes/:id/test-bmc", s, p.signedIn, p.nodeTestBMC)
	app.Get("/nodes/:id/console", s, p.signedIn, p.consolePage)
	app.Get("/nodes/:id/screenshot", s, p.signedIn, p.nodeScreenshot)
	app.Get("/nodes/:id/agent_logs/:name", s, p.signedIn, p.nodeAgentLog)
	app.Get("/nodes/:id/console/ws", s, p.signedIn, p.consoleSocket)
	app.Post("/nodes/:id/console/state", s, p.signedIn, p.nodeConsoleState)
	app.Get("/runbooks", s, p.signedIn, p.runbooksPage)
	app.Get("/runbooks/new", s, p.signedIn, p.newRunbook)
	app.Post("/runbooks/new", s, p.signedIn, p.saveRunbook)
	app.Get("/runbooks/:name/edit", s, p.signedIn, p.editRunbook)
	app.Post("/runbooks/:name/edit", s, p.signedIn, p.saveRunbook)
	app.Post("/runbooks/:name/delete", s, p.signedIn, p.deleteRunbook)
	app.Get("/runbooks/:name/nodes", s, p.signedIn, p.runbookNodes)
	app.Post("/runbooks/:name/nodes", s, p.signedIn, p.addRunbookTrait)
	app.Get("/campaigns", s, p.signedIn, p.campaignsPage)
	app.Get("/campaigns/:id", s, p.signedIn, p.campaignPage)
	app.Get("/wipes/:id", s, p.signedIn, p.wipePage)
	app.Get("/campaigns/:id/live", s, p.signedIn, p.campaignLive)
	app.Post("/campaigns/:id/state", s, p.signedIn, p.campaignState)
	app.Post("/campaigns/:id/approve", s, p.signedIn, p.campaignApprove)
	app.Post("/campaigns/:id/delete", s, p.signedIn, p.campaignDelete)
	app.Post("/campaigns/:id/retry", s, p.signedIn, p.campaignRetry)
	app.Get("/allocations", s, p.signedIn, p.allocationsPage)
	app.Get("/allocations/new", s, p.signedIn, p.requestNodePage)
	app.Post("/allocations", s, p.signedIn, p.requestNode)
	app.Post("/allocations/:id/release", s, p.signedIn, p.releaseAllocation)
	app.Get("/offers", s, p.signedIn, p.offersPage)
	app.Post("/offers/:id/claim", s, p.signedIn, p.claimOffer)
	app.Get("/leases", s, p.signedIn, p.leasesPage)
	// Before /leases/:id/…, which would take "owner" and "usage" for ids.
	app.Get("/leases/owner", s, p.signedIn, p.ownerPage)
	app.Post("/leases/owner", s, p.signedIn, p.ownerSelect)
	app.Post("/leases/owner/offer", s, p.signedIn, p.offerNodes)
	app.Get("/leases/usage", s, p.signedIn, p.usagePage)
	app.Get("/leases/usage.csv", s, p.signedIn, p.usageCSV)
	app.Post("/leases/:id/extend", s, p.signedIn, p.extendLease)
	app.Post("/leases/:id/return", s, p.signedIn, p.returnLease)
	app.Get("/inbox", s, p.signedIn, p.inboxPage)
	app.Post("/inbox/read", s, p.signedIn, p.inboxRead)
	app.Post("/inbox/mail", s, p.signedIn, p.inboxMail)
	app.Get("/inbox/threads/:id", s, p.signedIn, p.threadPage)
	app.Post("/inbox/threads/:id/reply", s, p.signedIn, p.threadReply)
	app.Post("/inbox/threads/:id/close", s, p.signedIn, p.threadClose)
	app.Get("/admin/policy", s, p.signedIn, p.policyPage)
	app.Post("/admin/policy", s, p.signedIn, p.policyUpload)
	app.Post("/admin/policy/apply", s, p.signedIn, p.policyApply)
	app.Post("/admin/policy/revert", s, p.signedIn, p.policyRevert)
	app.Post("/admin/policy/revisions/:rev/restore", s, p.signedIn, p.policyRestore)
	app.Get("/admin/policy/sample.yaml", s, p.signedIn, p.policySample)
	app.Get("/admin/policy/current.zip", s, p.signedIn, p.policyCurrent)
	app.Get("/admin/policy/presets/:name", s, p.signedIn, p.policyPresetFile)
	app.Post("/admin/policy/presets/:name/preview", s, p.signedIn, p.policyPresetPreview)
	app.Get("/admin/users", s, p.signedIn, p.usersPage)
	app.Post("/admin/users", s, p.signedIn, p.createUser)
	app.Post("/admin/users/:name/grant", s, p.signedIn, p.grantRole)
	app.Post("/admin/users/:name/revoke", s, p.signedIn, p.revokeRole)
	app.Post("/admin/users/:name/password", s, p.signedIn, p.resetPassword)
	app.Post("/admin/users/:name/delete", s, p.signedIn, p.deleteUser)
	app.Get("/admin/tokens", s, p.signedIn, p.tokensPage)
	app.Get("/admin/sessions", s, p.signedIn, p.sessionsPage)
	app.Post("/admin/sessions/:ref/revoke", s, p.signedIn, p.revokeSession)
	app.Get("/audit", s, p.signedIn, p.auditPage)
	app.Get("/audit/export.csv", s, p.signedIn, p.auditExport)
	app.Post("/admin/tokens/:id/revoke", s, p.signedIn, p.revokeAnyToken)
	app.Post("/scope", s, p.signedIn, p.switchScope)
	app.Get("/account", s, p.signedIn, p.account)
	app.Get(passwordPath, s, p.signedIn, p.passwordPage)
	app.Post(passwordPath, s, p.signedIn, p.changePassword)
	app.Post("/account/tokens", s, p.signedIn, p.createToken)
	app.Post("/account/tokens/:id/revoke", s, p.signedIn, p.revokeToken)
	app.Post("/account/keys", s, p.signedIn, p.addSSHKey)
	app.Post("/account/keys/:id/delete", s, p.signedIn, p.deleteSSHKey)
}

func serveStatic(c *fiber.Ctx) error {
	a, ok := static.Lookup(c.Params("hash"), c.Params("name"))
	if !ok {
		return fiber.ErrNotFound
	}
	c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	c.Set(fiber.HeaderContentType, a.ContentType)
	return c.SendString(a.Body)
}

// session loads the cookie, refuses a state-changing request without the
// session's CSRF token, and puts a signed-in user's principal into the
// request context.
//
// A request from a page whose session has since timed out or been ended
// is sent to sign in again and not performed, whatever route it is for.
// It must still carry that session's token, so a forged one stays refused.
func (p *Portal) session(c *fiber.Ctx) error {
	if err := checkText(c); err != nil {
		return err
	}
	sess := p.Sessions.Load(c)
	c.Locals(sessionLocal, sess)
	changes := c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead
	if changes {
		want := sess.CSRF
		if sess.Expired {
			want = sess.staleCSRF
		}
		if !csrfIs(c, want) {
			return c.Status(403).SendString("The form was stale or forged (CSRF token missing or wrong). Reload the page and try again.")
		}
		if sess.Expired {
			if err := p.keepDropped(c, sess); err != nil {
				return err
			}
			return p.signInAgain(c)
		}
	}
	if sess.User == "" {
		return c.Next()
	}
	rec, err := p.IDs.Session(c.UserContext(), sess.ID, sess.Principal())
	if err != nil {
		return err
	}
	var pr *policies.Principal
	switch {
	case rec == nil:
		err = errors.New("logged out, or the account's password or roles changed")
	case sess.Method == "oidc":
		if sess.Assignments, err = p.ssoRoles(c.UserContext(), sess, rec); err == nil {
			pr, err = p.principal(c.UserContext(), sess)
		}
	default:
		pr, err = p.principal(c.UserContext(), sess)
	}
	if errors.Is(err, errProviderDown) {
		return errs.Unavailable("%v", err)
	}
	if err != nil {
		// Roles revoked or the account is gone: the session ends. Its
		// cookie stays until the sign-in page replaces it, so that a late
		// request from any tab is sent to sign in, not refused as forged.
		p.Log.Info("session ended", "user", sess.User, "reason", err)
		c.Locals(sessionLocal, &Session{CSRF: randomToken(), Expired: true})
		if changes {
			return p.signInAgain(c)
		}
		return c.Next()
	}
	c.SetUserContext(policies.WithPrincipal(c.UserContext(), pr))
	if now := time.Now(); now.Sub(time.Unix(sess.Seen, 0)) > time.Minute {
		sess.Seen = now.Unix()
		if err := p.Sessions.Save(c, sess); err != nil {
			return err
		}
		if err := p.IDs.SessionSeen(c.UserContext(), sess.ID); err != nil {
			return err
		}
	}
	return c.Next()
}

func (p *Portal) principal(ctx context.Context, s *Session) (*policies.Principal, error) {
	if s.Method != "oidc" {
		return p.IDs.PrincipalFor(ctx, s.User, s.Scope, "session")
	}
	var roles []string
	for _, a := range s.Assignments {
		if a.Scope == s.Scope {
			roles = append(roles, a.Role)
		}
	}
	if len(roles) == 0 {
		return nil, errs.Forbidden("no role on %s", s.Scope)
	}
	return &policies.Principal{User: s.User, Issuer: s.Issuer, Subject: s.Subject, System: s.Scope.System, Project: s.Scope.Project,
		Roles: policies.ExpandRoles(roles), Method: "oidc"}, nil
}

func sessionOf(c *fiber.Ctx) *Session { return c.Locals(sessionLocal).(*Session) }

// flashTo sends the browser to a page (POST, redirect, GET) that shows
// msg once; an empty msg only redirects.
func (p *Portal) flashTo(c *fiber.Ctx, to, msg string) error {
	if msg != "" {
		sess := sessionOf(c)
		sess.Flash = msg
		if err := p.Sessions.Save(c, sess); err != nil {
			return err
		}
	}
	return c.Redirect(to, fiber.StatusSeeOther)
}

// browsersOnly sends a browser at "/" to the portal and lets every other
// client through to the API's version discovery there.
func browsersOnly(c *fiber.Ctx) error {
	if !strings.Contains(c.Get(fiber.HeaderAccept), "text/html") {
		return c.Next()
	}
	return c.Redirect("/nodes", fiber.StatusSeeOther)
}

// signedIn lets a signed-in user through, and sends an account that must
// change its password to the page that changes it, whatever it asked
// for: nothing else works until it has.
func (p *Portal) signedIn(c *fiber.Ctx) error {
	pr := policies.PrincipalFrom(c.UserContext())
	switch {
	case pr == nil:
		return p.signInAgain(c)
	case pr.MustChangePassword && c.Path() != passwordPath:
		return p.changePasswordFirst(c)
	}
	return c.Next()
}

// changePasswordFirst sends the browser to the change-password page,
// with the way back to the page it asked for, as signInAgain does.
func (p *Portal) changePasswordFirst(c *fiber.Ctx) error {
	to := passwordPath
	next := c.OriginalURL()
	if c.Method() != fiber.MethodGet {
		next = samePage(c, c.Get(fiber.HeaderReferer))
	}
	if safeNext(next) && next != "/" {
		to += "?" + url.Values{"next": {next}}.Encode()
	}
	if c.Get("HX-Request") == "true" {
		c.Set("HX-Redirect", to)
		return c.SendStatus(fiber.StatusForbidden)
	}
	return c.Redirect(to, fiber.StatusSeeOther)
}

// signInAgain sends the browser to the sign-in page, saying why when its
// session ended, with the way back to the page the user was on: the page
// itself for a GET, else the page the form or htmx request came from.
func (p *Portal) signInAgain(c *fiber.Ctx) error {
	htmx := c.Get("HX-Request") == "true"
	next := "/"
	switch {
	case htmx:
		next = samePage(c, c.Get("HX-Current-URL"))
	case c.Method() == fiber.MethodGet:
		next = c.OriginalURL()
	default:
		next = samePage(c, c.Get(fiber.HeaderReferer))
	}
	q := url.Values{}
	if sessionOf(c).Expired {
		q.Set("error", loginErrExpired)
	}
	if safeNext(next) {
		q.Set("next", next)
	}
	to := "/login"
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	if htmx {
		// htmx would swap a redirect's target into the fragment; this
		// makes it load the sign-in page as the whole page instead.
		c.Set("HX-Redirect", to)
		return c.SendStatus(fiber.StatusUnauthorized)
	}
	return c.Redirect(to, fiber.StatusSeeOther)
}

// samePage is the path and query of a page of this site named by a full
// URL (Referer, HX-Current-URL), or "/" for anything else.
func samePage(c *fiber.Ctx, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host != c.Hostname() || u.Scheme != "http" && u.Scheme != "https" {
		return "/"
	}
	return u.RequestURI()
}

// safeNext accepts only a plain path of this site as a place to return
// to, never another site or the sign-in page itself. Browsers drop tabs
// and newlines from a URL and read a backslash as a slash, so "/\t/evil"
// and "/\\evil" lead to evil as surely as "//evil" does; and a hop that
// decodes the target makes "/%09/evil" or "/%2f/evil" one of those. So the
// target must parse as a path alone (no scheme, host or user), and it
// and every decoding of it may hold no control character or backslash,
// and its path no "//" anywhere.
func safeNext(next string) bool {
	u, err := url.Parse(next)
	if err != nil || !strings.HasPrefix(next, "/") || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return false
	}
	// Each decoding is shorter than the last until one changes nothing.
	for s := next; ; {
		p, _, _ := strings.Cut(s, "?")
		p, _, _ = strings.Cut(p, "#")
		if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) || strings.ContainsRune(s, '\\') || strings.Contains(p, "//") {
			return false
		}
		d, err := url.PathUnescape(s)
		if err != nil {
			return false
		}
		if d == s {
			break
		}
		s = d
	}
	return !strings.HasPrefix(path.Clean(u.Path), "/login")
}

func render(c *fiber.Ctx, status int, comp templ.Component) error {
	c.Type("html", "utf-8")
	c.Status(status)
	return comp.Render(c.UserContext(), c.Response().BodyWriter())
}

// page fills the header every signed-in page shows.
func (p *Portal) page(c *fiber.Ctx, title string) (views.Page, error) {
	sess := sessionOf(c)
	pg := views.Page{Title: title, CSRF: sess.CSRF, Path: c.Path()}
	pr := policies.PrincipalFrom(c.UserContext())
	if pr == nil {
		return pg, nil
	}
	pg.User, pg.Scope = pr.User, pr.Scope()
	if sess.Flash != "" || sess.Dropped != nil {
		pg.Flash, sess.Flash = sess.Flash, ""
		if sess.Dropped != nil && c.Get("HX-Request") != "true" {
			pg.Dropped, sess.Dropped = droppedView(sess.Dropped), nil
		}
		if err := p.Sessions.Save(c, sess); err != nil {
			return pg, err
		}
	}
	pg.System = pr.System
	if p.Inbox != nil {
		n, err := p.Inbox.Unread(c.UserContext())
		if err != nil {
			return pg, err
		}
		pg.Unread = n
	}
	if pr.System && p.PolicyStatus != nil {
		pg.PolicyStatus = p.PolicyStatus()
	}
	scopes, err := p.scopes(c.UserContext(), sess)
	if err != nil {
		return pg, err
	}
	for _, s := range scopes {
		pg.Scopes = append(pg.Scopes, views.ScopeOption{Value: scopeValue(s), Label: s.String(), Active: s == sess.Scope})
	}
	return pg, nil
}

func (p *Portal) scopes(ctx context.Context, s *Session) ([]identity.Scope, error) {
	if s.Method != "oidc" {
		return p.IDs.Scopes(ctx, s.User)
	}
	var out []identity.Scope
	for _, a := range s.Assignments {
		if !slices.Contains(out, a.Scope) {
			out = append(out, a.Scope)
		}
	}
	return out, nil
}

func scopeValue(s identity.Scope) string {
	if s.System {
		return "system"
	}
	return "project:" + s.Project
}

func parseScope(v string) (identity.Scope, bool) {
	if v == "system" {
		return identity.Scope{System: true}, true
	}
	if p, ok := strings.CutPrefix(v, "project:"); ok && p != "" {
		return identity.Scope{Project: p}, true
	}
	return identity.Scope{}, false
}

func (p *Portal) loginPage(c *fiber.Ctx) error {
	if policies.PrincipalFrom(c.UserContext()) != nil {
		return c.Redirect("/nodes", fiber.StatusSeeOther)
	}
	sess := sessionOf(c)
	// The anonymous session exists only to carry the login form's CSRF token.
	if err := p.Sessions.Save(c, sess); err != nil {
		return err
	}
	next := c.Query("next")
	if !safeNext(next) {
		next = ""
	}
	return render(c, 200, views.Login(views.Page{Title: "Sign in", CSRF: sess.CSRF, Error: loginErrors[c.Query("error")]}, "", next, p.SSO != nil))
}

func (p *Portal) login(c *fiber.Ctx) error {
	name, pw := strings.TrimSpace(c.FormValue("username")), c.FormValue("password")
	pr, err := p.IDs.Login(c.UserContext(), name, pw, clientip.Of(c), nil)
	if err == nil {
		return p.startSession(c, Fresh(pr.User, identity.Scope{System: pr.System, Project: pr.Project}), pr.MustChangePassword)
	}
	msg, status := identity.ErrInvalidLogin.Error(), 401
	switch {
	case errors.Is(err, identity.ErrInvalidLogin):
	case errs.Status(err) == 429:
		msg, status = err.Error(), 429
	case errs.Status(err) == 400 || errs.Status(err) == 403:
		// Right password, but no scope to act in (no roles, or several
		// projects without a default): sign in to the first project.
		scopes, serr := p.IDs.Scopes(c.UserContext(), name)
		if serr == nil && len(scopes) > 0 {
			if pr, err = p.IDs.Login(c.UserContext(), name, pw, clientip.Of(c), &scopes[0]); err == nil {
				return p.startSession(c, Fresh(pr.User, scopes[0]), pr.MustChangePassword)
			}
		}
		msg, status = "This account holds no role on any project or the system; ask an administrator.", 403
	default:
		return err
	}
	sess := sessionOf(c)
	next := c.FormValue("next")
	if !safeNext(next) {
		next = ""
	}
	return render(c, status, views.Login(views.Page{Title: "Sign in", CSRF: sess.CSRF, Error: msg}, name, next, p.SSO != nil))
}

// startSession records a new sign-in on the server and hands the browser
// its cookie; an account that must change its password goes to the page
// that changes it first, then to where it was going.
func (p *Portal) startSession(c *fiber.Ctx, s *Session, mustChange bool) error {
	// What a timed-out page of the same person sent is offered again;
	// nobody else's.
	d, err := p.Sessions.TakeDropped(c)
	if err != nil {
		return err
	}
	if d != nil && d.User == s.Principal() {
		s.Dropped = d
	}
	id, err := p.IDs.StartSession(c.UserContext(), s.Principal(), clientip.Of(c), AbsoluteTimeout, s.sso)
	if err != nil {
		return err
	}
	s.ID = id
	if err := p.Sessions.Save(c, s); err != nil {
		return err
	}
	to := "/nodes"
	if next := c.FormValue("next"); safeNext(next) {
		to = next
	}
	if mustChange {
		to = passwordPath + "?" + url.Values{"next": {to}}.Encode()
	}
	return c.Redirect(to, fiber.StatusSeeOther)
}

func (p *Portal) logout(c *fiber.Ctx) error {
	// Ending the record, not only the cookie, makes a copy of the cookie
	// worthless too.
	if sess := sessionOf(c); sess.ID != "" {
		if err := p.IDs.EndSession(c.UserContext(), sess.ID); err != nil {
			return err
		}
	}
	if err := p.Sessions.Clear(c); err != nil {
		return err
	}
	return c.Redirect("/login", fiber.StatusSeeOther)
}

func (p *Portal) switchScope(c *fiber.Ctx) error {
	sess := sessionOf(c)
	sc, ok := parseScope(c.FormValue("scope"))
	if !ok {
		return c.Status(400).SendString("scope: choose the system or a project")
	}
	scopes, err := p.scopes(c.UserContext(), sess)
	if err != nil {
		return err
	}
	if !slices.Contains(scopes, sc) {
		return c.Status(403).SendString("You hold no role on " + sc.String())
	}
	sess.Scope = sc
	sess.Seen = time.Now().Unix()
	if err := p.Sessions.Save(c, sess); err != nil {
		return err
	}
	return c.Redirect("/nodes", fiber.StatusSeeOther)
}
