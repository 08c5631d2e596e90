package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// PortalSession is a signed-in browser. The cookie carries the session's
// id; only its SHA-256 is stored. Deleting the row ends the session on
// every replica at once: logout, a password change, a revoked role or a
// deleted account delete it.
type PortalSession struct{ ent.Schema }

func (PortalSession) Fields() []ent.Field {
	return []ent.Field{
		field.String("id_hash").Unique().Immutable().Sensitive(),
		// principal is the local account's name, or "sso|issuer|subject"
		// for an OpenID identity (local names cannot contain "|").
		field.String("principal").Immutable(),
		field.Time("created_at").Immutable(),
		field.Time("expires_at").Immutable(),
		// An OpenID sign-in also keeps the provider's session id (sid),
		// which its back-channel logout names; the refresh token, with
		// which the roles are read again; and those roles ("system:<role>"
		// or "project:<id>:<role>") with when they were last read. None
		// of it goes to the browser.
		field.String("sso_sid").Optional(),
		field.String("refresh_token").Optional().Sensitive(),
		field.Strings("sso_roles").Optional(),
		field.Time("roles_at").Optional(),
		// What the sessions page shows an administrator deciding whether
		// a session is theirs to end: the address it signed in from and
		// when it was last used (kept to the minute, as the cookie is).
		field.String("client_addr").Optional(),
		field.Time("seen_at").Optional(),
	}
}

func (PortalSession) Indexes() []ent.Index {
	return []ent.Index{index.Fields("principal"), index.Fields("expires_at"), index.Fields("sso_sid")}
}
