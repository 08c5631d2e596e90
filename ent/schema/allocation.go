package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Allocation is a request to reserve a node matching resource class, traits
// and candidates; with an owner it only considers nodes that project owns or
// leases.
type Allocation struct{ ent.Schema }

func (Allocation) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Allocation) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("name").Optional().Nillable().Unique().MaxLen(255),
		field.String("resource_class").MaxLen(80),
		field.Strings("traits").Optional(),
		field.Strings("candidate_nodes").Optional(),
		field.String("owner").Optional().Nillable().MaxLen(255),
		field.String("state").Default("allocating"),
		field.Text("last_error").Optional().Nillable(),
		field.JSON("extra", map[string]any{}).Optional(),
		field.Int("node_id").Optional().Nillable(),
	}
}

func (Allocation) Edges() []ent.Edge {
	return []ent.Edge{
		// One allocation per node, enforced by a unique index so two
		// concurrent allocations can never both win the same node.
		edge.From("node", Node.Type).Ref("allocation").Field("node_id").Unique(),
	}
}

func (Allocation) Indexes() []ent.Index {
	return []ent.Index{index.Fields("owner"), index.Fields("node_id").Unique()}
}
