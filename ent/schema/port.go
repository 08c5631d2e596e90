package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Port is a node's physical network interface, with Ironic's fields. Its
// access follows its node's owner and lessee; it goes with the node.
type Port struct{ ent.Schema }

func (Port) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Port) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		// address is a MAC, stored lower case; unique across all nodes as in
		// Ironic, since a MAC identifies one NIC to DHCP and PXE.
		field.String("address").Unique().MaxLen(18),
		field.Int("node_id"),
		field.Int("portgroup_id").Optional().Nillable(),
		field.String("name").Optional().Nillable().Unique().MaxLen(255),
		field.JSON("local_link_connection", map[string]any{}).Optional(),
		field.Bool("pxe_enabled").Default(true),
		field.String("physical_network").Optional().Nillable().MaxLen(64),
		// internal_info holds what Anvil itself records, such as the VIF
		// attached to the port (tenant_vif_port_id).
		field.JSON("internal_info", map[string]any{}).Optional(),
		field.JSON("extra", map[string]any{}).Optional(),
		field.Bool("is_smartnic").Default(false),
		field.String("description").Optional().Nillable().MaxLen(255),
		field.String("vendor").Optional().Nillable().MaxLen(32),
		field.String("category").Optional().Nillable().MaxLen(80),
		// available_for_dynamic_portgroup (1.111) lets Ironic's
		// trait-based networking gather the port into a portgroup it
		// makes for a deployment; true unless the operator says no.
		field.Bool("available_for_dynamic_portgroup").Default(true),
	}
}

func (Port) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("ports").Field("node_id").Unique().Required(),
		edge.From("portgroup", Portgroup.Type).Ref("ports").Field("portgroup_id").Unique(),
	}
}

func (Port) Indexes() []ent.Index {
	return []ent.Index{index.Fields("node_id"), index.Fields("portgroup_id")}
}
