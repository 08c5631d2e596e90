package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// RoleAssignment grants a user a role on a project, or on the system when
// project is empty and system is true.
type RoleAssignment struct{ ent.Schema }

func (RoleAssignment) Fields() []ent.Field {
	return []ent.Field{
		field.Int("user_id"),
		field.Bool("system").Default(false),
		field.String("project").Default("").MaxLen(255),
		field.String("role").MaxLen(64),
	}
}

func (RoleAssignment) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("user", User.Type).Ref("roles").Field("user_id").Unique().Required(),
	}
}

func (RoleAssignment) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("user_id", "system", "project", "role").Unique(),
		index.Fields("project"),
	}
}
