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
		// name is unique per owner, not globally, so no project can squat a
		// name the system (or another project) wants; see Indexes.
		field.String("name").MaxLen(255),
		// description (1.112) is the plain-text account of what the
		// runbook is for, shown by the API and the portal alike. Its
		// limit is Ironic's 255 characters, checked by the service:
		// ent's MaxLen would count bytes.
		field.String("description").Optional().Nillable(),
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
	return []ent.Index{
		index.Fields("owner"), index.Fields("public"),
		index.Fields("owner", "name").Unique(),
		// SQL treats NULLs as distinct, so the system's runbooks (owner
		// NULL) need their own index to keep their names unique.
		index.Fields("name").Unique().StorageKey("runbook_system_name").Annotations(entsql.IndexWhere("owner IS NULL")),
	}
}
