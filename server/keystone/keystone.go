// Package keystone serves the part of OpenStack Identity (Keystone) v3
// that OpenStack clients need to sign in to Anvil with a password:
// version discovery at /identity and POST /identity/v3/auth/tokens,
// which checks a local account's password and answers with an Anvil API
// token and a service catalog naming Anvil's own endpoints. keystoneauth
// (openstacksdk, the openstack CLI, esisdk), gophercloud and tempest then
// work with auth_type password and auth_url <anvil>/identity/v3, as they
// do against a cloud.
//
// Only what such a client sends is served: the password method, a
// project, system or default scope, one domain (Default). Users, projects
// and roles are managed with anvil's own CLI and portal, not through
// Keystone's API.
package keystone

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
)

// Prefix is where the Identity API is served.
const Prefix = "/identity"

// TokenLifetime is Keystone's default token expiration ([token]
// expiration, one hour): clients sign in again when it runs out.
const TokenLifetime = time.Hour

// TokenDescription marks the tokens minted here among a user's tokens
// (the portal's token list shows it), and lets a login drop the user's
// expired ones.
const TokenDescription = "OpenStack client sign-in (Identity v3)"

// Domain is the one domain Anvil has: local accounts and project names
// live in it, so a client's user_domain_name and project_domain_name are
// Default.
var domain = fiber.Map{"id": "default", "name": "Default"}

// Endpoint is one service in the catalog: Path is joined to the base URL
// the client reached Anvil at.
type Endpoint struct {
	Type, Name, Path string
}

// Handler serves the Identity API.
type Handler struct {
	IDs *identity.Service
	// Catalog lists the services a token's catalog names, besides
	// identity itself.
	Catalog []Endpoint
}

// Register mounts the routes on app. They carry their own credentials:
// none of the API's authentication runs before them. The app's routing
// is not strict, so each also answers with a trailing slash, as
// keystoneauth and gophercloud send it.
func (h *Handler) Register(app fiber.Router) {
	app.Get(Prefix, h.versions)
	app.Get(Prefix+"/v3", h.version)
	app.Post(Prefix+"/v3/auth/tokens", h.issue)
}

func versionDoc(base string) fiber.Map {
	return fiber.Map{
		"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
		"links":       []fiber.Map{{"rel": "self", "href": base + Prefix + "/v3/"}},
		"media-types": []fiber.Map{{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}},
	}
}

// versions is Keystone's root document: 300 Multiple Choices listing v3,
// which keystoneauth's discovery follows.
func (h *Handler) versions(c *fiber.Ctx) error {
	return c.Status(http.StatusMultipleChoices).JSON(fiber.Map{"versions": fiber.Map{"values": []fiber.Map{versionDoc(c.BaseURL())}}})
}

func (h *Handler) version(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"version": versionDoc(c.BaseURL())})
}

// tokenRequest is the body of POST /v3/auth/tokens, as far as Anvil reads it.
type tokenRequest struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password struct {
				User struct {
					ID       string     `json:"id"`
					Name     string     `json:"name"`
					Password string     `json:"password"`
					Domain   *domainRef `json:"domain"`
				} `json:"user"`
			} `json:"password"`
		} `json:"identity"`
		Scope json.RawMessage `json:"scope"`
	} `json:"auth"`
}

type domainRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// known says whether d names Anvil's one domain (or nothing).
func (d *domainRef) known() bool {
	return d == nil || (d.ID == "" || strings.EqualFold(d.ID, "default")) && (d.Name == "" || strings.EqualFold(d.Name, "default"))
}

type scopeRequest struct {
	Project *struct {
		ID     string     `json:"id"`
		Name   string     `json:"name"`
		Domain *domainRef `json:"domain"`
	} `json:"project"`
	System *struct {
		All bool `json:"all"`
	} `json:"system"`
	Domain *domainRef `json:"domain"`
}

// scope reads the requested scope: nil asks for the user's default (the
// system when it holds a system role, else its only project).
func scopeOf(raw json.RawMessage) (*identity.Scope, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `"unscoped"` {
		return nil, nil
	}
	var s scopeRequest
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, errs.BadRequest("auth.scope", "auth.scope is not a scope object: %v", err)
	}
	switch {
	case s.System != nil && s.Project == nil && s.Domain == nil:
		if !s.System.All {
			return nil, errs.BadRequest("auth.scope.system", "auth.scope.system must be {\"all\": true}")
		}
		return &identity.Scope{System: true}, nil
	case s.Project != nil && s.System == nil && s.Domain == nil:
		name := s.Project.Name
		if s.Project.ID != "" {
			// A project's id and name are the same in Anvil.
			if name != "" && name != s.Project.ID {
				return nil, errs.BadRequest("auth.scope.project", "auth.scope.project: id %q and name %q name different projects", s.Project.ID, name)
			}
			name = s.Project.ID
		}
		if name == "" {
			return nil, errs.BadRequest("auth.scope.project", "auth.scope.project needs the project's id or name")
		}
		if !s.Project.Domain.known() {
			return nil, errs.Unauthorized("Anvil has one domain, Default; the project's domain names another")
		}
		return &identity.Scope{Project: name}, nil
	case s.Domain != nil && s.Project == nil && s.System == nil:
		return nil, errs.Unauthorized("Anvil has no domain roles: scope the token to a project or the system")
	}
	return nil, errs.BadRequest("auth.scope", "name exactly one of project or system in auth.scope")
}

// issue checks a password and answers with a token for the asked scope:
// 201, the token in X-Subject-Token, its description in the body.
func (h *Handler) issue(c *fiber.Ctx) error {
	var req tokenRequest
	if err := json.Unmarshal(c.Body(), &req); err != nil {
		return fail(c, errs.BadRequest("auth", "the body is not an Identity v3 token request ({\"auth\": {…}}): %v", err))
	}
	id := req.Auth.Identity
	if !slices.Contains(id.Methods, "password") {
		return fail(c, errs.Unauthorized("Anvil signs in OpenStack clients with the password method; %v is not supported", id.Methods))
	}
	u := id.Password.User
	name := u.Name
	if name == "" {
		// Anvil's user ids are its user names: a token's user.id says so.
		name = u.ID
	}
	if name == "" || u.Password == "" {
		return fail(c, errs.BadRequest("auth.identity.password.user", "auth.identity.password.user needs the user's name and password"))
	}
	if !u.Domain.known() {
		return fail(c, errs.Unauthorized("%s", identity.ErrInvalidLogin))
	}
	sc, err := scopeOf(req.Auth.Scope)
	if err != nil {
		return fail(c, err)
	}
	ctx := c.UserContext()
	p, err := h.IDs.Login(ctx, name, u.Password, clientip.Of(c), sc)
	switch {
	case errors.Is(err, identity.ErrInvalidLogin):
		return fail(c, errs.Unauthorized("%s", err))
	case errs.Status(err) == http.StatusForbidden:
		// Keystone answers a scope the user holds no role on with 401.
		return fail(c, errs.Unauthorized("%s", err))
	case err != nil:
		return fail(c, err)
	case p.MustChangePassword:
		return fail(c, errs.Forbidden("%s", identity.PasswordChangeMessage(name)))
	}
	secret, info, err := h.IDs.LoginToken(ctx, p, TokenLifetime, TokenDescription)
	if err != nil {
		return fail(c, err)
	}
	c.Set("X-Subject-Token", secret)
	return c.Status(http.StatusCreated).JSON(fiber.Map{"token": h.token(c.BaseURL(), p, info)})
}

// token is Keystone's description of a token.
func (h *Handler) token(base string, p *policies.Principal, info identity.TokenInfo) fiber.Map {
	roles := make([]fiber.Map, 0, len(p.Roles))
	for _, r := range p.Roles {
		roles = append(roles, fiber.Map{"id": r, "name": r})
	}
	expires := ""
	if info.ExpiresAt != nil {
		expires = info.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000000Z")
	}
	t := fiber.Map{
		"methods":    []string{"password"},
		"user":       fiber.Map{"id": p.User, "name": p.User, "domain": domain, "password_expires_at": nil},
		"roles":      roles,
		"audit_ids":  []string{strings.ReplaceAll(uuid.NewString(), "-", "")[:22]},
		"issued_at":  info.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": expires,
		"catalog":    h.catalog(base),
	}
	if p.System {
		t["system"] = fiber.Map{"all": true}
	} else {
		t["project"] = fiber.Map{"id": p.Project, "name": p.Project, "domain": domain}
		t["is_domain"] = false
	}
	return t
}

// catalog names identity and the configured services, each at the base
// URL the client reached Anvil at, in every interface keystoneauth asks
// for.
func (h *Handler) catalog(base string) []fiber.Map {
	all := append([]Endpoint{{Type: "identity", Name: "keystone", Path: Prefix + "/v3"}}, h.Catalog...)
	out := make([]fiber.Map, 0, len(all))
	for _, e := range all {
		var eps []fiber.Map
		for _, iface := range []string{"public", "internal", "admin"} {
			eps = append(eps, fiber.Map{"id": e.Name + "-" + iface, "interface": iface, "region": "RegionOne", "region_id": "RegionOne", "url": base + e.Path})
		}
		out = append(out, fiber.Map{"id": e.Name, "type": e.Type, "name": e.Name, "endpoints": eps})
	}
	return out
}

// fail answers in Keystone's error shape, which keystoneauth reads.
func fail(c *fiber.Ctx, err error) error {
	status := errs.Status(err)
	if status >= 500 {
		// The app's error handler logs it and tells the client nothing of it.
		return err
	}
	return c.Status(status).JSON(fiber.Map{"error": fiber.Map{"code": status, "title": http.StatusText(status), "message": err.Error()}})
}
