package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// InspectionRule is Ironic's inspection rule (1.96): conditions on what
// inspection found and actions on the node, run after each inspection in
// priority order. Conditions and actions are kept as the documents the
// API accepted; they are small and always read whole.
type InspectionRule struct{ ent.Schema }

func (InspectionRule) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (InspectionRule) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("description").Optional().Nillable().MaxLen(255),
		field.Int("priority").Default(0),
		field.Bool("sensitive").Default(false),
		field.String("phase").Default("main").MaxLen(16),
		field.JSON("conditions", []map[string]any{}).Optional(),
		field.JSON("actions", []map[string]any{}),
	}
}

func (InspectionRule) Indexes() []ent.Index {
	return []ent.Index{index.Fields("phase", "priority")}
}
