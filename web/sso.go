package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/oauth2"

	"github.com/anvilproject/anvil/server/identity"
)

// Codes the SSO callback sends to the login page, which shows only the
// fixed message of a known code: the page never echoes text from the URL.
const (
	loginErrState      = "state"
	loginErrRefused    = "refused"
	loginErrUnverified = "unverified"
	loginErrNoRole     = "norole"
	loginErrExpired    = "expired"
)

var loginErrors = map[string]string{
	loginErrState:      "The sign-in could not be verified (state mismatch); try again.",
	loginErrRefused:    "The identity provider refused the sign-in.",
	loginErrUnverified: "The identity provider's answer could not be verified; try again.",
	loginErrNoRole:     "Your account holds no Anvil role; ask an administrator.",
	loginErrExpired:    "Your session expired; sign in again to go back to the page you were on.",
}

func (p *Portal) ssoStart(c *fiber.Ctx) error {
	if p.SSO == nil {
		return fiber.ErrNotFound
	}
	sess := sessionOf(c)
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	sess.State = base64.RawURLEncoding.EncodeToString(b)
	_, _ = rand.Read(b)
	sess.Nonce = base64.RawURLEncoding.EncodeToString(b)
	sess.Verifier = oauth2.GenerateVerifier()
	if err := p.Sessions.Save(c, sess); err != nil {
		return err
	}
	return c.Redirect(p.SSO.AuthCodeURL(sess.State, sess.Nonce, sess.Verifier), fiber.StatusSeeOther)
}

func (p *Portal) ssoCallback(c *fiber.Ctx) error {
	if p.SSO == nil {
		return fiber.ErrNotFound
	}
	sess := sessionOf(c)
	fail := func(code string) error {
		return c.Redirect("/login?error="+code, fiber.StatusSeeOther)
	}
	if sess.State == "" || subtle.ConstantTimeCompare([]byte(c.Query("state")), []byte(sess.State)) != 1 {
		return fail(loginErrState)
	}
	if e := c.Query("error"); e != "" {
		p.Log.Warn("oidc sign-in refused by the provider", "error", e, "description", c.Query("error_description"))
		return fail(loginErrRefused)
	}
	u, err := p.SSO.Exchange(c.UserContext(), c.Query("code"), sess.Verifier, sess.Nonce)
	if err != nil {
		p.Log.Warn("oidc sign-in failed", "err", err)
		return fail(loginErrUnverified)
	}
	var scopes []identity.Scope
	for _, a := range u.Assignments {
		scopes = append(scopes, a.Scope)
	}
	if len(scopes) == 0 {
		return fail(loginErrNoRole)
	}
	first := scopes[0]
	for _, s := range scopes {
		if s.System {
			first = s
		}
	}
	return p.startSession(c, FreshSSO(u, first))
}
