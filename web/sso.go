package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/oauth2"

	"github.com/anvilproject/anvil/server/identity"
)

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
	fail := func(msg string) error {
		return c.Redirect("/login?error="+msg, fiber.StatusSeeOther)
	}
	if sess.State == "" || subtle.ConstantTimeCompare([]byte(c.Query("state")), []byte(sess.State)) != 1 {
		return fail("The sign-in could not be verified (state mismatch); try again.")
	}
	if e := c.Query("error"); e != "" {
		return fail("The identity provider refused the sign-in: " + e)
	}
	user, as, err := p.SSO.Exchange(c.UserContext(), c.Query("code"), sess.Verifier, sess.Nonce)
	if err != nil {
		p.Log.Warn("oidc sign-in failed", "err", err)
		return fail("The identity provider's answer could not be verified; try again.")
	}
	var scopes []identity.Scope
	for _, a := range as {
		scopes = append(scopes, a.Scope)
	}
	if len(scopes) == 0 {
		return fail("Your account holds no Anvil role; ask an administrator.")
	}
	first := scopes[0]
	for _, s := range scopes {
		if s.System {
			first = s
		}
	}
	return p.startSession(c, Fresh(user, "oidc", first, as))
}
