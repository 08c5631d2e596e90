package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// FirmwareComponent is one firmware component of a node (Ironic's
// firmware_information table): the version inspection first found, the
// one running now and the last one a firmware.update step flashed.
type FirmwareComponent struct{ ent.Schema }

func (FirmwareComponent) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (FirmwareComponent) Fields() []ent.Field {
	return []ent.Field{
		field.Int("node_id"),
		field.String("component").MaxLen(255),
		field.String("initial_version").MaxLen(255),
		field.String("current_version").MaxLen(255).Optional().Nillable(),
		field.String("last_version_flashed").MaxLen(255).Optional().Nillable(),
		// The identity fields came with API 1.114; the BMC may not say.
		field.String("vendor").MaxLen(255).Optional().Nillable(),
		field.String("model").MaxLen(255).Optional().Nillable(),
		field.String("serial_number").MaxLen(255).Optional().Nillable(),
	}
}

func (FirmwareComponent) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("firmware_components").Field("node_id").Unique().Required(),
	}
}

func (FirmwareComponent) Indexes() []ent.Index {
	return []ent.Index{index.Fields("node_id", "component").Unique()}
}
