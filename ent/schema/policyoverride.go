package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// PolicyOverride is the stored policy.d override set. Replicas poll its
// revision and apply a newer one; the files are kept verbatim so every
// replica validates exactly what the operator uploaded.
type PolicyOverride struct{ ent.Schema }

func (PolicyOverride) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("revision"),
		field.JSON("files", map[string]string{}),
		field.String("uploaded_by").Optional(),
		field.Time("uploaded_at").Default(time.Now),
	}
}
