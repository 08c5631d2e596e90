package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// RunbookStep is one step of a runbook; order is explicit, never a priority.
type RunbookStep struct{ ent.Schema }

func (RunbookStep) Fields() []ent.Field {
	return []ent.Field{
		field.Int("runbook_id"),
		field.String("interface").MaxLen(32),
		field.String("step").MaxLen(255),
		field.JSON("args", map[string]any{}).Optional(),
		field.Int("order"),
	}
}

func (RunbookStep) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("runbook", Runbook.Type).Ref("steps").Field("runbook_id").Unique().Required(),
	}
}

func (RunbookStep) Indexes() []ent.Index {
	return []ent.Index{index.Fields("runbook_id", "order").Unique()}
}
