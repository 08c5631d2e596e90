package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// User is a local account (the embedded default without an identity
// provider). Users who sign in through OIDC are not stored here.
type User struct{ ent.Schema }

func (User) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (User) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").Unique().MaxLen(255),
		field.String("password_hash").Sensitive(),
		field.Bool("disabled").Default(false),
		field.Time("last_login_at").Optional().Nillable(),
		// MustChangePassword marks a password nobody chose for themselves
		// (the bootstrap admin's, which was written to a file): until the
		// user replaces it, the API refuses the account and the portal
		// serves only the change-password page.
		field.Bool("must_change_password").Default(false),
	}
}

func (User) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("roles", RoleAssignment.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("tokens", APIToken.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}
