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
	}
}

func (PortalSession) Indexes() []ent.Index {
	return []ent.Index{index.Fields("principal"), index.Fields("expires_at")}
}
