package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// APIToken is a bearer secret bound to a user, one scope and a subset of the
// user's roles. Only a SHA-256 of the secret is stored.
type APIToken struct{ ent.Schema }

func (APIToken) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (APIToken) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.Int("user_id"),
		field.String("secret_hash").Unique().Sensitive(),
		field.String("description").Optional().MaxLen(255),
		field.Bool("system").Default(false),
		field.String("project").Default("").MaxLen(255),
		field.Strings("roles"),
		field.Time("expires_at").Optional().Nillable(),
		field.Time("revoked_at").Optional().Nillable(),
		field.Time("last_used_at").Optional().Nillable(),
	}
}

func (APIToken) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("user", User.Type).Ref("tokens").Field("user_id").Unique().Required(),
	}
}
