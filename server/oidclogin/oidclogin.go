// Package oidclogin signs people in with OpenID Connect: the authorization
// code flow with PKCE for the portal, and verification of bearer JWTs from
// the same issuer for the API. Roles come from a groups claim whose
// entries read anvil:system:<role> or anvil:project:<id>:<role>.
package oidclogin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
)

// Config names the provider and the claims Anvil reads.
type Config struct {
	Issuer, ClientID, ClientSecret, RedirectURL string
	// UserClaim names the account (default preferred_username, falling
	// back to sub).
	UserClaim string
	// GroupsClaim holds the role entries (default groups).
	GroupsClaim string
}

// Provider is an OpenID provider, discovered or still being retried.
type Provider struct {
	cfg  Config
	disc atomic.Pointer[discovered]

	mu      sync.Mutex
	lastErr error // the last failed discovery, while none succeeded
}

// discovered is what discovery learnt: endpoints, keys, scopes.
type discovered struct {
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
	oauth    oauth2.Config
}

// New discovers the issuer's endpoints and keys, or fails.
func New(ctx context.Context, c Config) (*Provider, error) {
	p, err := configured(c)
	if err != nil {
		return nil, err
	}
	if err := p.discover(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Start is New for a server: an issuer it cannot reach now leaves the
// provider degraded — SSO sign-in and bearer JWTs answer that it is
// unavailable, local accounts and API tokens work — and discovery is
// retried in the background until it succeeds or ctx ends. An identity
// provider's outage must not keep Anvil from starting (a crash loop under
// systemd or Kubernetes). Only a configuration error is returned.
func Start(ctx context.Context, c Config, log *slog.Logger) (*Provider, error) {
	p, err := configured(c)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	err = p.discover(dctx)
	cancel()
	if err != nil {
		log.Error("OpenID Connect provider unreachable: SSO is unavailable until it answers; local accounts and API tokens work", "issuer", c.Issuer, "err", err)
		go p.retry(ctx, log)
	}
	return p, nil
}

// discoveryTimeout bounds one discovery; retries wait retryMin, doubling
// to retryMax.
const (
	discoveryTimeout = 10 * time.Second
	retryMin         = time.Second
	retryMax         = time.Minute
)

func (p *Provider) retry(ctx context.Context, log *slog.Logger) {
	for wait := retryMin; ; wait = min(2*wait, retryMax) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
		err := p.discover(dctx)
		cancel()
		if err == nil {
			log.Info("OpenID Connect provider reached: SSO is available", "issuer", p.cfg.Issuer)
			return
		}
		log.Debug("OpenID Connect provider still unreachable", "issuer", p.cfg.Issuer, "err", err)
	}
}

func configured(c Config) (*Provider, error) {
	if c.Issuer == "" || c.ClientID == "" {
		return nil, errors.New("oidc: issuer and client id are required")
	}
	if c.UserClaim == "" {
		c.UserClaim = "preferred_username"
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	return &Provider{cfg: c}, nil
}

// discover reads the issuer's discovery document and keys.
func (p *Provider) discover(ctx context.Context) error {
	op, err := oidc.NewProvider(ctx, p.cfg.Issuer)
	if err != nil {
		err = fmt.Errorf("oidc discovery at %s: %w", p.cfg.Issuer, err)
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		return err
	}
	scopes := []string{oidc.ScopeOpenID, "profile", "email"}
	// A refresh token is what reads a session's roles again; providers
	// that list offline_access issue one only when it is asked for.
	var disc struct {
		Scopes []string `json:"scopes_supported"`
	}
	if op.Claims(&disc) == nil && slices.Contains(disc.Scopes, oidc.ScopeOfflineAccess) {
		scopes = append(scopes, oidc.ScopeOfflineAccess)
	}
	p.disc.Store(&discovered{
		provider: op,
		// Checks signature (against the issuer's published keys), issuer,
		// audience and expiry.
		verifier: op.Verifier(&oidc.Config{ClientID: p.cfg.ClientID}),
		oauth: oauth2.Config{
			ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, RedirectURL: p.cfg.RedirectURL,
			Endpoint: op.Endpoint(), Scopes: scopes,
		},
	})
	return nil
}

// ready is what discovery learnt, or a 503 saying SSO is unavailable.
func (p *Provider) ready() (*discovered, error) {
	if d := p.disc.Load(); d != nil {
		return d, nil
	}
	return nil, errs.Unavailable("single sign-on is unavailable: the identity provider at %s has not answered yet; sign in with a local account or an API token", p.cfg.Issuer)
}

// Status is "ok", or why SSO is unavailable, for /readyz.
func (p *Provider) Status() string {
	if p.disc.Load() != nil {
		return "ok"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("degraded: %v; retrying", p.lastErr)
}

// AuthCodeURL is where the browser goes to sign in, carrying state, nonce
// and the PKCE challenge of verifier.
func (p *Provider) AuthCodeURL(state, nonce, verifier string) (string, error) {
	d, err := p.ready()
	if err != nil {
		return "", err
	}
	return d.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// Exchange completes the code flow: it redeems code with the PKCE
// verifier, verifies the ID token and its nonce, and reads the user and
// role assignments from the token, or from the userinfo endpoint for
// claims the token leaves out.
func (p *Provider) Exchange(ctx context.Context, code, verifier, nonce string) (identity.SSOUser, error) {
	d, err := p.ready()
	if err != nil {
		return identity.SSOUser{}, err
	}
	tok, err := d.oauth.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return identity.SSOUser{}, errs.Unauthorized("the identity provider refused the code: %v", err)
	}
	return p.identify(ctx, d, tok, func(idt *oidc.IDToken) error { return checkNonce(idt, nonce) })
}

// ErrGrantEnded is a refresh the provider refused: the grant was
// revoked, expired or never given, or what came back is not the same
// identity. The session it served ends.
var ErrGrantEnded = errors.New("the identity provider ended the grant")

// Refresh reads u's roles again with the refresh token it holds: a new
// ID token, verified as at sign-in, must name the same issuer and
// subject, and the roles are read from its claims (and userinfo) exactly
// as at sign-in. The returned identity carries the refresh token for next
// time. An error wrapping ErrGrantEnded means the provider said no; any
// other, that it could not be asked.
func (p *Provider) Refresh(ctx context.Context, u identity.SSOUser) (identity.SSOUser, error) {
	if u.RefreshToken == "" {
		return identity.SSOUser{}, fmt.Errorf("%w: the provider gave no refresh token", ErrGrantEnded)
	}
	d, err := p.ready()
	if err != nil {
		return identity.SSOUser{}, err
	}
	// An expired token makes the source refresh at once.
	tok, err := d.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: u.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && (re.Response.StatusCode == 400 || re.Response.StatusCode == 401) {
			return identity.SSOUser{}, fmt.Errorf("%w: %v", ErrGrantEnded, err)
		}
		return identity.SSOUser{}, err
	}
	fresh, err := p.identify(ctx, d, tok, func(idt *oidc.IDToken) error {
		if idt.Issuer != u.Issuer || idt.Subject != u.Subject {
			return errs.Unauthorized("the refreshed ID token names another identity")
		}
		return nil
	})
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			return identity.SSOUser{}, fmt.Errorf("%w: %v", ErrGrantEnded, err)
		}
		return identity.SSOUser{}, err
	}
	if fresh.SID == "" {
		fresh.SID = u.SID
	}
	return fresh, nil
}

// identify verifies the ID token tok carries, runs check on it, and reads
// the user and role assignments from it, or from the userinfo endpoint
// for claims the token leaves out.
func (p *Provider) identify(ctx context.Context, d *discovered, tok *oauth2.Token, check func(*oidc.IDToken) error) (identity.SSOUser, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return identity.SSOUser{}, errs.Unauthorized("the identity provider returned no ID token")
	}
	idt, err := d.verifier.Verify(ctx, raw)
	if err != nil {
		return identity.SSOUser{}, errs.Unauthorized("the ID token is not valid: %v", err)
	}
	if err := check(idt); err != nil {
		return identity.SSOUser{}, err
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return identity.SSOUser{}, errs.Unauthorized("the ID token's claims are unreadable")
	}
	if claims[p.cfg.UserClaim] == nil || claims[p.cfg.GroupsClaim] == nil {
		ui, err := d.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return identity.SSOUser{}, fmt.Errorf("the userinfo endpoint failed: %w", err)
		}
		extra := map[string]any{}
		if err := ui.Claims(&extra); err != nil {
			return identity.SSOUser{}, errs.Unauthorized("the userinfo claims are unreadable")
		}
		// The ID token's subject wins over a userinfo that names another.
		if extra["sub"] != nil && extra["sub"] != idt.Subject {
			return identity.SSOUser{}, errs.Unauthorized("userinfo is for another subject")
		}
		for k, v := range extra {
			if claims[k] == nil {
				claims[k] = v
			}
		}
	}
	u := p.read(claims, idt)
	u.SID, _ = claims["sid"].(string)
	u.RefreshToken = tok.RefreshToken
	return u, nil
}

// BackchannelLogoutEvent is the events member that makes a JWT an OpenID
// back-channel logout token.
const BackchannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"

// VerifyLogout checks a back-channel logout token: signed with the
// provider's keys, for this client, unexpired, with the logout event,
// naming a subject or a session (sid), and without a nonce, which would
// make it an ID token in disguise. It returns the issuer, subject and sid.
func (p *Provider) VerifyLogout(ctx context.Context, raw string) (issuer, subject, sid string, err error) {
	d, err := p.ready()
	if err != nil {
		return "", "", "", err
	}
	idt, err := d.verifier.Verify(ctx, raw)
	if err != nil {
		return "", "", "", fmt.Errorf("the logout token is not valid: %w", err)
	}
	var c struct {
		Events map[string]json.RawMessage `json:"events"`
		SID    string                     `json:"sid"`
		Nonce  *string                    `json:"nonce"`
	}
	if err := idt.Claims(&c); err != nil {
		return "", "", "", fmt.Errorf("the logout token's claims are unreadable: %w", err)
	}
	switch {
	case c.Events[BackchannelLogoutEvent] == nil:
		return "", "", "", errors.New("the token carries no back-channel logout event")
	case c.Nonce != nil:
		return "", "", "", errors.New("a logout token carries no nonce")
	case idt.Subject == "" && c.SID == "":
		return "", "", "", errors.New("the logout token names neither a subject nor a session")
	}
	return idt.Issuer, idt.Subject, c.SID, nil
}

// checkNonce ties the ID token to the browser session that started the
// sign-in, so a token captured elsewhere cannot be replayed into it.
func checkNonce(idt *oidc.IDToken, nonce string) error {
	if nonce == "" || subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return errs.Unauthorized("the ID token's nonce does not match this sign-in")
	}
	return nil
}

func (p *Provider) read(claims map[string]any, idt *oidc.IDToken) identity.SSOUser {
	user, _ := claims[p.cfg.UserClaim].(string)
	if user == "" {
		user = idt.Subject
	}
	var groups []string
	switch g := claims[p.cfg.GroupsClaim].(type) {
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok {
				groups = append(groups, s)
			}
		}
	case string:
		groups = strings.Fields(g)
	}
	return identity.SSOUser{Issuer: idt.Issuer, Subject: idt.Subject, Name: user, Assignments: ParseGroups(groups)}
}

// ParseGroups turns group entries into role assignments, ignoring entries
// that are not Anvil's, name an unknown role or a malformed project.
func ParseGroups(groups []string) []identity.Assignment {
	var out []identity.Assignment
	for _, g := range groups {
		parts := strings.Split(g, ":")
		var a identity.Assignment
		switch {
		case len(parts) == 3 && parts[0] == "anvil" && parts[1] == "system":
			a = identity.Assignment{Scope: identity.Scope{System: true}, Role: parts[2]}
		case len(parts) == 4 && parts[0] == "anvil" && parts[1] == "project":
			if parts[2] == "" || len(parts[2]) > 255 || strings.ContainsAny(parts[2], " \t\r\n") {
				continue
			}
			a = identity.Assignment{Scope: identity.Scope{Project: parts[2]}, Role: parts[3]}
		default:
			continue
		}
		if policies.KnownRole(a.Role) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// PrincipalFromJWT verifies a bearer JWT from the issuer (audience: the
// client id) and acts in its default scope: the system when it grants a
// system role, else its only project.
func (p *Provider) PrincipalFromJWT(ctx context.Context, raw string) (*policies.Principal, error) {
	d, err := p.ready()
	if err != nil {
		return nil, err
	}
	idt, err := d.verifier.Verify(ctx, raw)
	if err != nil {
		return nil, errs.Unauthorized("the bearer token is not valid")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return nil, errs.Unauthorized("the bearer token's claims are unreadable")
	}
	return Principal(p.read(claims, idt), nil)
}

// Principal builds the principal for an OIDC identity in scope, or in its
// default scope when scope is nil. It carries the roles the identity's
// claims grant and nothing of a local account that shares its name.
func Principal(u identity.SSOUser, scope *identity.Scope) (*policies.Principal, error) {
	user, as := u.Name, u.Assignments
	var sc identity.Scope
	switch {
	case scope != nil:
		sc = *scope
	default:
		projects := 0
		for _, a := range as {
			if a.System {
				sc = a.Scope
				break
			}
			if a.Scope != sc {
				projects++
				sc = a.Scope
			}
		}
		if !sc.System && projects > 1 {
			return nil, errs.Forbidden("%s holds roles in several projects; use an Anvil token for one of them", user)
		}
	}
	var roles []string
	for _, a := range as {
		if a.Scope == sc {
			roles = append(roles, a.Role)
		}
	}
	if len(roles) == 0 {
		return nil, errs.Forbidden("%s holds no Anvil role", user)
	}
	return &policies.Principal{User: user, Issuer: u.Issuer, Subject: u.Subject, System: sc.System, Project: sc.Project,
		Roles: policies.ExpandRoles(roles), Method: "oidc"}, nil
}
