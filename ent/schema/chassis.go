package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Chassis groups nodes that share an enclosure, as Ironic's chassis: a
// description and extra data, nothing the conductor acts on.
type Chassis struct{ ent.Schema }

func (Chassis) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "chassis"}}
}

func (Chassis) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Chassis) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("description").Optional().Nillable().MaxLen(255),
		field.JSON("extra", map[string]any{}).Optional(),
	}
}
