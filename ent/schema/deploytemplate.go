package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// DeployTemplate is Ironic's deploy template: deploy steps that a deploy
// would run on a node carrying the template's name as a trait. Anvil does
// not deploy; it stores and serves them. Its steps live in their own
// table, as a runbook's do.
type DeployTemplate struct{ ent.Schema }

func (DeployTemplate) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (DeployTemplate) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		// name is a trait name and unique, as in Ironic.
		field.String("name").Unique().MaxLen(255),
		field.JSON("extra", map[string]any{}).Optional(),
	}
}

func (DeployTemplate) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("steps", DeployTemplateStep.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}
