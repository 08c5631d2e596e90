package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Trait is one of a node's traits (a standard os-traits name or CUSTOM_*).
type Trait struct{ ent.Schema }

func (Trait) Fields() []ent.Field {
	return []ent.Field{
		field.String("trait").MaxLen(255),
		field.Int("node_id"),
	}
}

func (Trait) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("traits").Field("node_id").Unique().Required(),
	}
}

func (Trait) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("node_id", "trait").Unique(),
		index.Fields("trait"),
	}
}
