package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// NodeInventory is the hardware the last inspection found on a node
// (Ironic's node_inventory table): one row per node, replaced by each
// inspection.
type NodeInventory struct{ ent.Schema }

func (NodeInventory) Fields() []ent.Field {
	return []ent.Field{
		field.Int("node_id").Unique(),
		field.JSON("inventory", map[string]any{}),
		field.JSON("plugin_data", map[string]any{}),
		field.Time("created_at").Default(time.Now),
	}
}

func (NodeInventory) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("inventory").Field("node_id").Unique().Required(),
	}
}
