package web

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/oauth2"

	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/oidclogin"
)

// Codes the SSO callback sends to the login page, which shows only the
// fixed message of a known code: the page never echoes text from the URL.
const (
	loginErrState      = "state"
	loginErrRefused    = "refused"
	loginErrUnverified = "unverified"
	loginErrNoRole     = "norole"
	loginErrExpired    = "expired"
	loginErrDown       = "unavailable"
)

var loginErrors = map[string]string{
	loginErrState:      "The sign-in could not be verified (state mismatch); try again.",
	loginErrRefused:    "The identity provider refused the sign-in.",
	loginErrUnverified: "The identity provider's answer could not be verified; try again.",
	loginErrNoRole:     "Your account holds no Anvil role; ask an administrator.",
	loginErrExpired:    "Your session expired; sign in again to go back to the page you were on.",
	loginErrDown:       "Single sign-on is unavailable: the identity provider cannot be reached. Sign in with a local account, or try again later.",
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
	to, err := p.SSO.AuthCodeURL(sess.State, sess.Nonce, sess.Verifier)
	if err != nil {
		return c.Redirect("/login?error="+loginErrDown, fiber.StatusSeeOther)
	}
	return c.Redirect(to, fiber.StatusSeeOther)
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
	return p.startSession(c, FreshSSO(u, first), false)
}

// DefaultRolesMaxAge is how long an SSO session acts on the roles its
// provider last gave before it asks again.
const DefaultRolesMaxAge = 5 * time.Minute

// errProviderDown: the roles are due to be read again and the provider
// cannot be asked. The request is refused (fail closed) but the session
// is kept, so it resumes once the provider answers.
var errProviderDown = errors.New("the identity provider could not be reached to confirm your roles; try again shortly")

// ssoRoles returns the roles an SSO session acts on: those on record
// while younger than RolesMaxAge, else the ones the provider gives on a
// refresh. A refresh the provider refuses ends the session.
func (p *Portal) ssoRoles(ctx context.Context, sess *Session, rec *identity.PortalSession) ([]identity.Assignment, error) {
	maxAge := p.RolesMaxAge
	if maxAge <= 0 {
		maxAge = DefaultRolesMaxAge
	}
	if time.Since(rec.RolesAt) < maxAge {
		return rec.Assignments, nil
	}
	if p.SSO == nil {
		return nil, errors.New("single sign-on is no longer configured")
	}
	// One refresh per session at a time: a provider that rotates refresh
	// tokens refuses the second use of one, which would end the session
	// of a user whose page polls while another request refreshes.
	v, err, _ := p.refreshing.Do(sess.ID, func() (any, error) {
		// Detached from the request that happened to start it: the
		// others waiting on it need its outcome.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		fresh, err := p.SSO.Refresh(ctx, identity.SSOUser{Issuer: sess.Issuer, Subject: sess.Subject, Name: sess.User, RefreshToken: rec.RefreshToken})
		if err == nil {
			var stored bool
			if stored, err = p.IDs.RefreshedSSO(ctx, sess.ID, rec.RefreshToken, fresh); err != nil || stored {
				return fresh.Assignments, err
			}
		}
		if err != nil && !errors.Is(err, oidclogin.ErrGrantEnded) {
			p.Log.Warn("sso session: the roles could not be read again", "user", sess.User, "err", err)
			return nil, errProviderDown
		}
		// Refused, or refreshed by another replica meanwhile: what the
		// record holds now decides.
		now, rerr := p.IDs.Session(ctx, sess.ID, sess.Principal())
		if rerr != nil {
			return nil, rerr
		}
		if now != nil && now.RefreshToken != rec.RefreshToken && time.Since(now.RolesAt) < maxAge {
			return now.Assignments, nil
		}
		if err == nil {
			err = errors.New("the session ended while its roles were read")
		}
		return nil, errors.Join(err, p.IDs.EndSession(ctx, sess.ID))
	})
	if err != nil {
		return nil, err
	}
	return v.([]identity.Assignment), nil
}

// backchannelLogout is OpenID Connect Back-Channel Logout: the provider
// posts a signed logout token when a user signs out there (or an
// administrator ends their session), and the sessions it names end at
// once on every replica.
func (p *Portal) backchannelLogout(c *fiber.Ctx) error {
	if p.SSO == nil {
		return fiber.ErrNotFound
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	iss, sub, sid, err := p.SSO.VerifyLogout(c.UserContext(), c.FormValue("logout_token"))
	if err != nil {
		p.Log.Warn("back-channel logout refused", "err", err)
		return c.Status(fiber.StatusBadRequest).JSON(fiber.Map{"error": "invalid_request", "error_description": "logout_token: " + err.Error()})
	}
	n, err := p.IDs.EndSSOSessions(c.UserContext(), iss, sub, sid)
	if err != nil {
		return err
	}
	p.Log.Info("back-channel logout", "issuer", iss, "subject", sub, "sid", sid, "sessions", n)
	return c.SendStatus(fiber.StatusOK)
}
