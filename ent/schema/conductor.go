package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Conductor is one running anvil process; its heartbeat tells the others
// whether the node locks it holds are still alive.
type Conductor struct{ ent.Schema }

func (Conductor) Fields() []ent.Field {
	return []ent.Field{
		field.String("hostname").Unique().MaxLen(255),
		field.Time("started_at").Default(time.Now),
		field.Time("heartbeat_at").Default(time.Now),
		field.Bool("online").Default(true),
		field.Strings("drivers").Optional(),
		// conductor_group is the group of nodes this conductor serves.
		field.String("conductor_group").Default("").MaxLen(255),
	}
}
