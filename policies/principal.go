// Package policies holds Anvil's authorization: the default rules in
// Ironic's naming and oslo.policy syntax, the parser that compiles check
// strings once, and the casbin enforcer that decides every action.
package policies

import (
	"context"
	"slices"
	"strings"
)

// Role names, strongest first. Each implies every role after it.
var roleLadder = []string{"admin", "manager", "member", "reader"}

// RoleService is the role Ironic gives other services acting on nodes
// (Nova, metal3, automation). As in Keystone's default roles it stands
// outside the ladder: it implies no other role and none implies it, so a
// service user passes only the rules that name it.
const RoleService = "service"

var knownRoles = append(slices.Clone(roleLadder), RoleService)

// KnownRole reports whether r is one of Anvil's roles: the four of the
// ladder and service.
func KnownRole(r string) bool { return slices.Contains(knownRoles, r) }

// KnownRoles lists Anvil's roles, the ladder strongest first, then service.
func KnownRoles() []string { return slices.Clone(knownRoles) }

// ExpandRoles returns roles together with every role they imply, in ladder
// order, so that a check for role:reader passes for a manager. Unknown
// roles are kept (an operator's rule may name them) after the ladder.
func ExpandRoles(roles []string) []string {
	strongest := len(roleLadder)
	var extra []string
	for _, r := range roles {
		r = strings.ToLower(strings.TrimSpace(r))
		if i := slices.Index(roleLadder, r); i >= 0 {
			strongest = min(strongest, i)
		} else if r != "" && !slices.Contains(extra, r) {
			extra = append(extra, r)
		}
	}
	out := slices.Clone(roleLadder[strongest:])
	slices.Sort(extra)
	return append(out, extra...)
}

// Principal is who is asking: a user acting with exactly one scope, either
// the system or one project.
type Principal struct {
	User string
	// Issuer and Subject identify an OpenID Connect identity; both are
	// empty for a local account. User is then only a display name: an SSO
	// user never acts as the local account of the same name.
	Issuer, Subject string
	Project         string // empty when System
	System          bool
	Roles           []string // expanded; see ExpandRoles
	TokenID         string   // the API token used, if any
	Method          string   // how the caller proved who it is: password, token, oidc, session, none
	// MustChangePassword says the local account still has a password it
	// did not choose (identity's bootstrap admin): the portal serves it
	// only the change-password page until it picks one.
	MustChangePassword bool
}

// HasRole reports whether the principal holds role (after expansion).
func (p *Principal) HasRole(role string) bool {
	return p != nil && slices.Contains(p.Roles, role)
}

// Local reports whether the principal is a local account (not an SSO
// identity), the only kind that has API tokens and a password.
func (p *Principal) Local() bool { return p != nil && p.Issuer == "" }

// Scope renders the principal's scope for people: "system" or "project P".
func (p *Principal) Scope() string {
	if p == nil {
		return "none"
	}
	if p.System {
		return "system"
	}
	return "project " + p.Project
}

// key identifies everything about the principal that a check can read.
func (p *Principal) key() string {
	if p == nil {
		return "\x00anon"
	}
	var b strings.Builder
	b.WriteString(p.User)
	b.WriteByte(0)
	b.WriteString(p.Issuer)
	b.WriteByte(0)
	b.WriteString(p.Subject)
	b.WriteByte(0)
	if p.System {
		b.WriteString("\x01sys")
	} else {
		b.WriteString(p.Project)
	}
	for _, r := range p.Roles {
		b.WriteByte(0)
		b.WriteString(r)
	}
	return b.String()
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal in ctx, or nil for an anonymous caller.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
