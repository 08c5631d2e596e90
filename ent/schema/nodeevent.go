package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// NodeEvent is one entry of a node's history (Ironic's node history):
// state changes, step start/end/failure, power changes seen on the BMC.
type NodeEvent struct{ ent.Schema }

func (NodeEvent) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.Int("node_id"),
		field.Time("created_at").Default(time.Now).Immutable(),
		field.String("severity").Default("INFO"),
		field.String("event_type").MaxLen(255),
		// event is what every reader of the node may see; detail is the
		// raw text behind a failure (the BMC's answer, its address, the
		// dial error), for system-scope readers only. Keeping them apart
		// hides detail by construction rather than by scrubbing text.
		field.Text("event"),
		field.Text("detail").Optional(),
		// bmc_error classifies a BMC failure in fixed words (bmc.Class:
		// kind, reason, status), so pages need not read the text.
		field.JSON("bmc_error", map[string]any{}).Optional(),
		field.String("user").Optional(),
		field.String("conductor").Optional(),
		// The acting project (Ironic 1.113) and the node's provision state,
		// its target, and the seconds since it last changed, when the event
		// was written (1.115).
		field.String("project").Optional(),
		field.String("state").Optional(),
		field.String("target_provision_state").Optional(),
		field.Int("duration_seconds").Optional().Nillable(),
	}
}

func (NodeEvent) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("events").Field("node_id").Unique().Required(),
	}
}

func (NodeEvent) Indexes() []ent.Index {
	return []ent.Index{index.Fields("node_id", "created_at")}
}
