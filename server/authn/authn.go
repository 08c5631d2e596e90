// Package authn turns the credentials on an HTTP request into a
// principal: an Anvil API token or an OIDC access/ID token in
// X-Auth-Token or Authorization: Bearer, or a local account over HTTP
// Basic. It decides who the caller is, never what it may do.
package authn

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
)

// JWTVerifier verifies a bearer JWT from the configured OIDC issuer.
type JWTVerifier interface {
	PrincipalFromJWT(ctx context.Context, raw string) (*policies.Principal, error)
}

// API authenticates JSON API requests.
type API struct {
	IDs *identity.Service
	// OIDC verifies bearer JWTs; nil when no issuer is configured.
	OIDC JWTVerifier
}

// Principal returns the caller of c, or a 401 naming what was wrong. A
// request that carries no credentials at all gets (nil, nil).
func (a *API) Principal(c *fiber.Ctx) (*policies.Principal, error) {
	ctx := c.UserContext()
	if tok := strings.TrimSpace(c.Get("X-Auth-Token")); tok != "" {
		return a.bearer(ctx, tok)
	}
	authz := c.Get(fiber.HeaderAuthorization)
	scheme, cred, _ := strings.Cut(authz, " ")
	switch {
	case authz == "":
		return nil, nil
	case strings.EqualFold(scheme, "bearer"):
		return a.bearer(ctx, strings.TrimSpace(cred))
	case strings.EqualFold(scheme, "basic"):
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil {
			return nil, errs.Unauthorized("the Basic credentials are not valid base64")
		}
		user, pw, ok := strings.Cut(string(raw), ":")
		if !ok {
			return nil, errs.Unauthorized("the Basic credentials have no password")
		}
		var scope *identity.Scope
		if p := strings.TrimSpace(c.Get("X-Project-Id")); p != "" {
			scope = &identity.Scope{Project: p}
		}
		p, err := a.IDs.BasicAuth(ctx, user, pw, clientip.Of(c), scope)
		if err == identity.ErrInvalidLogin {
			return nil, errs.Unauthorized("%s", err)
		}
		return p, err
	}
	return nil, errs.Unauthorized("unsupported Authorization scheme %q; use Bearer, Basic or X-Auth-Token", scheme)
}

func (a *API) bearer(ctx context.Context, tok string) (*policies.Principal, error) {
	if strings.HasPrefix(tok, identity.TokenPrefix) {
		return a.IDs.VerifyToken(ctx, tok)
	}
	if a.OIDC != nil && strings.Count(tok, ".") == 2 {
		return a.OIDC.PrincipalFromJWT(ctx, tok)
	}
	return nil, errs.Unauthorized("the token is not valid")
}

// Require is fiber middleware for the API: it puts the principal into the
// request context and answers 401 to a request without credentials.
// Version discovery (the group's root) stays open, as in Ironic. An open
// path ending in "/*" admits any one further path segment, as Ironic's
// '/v1/heartbeat/[a-z0-9\-]+' route does.
func (a *API) Require(open ...string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		for _, o := range open {
			if c.Path() == o || isOpenSegment(c.Path(), o) {
				return c.Next()
			}
		}
		p, err := a.Principal(c)
		if err != nil {
			if errs.Status(err) == 401 {
				c.Set(fiber.HeaderWWWAuthenticate, `Basic realm="anvil", charset="UTF-8"`)
			}
			return err
		}
		if p == nil {
			c.Set(fiber.HeaderWWWAuthenticate, `Basic realm="anvil", charset="UTF-8"`)
			return errs.Unauthorized("authentication required: send X-Auth-Token, Authorization: Bearer, or Basic credentials")
		}
		c.SetUserContext(policies.WithPrincipal(c.UserContext(), p))
		return c.Next()
	}
}

func isOpenSegment(path, open string) bool {
	prefix, ok := strings.CutSuffix(open, "/*")
	if !ok {
		return false
	}
	rest, ok := strings.CutPrefix(path, prefix+"/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}
