package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/apitoken"
	"github.com/anvilproject/anvil/ent/roleassignment"
	"github.com/anvilproject/anvil/ent/user"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
)

// TokenPrefix starts every API token, so a token is recognisable in a
// leaked paste and never mistaken for a JWT.
const TokenPrefix = "anvil_"

// How long a verified credential is trusted without asking the database
// again. A revocation, role change or password change on this replica
// takes effect at once; on another replica within this time.
const authCacheTTL = 10 * time.Second

// lastUsedEvery limits last_used_at writes to one per token per minute.
const lastUsedEvery = time.Minute

// maxAuthCached bounds the credential cache. An entry is dropped when
// its credential is next presented after its TTL, so one never presented
// again (a CI job's token, a password since changed) would otherwise stay
// for the process's life: past the bound, expired entries are swept, and
// if the fresh ones alone fill it, the cache starts over. The count is
// approximate while requests race; every sweep counts afresh.
const maxAuthCached = 10_000

type cachedPrincipal struct {
	p       *policies.Principal
	expires time.Time
}

func (s *Service) cached(key string) *policies.Principal {
	v, ok := s.cache.Load(key)
	if !ok {
		return nil
	}
	c := v.(cachedPrincipal)
	if time.Now().After(c.expires) {
		if s.cache.CompareAndDelete(key, v) {
			s.cacheLen.Add(-1)
		}
		return nil
	}
	return c.p
}

func (s *Service) remember(key string, p *policies.Principal) {
	now := time.Now()
	if _, loaded := s.cache.Swap(key, cachedPrincipal{p: p, expires: now.Add(authCacheTTL)}); loaded || s.cacheLen.Add(1) <= maxAuthCached {
		return
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.cacheLen.Load() <= maxAuthCached {
		return // another caller swept
	}
	n := int64(0)
	s.cache.Range(func(k, v any) bool {
		if now.After(v.(cachedPrincipal).expires) {
			s.cache.CompareAndDelete(k, v)
		} else {
			n++
		}
		return true
	})
	if n > maxAuthCached*9/10 {
		s.cache.Clear()
		n = 0
	}
	s.cacheLen.Store(n)
}

// forget drops every cached credential; any change to accounts, roles or
// tokens calls it.
func (s *Service) forget() {
	s.cacheMu.Lock()
	s.cache.Clear()
	s.cacheLen.Store(0)
	s.cacheMu.Unlock()
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TokenRequest describes a token to mint.
type TokenRequest struct {
	User        string
	Scope       Scope
	Roles       []string
	Expires     time.Duration // 0: never
	Description string
}

// TokenInfo describes a token without its secret.
type TokenInfo struct {
	UUID        string
	User        string
	Scope       Scope
	Roles       []string
	Description string
	CreatedAt   time.Time
	ExpiresAt   *time.Time
	RevokedAt   *time.Time
	LastUsedAt  *time.Time
}

// CreateToken mints a token carrying a subset of the roles the user holds
// in the scope and returns its secret, which is stored only as a hash.
func (s *Service) CreateToken(ctx context.Context, r TokenRequest) (secret string, info TokenInfo, err error) {
	defer func() {
		s.record(ctx, "anvil:token:create", r.User, err, map[string]any{"scope": r.Scope.String(), "roles": r.Roles, "token": info.UUID})
	}()
	if r.Scope.System == (r.Scope.Project != "") {
		return "", info, errs.BadRequest("scope", "give exactly one of a project or the system")
	}
	if len(r.Roles) == 0 {
		return "", info, errs.BadRequest("roles", "name at least one role")
	}
	if r.Expires < 0 {
		return "", info, errs.BadRequest("expires", "expiry must be in the future")
	}
	if len(r.Description) > 255 {
		return "", info, errs.BadRequest("description", "description is longer than 255 characters")
	}
	// Anyone but the operator's CLI mints only for itself, in the scope
	// it acts in, and only roles it holds at this moment.
	caller := policies.PrincipalFrom(ctx)
	bounded := caller != nil && caller.Method != "cli" && caller.Method != "bootstrap"
	if bounded {
		if !caller.Local() {
			return "", info, errs.Forbidden("an SSO identity has no Anvil account and no Anvil tokens; use your identity provider's token as a Bearer token")
		}
		if caller.User != r.User || caller.System != r.Scope.System || caller.Project != r.Scope.Project {
			return "", info, errs.Forbidden("a token can only be minted for yourself in the scope you act in")
		}
	}
	u, err := s.user(ctx, r.User)
	if err != nil {
		return "", info, err
	}
	held, err := s.heldRoles(ctx, u.ID, r.Scope)
	if err != nil {
		return "", info, err
	}
	roles := make([]string, 0, len(r.Roles))
	for _, role := range r.Roles {
		role = strings.ToLower(strings.TrimSpace(role))
		if !policies.KnownRole(role) {
			return "", info, errs.BadRequest("roles", "role %q is not one of admin, manager, member, reader, service", role)
		}
		if !slices.Contains(held, role) || bounded && !caller.HasRole(role) {
			return "", info, errs.BadRequest("roles", "user %s does not hold role %s on %s", r.User, role, r.Scope)
		}
		if !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	q := s.db.APIToken.Create().SetUUID(uuid.NewString()).SetUserID(u.ID).SetSecretHash(digest(secret)).
		SetSystem(r.Scope.System).SetProject(r.Scope.Project).SetRoles(roles).SetDescription(r.Description)
	if r.Expires > 0 {
		q.SetExpiresAt(time.Now().Add(r.Expires))
	}
	t, err := q.Save(ctx)
	if err != nil {
		return "", info, err
	}
	return secret, tokenInfo(t, u.Name), nil
}

func tokenInfo(t *ent.APIToken, user string) TokenInfo {
	return TokenInfo{UUID: t.UUID, User: user, Scope: Scope{t.System, t.Project}, Roles: t.Roles, Description: t.Description,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt}
}

// heldRoles returns the user's expanded roles in a scope.
func (s *Service) heldRoles(ctx context.Context, userID int, sc Scope) ([]string, error) {
	rs, err := s.db.RoleAssignment.Query().Where(roleassignment.UserID(userID), roleassignment.System(sc.System),
		roleassignment.Project(sc.Project)).Select(roleassignment.FieldRole).Strings(ctx)
	if err != nil {
		return nil, err
	}
	return policies.ExpandRoles(rs), nil
}

// VerifyToken returns the principal a token secret stands for. A token
// never carries more than its user holds now: roles revoked since it was
// minted drop out of it.
func (s *Service) VerifyToken(ctx context.Context, secret string) (*policies.Principal, error) {
	if !strings.HasPrefix(secret, TokenPrefix) || len(secret) > 100 {
		return nil, errs.Unauthorized("the token is not valid")
	}
	key := digest(secret)
	if p := s.cached("t" + key); p != nil {
		return p, nil
	}
	t, err := s.db.APIToken.Query().Where(apitoken.SecretHash(key)).WithUser().Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.Unauthorized("the token is not valid")
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	switch {
	case t.RevokedAt != nil:
		return nil, errs.Unauthorized("the token was revoked")
	case t.ExpiresAt != nil && now.After(*t.ExpiresAt):
		return nil, errs.Unauthorized("the token has expired")
	case t.Edges.User == nil || t.Edges.User.Disabled:
		return nil, errs.Unauthorized("the token's user is disabled or gone")
	case t.Edges.User.MustChangePassword:
		return nil, errs.Forbidden("%s", PasswordChangeMessage(t.Edges.User.Name))
	}
	held, err := s.heldRoles(ctx, t.UserID, Scope{t.System, t.Project})
	if err != nil {
		return nil, err
	}
	var roles []string
	for _, r := range policies.ExpandRoles(t.Roles) {
		if slices.Contains(held, r) {
			roles = append(roles, r)
		}
	}
	if len(roles) == 0 {
		return nil, errs.Unauthorized("the token's user no longer holds any of its roles")
	}
	p := &policies.Principal{User: t.Edges.User.Name, System: t.System, Project: t.Project, Roles: roles, TokenID: t.UUID, Method: "token"}
	if t.LastUsedAt == nil || now.Sub(*t.LastUsedAt) > lastUsedEvery {
		_ = s.db.APIToken.UpdateOneID(t.ID).SetLastUsedAt(now).Exec(ctx)
	}
	s.remember("t"+key, p)
	return p, nil
}

// BasicAuth checks a local account's password for HTTP Basic, caching a
// success briefly: bcrypt on every API call would cap a client at a few
// dozen requests a second.
func (s *Service) BasicAuth(ctx context.Context, name, password, addr string, scope *Scope) (*policies.Principal, error) {
	sc := ""
	if scope != nil {
		sc = scope.String()
	}
	key := "b" + digest(name, password, sc)
	if p := s.cached(key); p != nil {
		return p, nil
	}
	p, err := s.Login(ctx, name, password, addr, scope)
	if err != nil {
		return nil, err
	}
	if p.MustChangePassword {
		return nil, errs.Forbidden("%s", PasswordChangeMessage(name))
	}
	s.remember(key, p)
	return p, nil
}

// ListTokens lists a user's tokens, newest first ("" lists everyone's).
func (s *Service) ListTokens(ctx context.Context, name string) ([]TokenInfo, error) {
	q := s.db.APIToken.Query().WithUser().Order(ent.Desc(apitoken.FieldID))
	if name != "" {
		u, err := s.user(ctx, name)
		if err != nil {
			return nil, err
		}
		q = q.Where(apitoken.UserID(u.ID))
	}
	ts, err := q.All(ctx)
	if err != nil {
		return nil, err
	}
	return withUsers(ts), nil
}

// TokensPage lists every user's tokens, newest first, a page at a time
// (offset, at most limit), and says whether more follow: an admin's view
// of a fleet's tokens must not read them all at once.
func (s *Service) TokensPage(ctx context.Context, offset, limit int) ([]TokenInfo, bool, error) {
	ts, err := s.db.APIToken.Query().WithUser().Order(ent.Desc(apitoken.FieldID)).Offset(offset).Limit(limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(ts) > limit
	if more {
		ts = ts[:limit]
	}
	return withUsers(ts), more, nil
}

// withUsers describes tokens loaded with their users.
func withUsers(ts []*ent.APIToken) []TokenInfo {
	out := make([]TokenInfo, len(ts))
	for i, t := range ts {
		who := ""
		if t.Edges.User != nil {
			who = t.Edges.User.Name
		}
		out[i] = tokenInfo(t, who)
	}
	return out
}

// Token returns one token by UUID, without its secret.
func (s *Service) Token(ctx context.Context, id string) (TokenInfo, error) {
	t, err := s.db.APIToken.Query().Where(apitoken.UUID(id)).WithUser().Only(ctx)
	if ent.IsNotFound(err) {
		return TokenInfo{}, errs.NotFound("token %s does not exist", id)
	}
	if err != nil {
		return TokenInfo{}, err
	}
	return withUsers([]*ent.APIToken{t})[0], nil
}

// RevokeToken revokes a token by UUID. With owner set, only that user's
// token is found: one user cannot learn of another's tokens.
func (s *Service) RevokeToken(ctx context.Context, id, owner string) (err error) {
	defer func() { s.record(ctx, "anvil:token:revoke", owner, err, map[string]any{"token": id}) }()
	q := s.db.APIToken.Update().Where(apitoken.UUID(id), apitoken.RevokedAtIsNil())
	if owner != "" {
		u, err := s.user(ctx, owner)
		if err != nil {
			return err
		}
		q = q.Where(apitoken.UserID(u.ID))
	}
	n, err := q.SetRevokedAt(time.Now()).Save(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return errs.NotFound("token %s does not exist or is already revoked", id)
	}
	s.forget()
	return nil
}

// LoginToken mints the token of a password login by an OpenStack client
// (Keystone's POST /v3/auth/tokens): every role p holds, expiring after
// lifetime, described as description. Such tokens pile up with every
// login, so the user's expired ones of the same description go first.
func (s *Service) LoginToken(ctx context.Context, p *policies.Principal, lifetime time.Duration, description string) (string, TokenInfo, error) {
	_, err := s.db.APIToken.Delete().Where(apitoken.HasUserWith(user.Name(p.User)), apitoken.Description(description),
		apitoken.ExpiresAtLT(time.Now())).Exec(ctx)
	if err != nil {
		return "", TokenInfo{}, err
	}
	return s.CreateToken(policies.WithPrincipal(ctx, p), TokenRequest{User: p.User, Scope: Scope{p.System, p.Project},
		Roles: p.Roles, Expires: lifetime, Description: description})
}
