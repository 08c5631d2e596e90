package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Setting holds process-wide values that must survive restarts and be shared
// by replicas, such as the generated session keys.
type Setting struct{ ent.Schema }

func (Setting) Fields() []ent.Field {
	return []ent.Field{
		field.String("key").Unique().MaxLen(255),
		field.Bytes("value").Sensitive(),
	}
}
