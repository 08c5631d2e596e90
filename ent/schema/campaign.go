package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Campaign is one runbook rolled over a set of nodes (issue #29): at most
// max_concurrency of them in progress at once across every conductor,
// stopping new starts once more than max_failures have failed. It is an
// Anvil extension; Ironic has no such resource.
type Campaign struct{ ent.Schema }

func (Campaign) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Campaign) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		field.String("name").MaxLen(255),
		// runbook is the runbook's UUID, resolved once at creation so a
		// later runbook of the same name never changes what runs.
		field.String("runbook").Immutable().MaxLen(36),
		// runbook_name is kept for display and for the node's history,
		// which outlives a renamed or deleted runbook.
		field.String("runbook_name").Immutable().MaxLen(255),
		// owner is the creator's project, NULL for a system campaign.
		field.String("owner").Optional().Nillable().Immutable().MaxLen(255),
		field.String("created_by").Immutable().MaxLen(255),
		// principal is the creator as the policy saw them (user, scope,
		// roles): each node's turn is authorized again as that caller.
		field.JSON("principal", map[string]any{}).Immutable(),
		// state: pending_approval, scheduled, running, paused, completed,
		// failed, cancelled.
		field.String("state").MaxLen(32),
		field.Int("max_concurrency"),
		// max_failures is the failure budget as a count; when it was
		// given as a percentage, max_failures_percent keeps what was
		// asked and max_failures is that share of the campaign's nodes.
		field.Int("max_failures"),
		field.Int("max_failures_percent").Optional().Nillable(),
		// running counts the campaign's nodes in progress. It is moved
		// only together with a node's status, in one transaction, and
		// taken with a conditional UPDATE (running < max_concurrency) so
		// the cap holds across replicas.
		field.Int("running").Default(0),
		field.Time("start_after").Optional().Nillable(),
		// window_* bound when nodes may start: on window_days (mon…sun,
		// empty for every day) from window_from to window_to ("HH:MM",
		// wrapping past midnight when to is earlier) in window_timezone.
		// Outside it the campaign stays running but starts nothing.
		field.Strings("window_days").Optional(),
		field.String("window_from").Optional().Nillable().Immutable().MaxLen(5),
		field.String("window_to").Optional().Nillable().Immutable().MaxLen(5),
		field.String("window_timezone").Optional().Nillable().Immutable().MaxLen(64),
		// batch_pause (seconds) makes the campaign run in batches of
		// max_concurrency nodes, the next starting that long after the
		// last of the previous one finished; 0 rolls on as places free.
		field.Int("batch_pause").Default(0).Immutable(),
		// batch is the number of the batch now starting (0 before any),
		// batch_started how many of its nodes were claimed, and
		// batch_done_at when its last node finished. A claim moves them
		// with the running count in one conditional UPDATE.
		field.Int("batch").Default(0),
		field.Int("batch_started").Default(0),
		field.Time("batch_done_at").Optional().Nillable(),
		// retry_of is the campaign whose failed nodes this one retries.
		field.String("retry_of").Optional().Nillable().Immutable().MaxLen(36),
		field.Bool("requires_approval").Default(false),
		field.String("approved_by").Optional().Nillable().MaxLen(255),
		field.Time("approved_at").Optional().Nillable(),
		field.Time("started_at").Optional().Nillable(),
		field.Time("finished_at").Optional().Nillable(),
	}
}

func (Campaign) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("nodes", CampaignNode.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("approvals", CampaignApproval.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

func (Campaign) Indexes() []ent.Index {
	return []ent.Index{index.Fields("owner"), index.Fields("state")}
}

// CampaignNode is one node's place in a campaign: its status and, once
// its turn came, the run it started and how that ended.
type CampaignNode struct{ ent.Schema }

func (CampaignNode) Fields() []ent.Field {
	return []ent.Field{
		field.Int("campaign_id").Immutable(),
		// node_uuid, not an edge: a deleted node's result stays on
		// record, as the node's history outlives it.
		field.String("node_uuid").Immutable().MaxLen(36),
		// status: pending, running, succeeded, failed, skipped.
		field.String("status").MaxLen(16),
		field.Text("reason").Optional().Nillable(),
		// run is the provision verb the node's turn started (clean or
		// service); the node's history names the run by it and started_at.
		field.String("run").Optional().Nillable().MaxLen(16),
		// position keeps the order the nodes were given in.
		field.Int("position"),
		// batch is the batch the node started in (0 until it starts).
		field.Int("batch").Default(0),
		field.Time("started_at").Optional().Nillable(),
		field.Time("finished_at").Optional().Nillable(),
	}
}

func (CampaignNode) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("campaign", Campaign.Type).Ref("nodes").Field("campaign_id").Unique().Required().Immutable(),
	}
}

func (CampaignNode) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("campaign_id", "node_uuid").Unique(),
		index.Fields("campaign_id", "status"),
		index.Fields("node_uuid"),
	}
}

// CampaignApproval is one node owner's approval a lessee's campaign waits
// for: the owner's policy (baremetal:campaign:owner_approval) asked for it
// when the campaign named nodes that project owns and the creator only
// leases. The owner's managers see the campaign and approve their row.
type CampaignApproval struct{ ent.Schema }

func (CampaignApproval) Fields() []ent.Field {
	return []ent.Field{
		field.Int("campaign_id").Immutable(),
		// project is the owner whose approval is needed.
		field.String("project").Immutable().MaxLen(255),
		field.String("approved_by").Optional().Nillable().MaxLen(255),
		field.Time("approved_at").Optional().Nillable(),
	}
}

func (CampaignApproval) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("campaign", Campaign.Type).Ref("approvals").Field("campaign_id").Unique().Required().Immutable(),
	}
}

func (CampaignApproval) Indexes() []ent.Index {
	return []ent.Index{index.Fields("campaign_id", "project").Unique(), index.Fields("project")}
}
