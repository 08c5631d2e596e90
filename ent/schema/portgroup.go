package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Portgroup is a bond of a node's ports, with Ironic's fields. Like a
// port, its access follows its node and it goes with the node.
type Portgroup struct{ ent.Schema }

func (Portgroup) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Portgroup) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("name").Optional().Nillable().Unique().MaxLen(255),
		// address is optional (the bond's MAC), unique when set.
		field.String("address").Optional().Nillable().Unique().MaxLen(18),
		field.Int("node_id"),
		// mode is the bonding mode; Ironic's default_portgroup_mode.
		field.String("mode").Default("active-backup").MaxLen(255),
		field.JSON("properties", map[string]any{}).Optional(),
		field.Bool("standalone_ports_supported").Default(true),
		field.String("physical_network").Optional().Nillable().MaxLen(64),
		field.String("category").Optional().Nillable().MaxLen(80),
		// dynamic_portgroup (1.111) marks a portgroup that networking made
		// for a deployment rather than an operator; Ironic's API never
		// sets it, and Anvil makes no such portgroups, so it stays false.
		field.Bool("dynamic_portgroup").Default(false),
		field.JSON("internal_info", map[string]any{}).Optional(),
		field.JSON("extra", map[string]any{}).Optional(),
	}
}

func (Portgroup) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("portgroups").Field("node_id").Unique().Required(),
		edge.To("ports", Port.Type),
	}
}

func (Portgroup) Indexes() []ent.Index {
	return []ent.Index{index.Fields("node_id")}
}
