package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// VolumeConnector is how a node connects to remote storage (an iSCSI
// initiator name, a WWPN, …), as Ironic's. Stored and served; Anvil has no
// storage interface that acts on it.
type VolumeConnector struct{ ent.Schema }

func (VolumeConnector) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (VolumeConnector) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.Int("node_id"),
		field.String("type").MaxLen(32),
		field.String("connector_id").MaxLen(255),
		field.JSON("extra", map[string]any{}).Optional(),
	}
}

func (VolumeConnector) Edges() []ent.Edge {
	return []ent.Edge{
		// The node's connectors go with it, as in Ironic.
		edge.To("node", Node.Type).Field("node_id").Unique().Required().Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

func (VolumeConnector) Indexes() []ent.Index {
	return []ent.Index{
		// One connector per type and ID across all nodes, as Ironic.
		index.Fields("type", "connector_id").Unique(),
		index.Fields("node_id"),
	}
}

// VolumeTarget is a remote volume a node may boot from or attach, as
// Ironic's.
type VolumeTarget struct{ ent.Schema }

func (VolumeTarget) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (VolumeTarget) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.Int("node_id"),
		field.String("volume_type").MaxLen(64),
		field.String("volume_id").MaxLen(36),
		field.Int("boot_index"),
		field.JSON("properties", map[string]any{}).Optional(),
		field.JSON("extra", map[string]any{}).Optional(),
	}
}

func (VolumeTarget) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("node", Node.Type).Field("node_id").Unique().Required().Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

func (VolumeTarget) Indexes() []ent.Index {
	return []ent.Index{
		// A boot index names one target per node, as Ironic.
		index.Fields("node_id", "boot_index").Unique(),
	}
}
