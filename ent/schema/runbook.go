package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Runbook is a curated, ordered list of steps, owned by a project (owner
// set) or by the system (owner NULL), and usable by every project when
// public. Its steps live in their own table and are loaded only on demand.
type Runbook struct{ ent.Schema }

func (Runbook) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Runbook) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("name").Unique().MaxLen(255),
		field.Bool("public").Default(false),
		field.String("owner").Optional().Nillable().MaxLen(255),
		field.Bool("disable_ramdisk").Default(false),
		field.JSON("extra", map[string]any{}).Optional(),
		// traits widens where the runbook may run (any shared trait); when
		// empty the name-equals-trait rule applies.
		field.Strings("traits").Optional(),
	}
}

func (Runbook) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("steps", RunbookStep.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

func (Runbook) Indexes() []ent.Index {
	return []ent.Index{index.Fields("owner"), index.Fields("public")}
}
