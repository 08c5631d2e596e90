package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Offer is a node an owner (or a lessee, sub-leasing: parent_lease_uuid)
// makes available for a time window, optionally to one project, as
// ESI-Leap's offer is. Leases claim parts of its window. It names its node
// by UUID, with no edge: ESI-Leap's API speaks of resources by UUID, and
// an offer's record outlives a deleted node the way its leases do.
type Offer struct{ ent.Schema }

func (Offer) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Offer) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable(),
		field.String("name").Optional().Nillable(),
		// project_id is the offering project: the node's owner, or the
		// lessee of the parent lease.
		field.String("project_id").Immutable(),
		// lessee_id restricts the offer to one project; none offers it
		// to every project.
		field.String("lessee_id").Optional().Nillable().Immutable(),
		field.String("resource_type").Default("ironic_node").Immutable(),
		field.String("resource_uuid").Immutable(),
		// resource_class is the node's at the offer, so a list filters on
		// it in SQL.
		field.String("resource_class").Default("").Immutable(),
		field.Time("start_time").Immutable(),
		field.Time("end_time").Immutable(),
		// status: available, expired or deleted (ESI-Leap's strings).
		field.String("status").Default("available"),
		field.JSON("properties", map[string]any{}).Optional(),
		field.String("parent_lease_uuid").Optional().Nillable().Immutable(),
	}
}

func (Offer) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("resource_uuid", "status"),
		index.Fields("project_id"),
		index.Fields("status", "end_time"),
	}
}

// Lease is a project's hold on a node for a time window, as ESI-Leap's
// lease is: claimed from an offer, or made by the node's owner directly,
// or by a lessee within its own lease (parent_lease_uuid). The conductor
// starts it (the node's lessee becomes project_id) and ends it.
type Lease struct{ ent.Schema }

func (Lease) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Lease) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable(),
		field.String("name").Optional().Nillable(),
		// project_id is the lessee; owner_id the project that let it.
		field.String("project_id").Immutable(),
		field.String("owner_id").Immutable(),
		field.String("purpose").Optional().Nillable(),
		field.String("resource_type").Default("ironic_node").Immutable(),
		field.String("resource_uuid").Immutable(),
		field.Time("start_time").Immutable(),
		// end_time moves when the lease is extended or shortened.
		field.Time("end_time"),
		field.Time("fulfill_time").Optional().Nillable(),
		field.Time("expire_time").Optional().Nillable(),
		// status: created, active, expired, deleted, error, wait fulfill,
		// wait expire, wait cancel (ESI-Leap's strings).
		field.String("status").Default("created"),
		field.JSON("properties", map[string]any{}).Optional(),
		field.String("offer_uuid").Optional().Nillable().Immutable(),
		field.String("parent_lease_uuid").Optional().Nillable().Immutable(),
	}
}

func (Lease) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("resource_uuid", "status"),
		index.Fields("project_id"),
		index.Fields("owner_id"),
		index.Fields("status", "start_time"),
		index.Fields("status", "end_time"),
	}
}

// LeaseEvent is one of ESI-Leap's events: a lease or offer changed
// (esi_leap.lease.fulfill.end, esi_leap.offer.create.end, …), readable by
// the lessee and owner it names.
type LeaseEvent struct{ ent.Schema }

func (LeaseEvent) Fields() []ent.Field {
	return []ent.Field{
		field.String("event_type").Immutable(),
		field.Time("event_time").Immutable(),
		field.String("object_type").Optional().Nillable().Immutable(),
		field.String("object_uuid").Optional().Nillable().Immutable(),
		field.String("resource_type").Optional().Nillable().Immutable(),
		field.String("resource_uuid").Optional().Nillable().Immutable(),
		field.String("lessee_id").Optional().Nillable().Immutable(),
		field.String("owner_id").Optional().Nillable().Immutable(),
	}
}

func (LeaseEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("event_time"),
		index.Fields("lessee_id"),
		index.Fields("owner_id"),
		index.Fields("resource_uuid"),
	}
}
