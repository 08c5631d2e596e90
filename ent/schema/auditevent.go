package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AuditEvent records every mutation and every denied request: who, in which
// scope, under which rule, on what, and how it ended.
type AuditEvent struct{ ent.Schema }

func (AuditEvent) Fields() []ent.Field {
	return []ent.Field{
		field.Time("created_at").Default(time.Now).Immutable(),
		field.String("request_id").Optional(),
		field.String("user").Optional(),
		field.String("project").Optional(),
		field.String("scope").Optional(),
		field.String("rule").Optional(),
		field.String("method").Optional(),
		field.String("path").Optional(),
		field.String("target_type").Optional(),
		field.String("target_id").Optional(),
		// result is "allowed" for a completed mutation, "denied" for a
		// policy refusal and "failed" for a mutation that was refused later.
		field.String("result"),
		field.Int("status").Optional(),
		field.JSON("detail", map[string]any{}).Optional(),
	}
}

func (AuditEvent) Indexes() []ent.Index {
	return []ent.Index{index.Fields("created_at"), index.Fields("target_id")}
}
