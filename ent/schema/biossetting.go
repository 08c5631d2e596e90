package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// BiosSetting is one cached BIOS attribute of a node, as the BMC last
// reported it (Ironic's bios_settings table); a BIOS step or inspection
// refreshes a node's whole set.
type BiosSetting struct{ ent.Schema }

func (BiosSetting) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (BiosSetting) Fields() []ent.Field {
	return []ent.Field{
		field.Int("node_id"),
		field.String("name").MaxLen(255),
		// value is the BMC's value as text, as Ironic stores it.
		field.Text("value"),
		// pending is the value staged for the next reset when it differs
		// from value (Ironic has no such column; the portal shows it), so
		// a step that staged but never rebooted is visible.
		field.Text("pending").Optional().Nillable(),
	}
}

func (BiosSetting) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("bios_settings").Field("node_id").Unique().Required(),
	}
}

func (BiosSetting) Indexes() []ent.Index {
	return []ent.Index{index.Fields("node_id", "name").Unique()}
}
