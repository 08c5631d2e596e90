package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// WipeRecord is what one automated cleaning between tenants did to a
// machine's disks: the record a tenant's auditor asks for. It names the
// node, its owner and lessee, and the project whose allocation the wipe
// followed, as they were at the wipe, and has no edge to the node: it
// outlives both the lease (whose lessee then no longer sees the node)
// and the node itself.
type WipeRecord struct{ ent.Schema }

func (WipeRecord) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable(),
		field.String("node_uuid").Immutable(),
		field.String("node_name").Optional().Nillable().Immutable(),
		field.String("owner").Optional().Nillable().Immutable(),
		field.String("lessee").Optional().Nillable().Immutable(),
		// allocation names the allocation the tear down released and
		// allocation_owner its project, which read the record too.
		field.String("allocation").Optional().Nillable().Immutable(),
		field.String("allocation_owner").Optional().Nillable().Immutable(),
		// policy is the wipe policy that applied: metadata, express,
		// full, or none (a node that was not wiped, and why, in method).
		field.String("policy").Immutable(),
		// result: wiped, failed, or not wiped.
		field.String("result").Immutable(),
		field.String("message").Default("").Immutable(),
		// disks: one object per disk (name, size, serial, model, method).
		field.JSON("disks", []map[string]any{}).Immutable(),
		// agent_log names the agent's logs kept for a failed wipe.
		field.String("agent_log").Default("").Immutable(),
		field.String("conductor").Default("").Immutable(),
		field.Time("started_at").Immutable(),
		field.Time("finished_at").Default(time.Now).Immutable(),
	}
}

func (WipeRecord) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("node_uuid", "finished_at"),
		index.Fields("owner"),
		index.Fields("lessee"),
		index.Fields("allocation_owner"),
	}
}
