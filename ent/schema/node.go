package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Node is a bare-metal machine, with Ironic's field names so that Ironic
// clients and enrolment files work unchanged.
type Node struct{ ent.Schema }

func (Node) Mixin() []ent.Mixin { return []ent.Mixin{TimeMixin{}} }

func (Node) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable().MaxLen(36),
		// Names are unique when set; NULL (not "") marks an unnamed node so
		// the unique index allows any number of them.
		field.String("name").Optional().Nillable().Unique().MaxLen(255),
		field.String("driver").MaxLen(255),
		field.JSON("driver_info", map[string]any{}).Optional(),
		field.String("owner").Optional().MaxLen(255),
		field.String("lessee").Optional().MaxLen(255),
		field.String("power_state").Optional().Nillable(),
		field.String("target_power_state").Optional().Nillable(),
		field.String("provision_state").Default("enroll"),
		field.String("target_provision_state").Optional().Nillable(),
		field.Text("last_error").Optional().Nillable(),
		field.Bool("maintenance").Default(false),
		field.Text("maintenance_reason").Optional().Nillable(),
		// fault says why the conductor put the node into maintenance
		// ("power failure"), as Ironic's; clearing maintenance clears it.
		field.String("fault").Optional().Nillable().MaxLen(255),
		// reservation is the hostname of the conductor holding the node's
		// lock; it is taken and released with conditional UPDATEs only.
		field.String("reservation").Optional().Nillable(),
		field.JSON("properties", map[string]any{}).Optional(),
		field.JSON("extra", map[string]any{}).Optional(),
		field.JSON("instance_info", map[string]any{}).Optional(),
		field.String("resource_class").Optional().Nillable().MaxLen(80),
		field.String("instance_uuid").Optional().Nillable().MaxLen(36),
		field.String("description").Optional().Nillable().MaxLen(4096),
		field.JSON("clean_step", map[string]any{}).Optional(),
		field.JSON("service_step", map[string]any{}).Optional(),
		field.JSON("driver_internal_info", map[string]any{}).Optional(),
		field.Time("provision_updated_at").Optional().Nillable(),
		// conductor_group pins the node to the conductors of that group,
		// as Ironic's; "" is the default group, served by conductors
		// started without one. Stored lower case.
		field.String("conductor_group").Default("").MaxLen(255),
		// chassis_id is the chassis the node sits in; the API shows it as
		// chassis_uuid. A chassis with nodes cannot be deleted.
		field.Int("chassis_id").Optional().Nillable(),
		// The hardware interfaces, as Ironic names them. "" stands for
		// the driver's default, which nodes enrolled before these columns
		// existed have; a new node stores its interfaces explicitly.
		field.String("bios_interface").Default("").MaxLen(255),
		field.String("boot_interface").Default("").MaxLen(255),
		field.String("console_interface").Default("").MaxLen(255),
		field.String("deploy_interface").Default("").MaxLen(255),
		field.String("firmware_interface").Default("").MaxLen(255),
		field.String("inspect_interface").Default("").MaxLen(255),
		field.String("management_interface").Default("").MaxLen(255),
		field.String("network_interface").Default("").MaxLen(255),
		field.String("power_interface").Default("").MaxLen(255),
		field.String("raid_interface").Default("").MaxLen(255),
		field.String("rescue_interface").Default("").MaxLen(255),
		field.String("storage_interface").Default("").MaxLen(255),
		field.String("vendor_interface").Default("").MaxLen(255),
		// protected guards an active node's workload: it cannot be
		// undeployed, rebuilt or deleted while set.
		field.Bool("protected").Default(false),
		field.Text("protected_reason").Optional().Nillable(),
		// retired marks a node for decommissioning: it is never provided
		// to tenants again.
		field.Bool("retired").Default(false),
		field.Text("retired_reason").Optional().Nillable(),
		// automated_clean is null when the conductor's setting decides.
		field.Bool("automated_clean").Optional().Nillable(),
		field.JSON("network_data", map[string]any{}).Optional(),
		field.JSON("raid_config", map[string]any{}).Optional(),
		field.JSON("target_raid_config", map[string]any{}).Optional(),
		field.Bool("console_enabled").Default(false),
		field.JSON("deploy_step", map[string]any{}).Optional(),
		// boot_mode, secure_boot and the inspection times are what the
		// hardware last reported: PATCH cannot set them, and PUT
		// states/boot_mode or secure_boot stores the BMC's answer, not the
		// request.
		field.String("boot_mode").Optional().Nillable(),
		field.Bool("secure_boot").Optional().Nillable(),
		field.Time("inspection_started_at").Optional().Nillable(),
		field.Time("inspection_finished_at").Optional().Nillable(),
		field.String("shard").Optional().Nillable().MaxLen(255),
		// parent_node is the UUID of the node this one is a part of
		// (a DPU in its host, say); children are hidden from lists unless
		// asked for.
		field.String("parent_node").Optional().Nillable().MaxLen(36),
		field.Bool("disable_power_off").Default(false),
		field.String("instance_name").Optional().Nillable().MaxLen(255),
		field.String("health").Optional().Nillable().MaxLen(255),
	}
}

func (Node) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("traits", Trait.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("events", NodeEvent.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("allocation", Allocation.Type).Unique(),
		// A node's ports and portgroups go with it, as in Ironic.
		edge.To("ports", Port.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("portgroups", Portgroup.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("chassis", Chassis.Type).Field("chassis_id").Unique().Annotations(entsql.OnDelete(entsql.Restrict)),
		edge.To("bios_settings", BiosSetting.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("inventory", NodeInventory.Type).Unique().Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("firmware_components", FirmwareComponent.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("screenshot", NodeScreenshot.Type).Unique().Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

func (Node) Indexes() []ent.Index {
	return []ent.Index{
		// The portal groups its list by owner, lessee, state or class and
		// sorts each group by name: with the name (and id, the tie-break)
		// after the group's column, a later page walks the index instead
		// of sorting every node (40 pages into 10,000 nodes grouped by
		// class took PostgreSQL 35 ms to sort). Each still serves lookups
		// on its first column alone.
		index.Fields("owner", "name", "id"),
		index.Fields("lessee", "name", "id"),
		index.Fields("provision_state", "name", "id"),
		index.Fields("reservation"),
		index.Fields("resource_class", "name", "id"),
		index.Fields("conductor_group"),
		index.Fields("chassis_id"),
		index.Fields("shard"),
		// Only child nodes are indexed: a full index made every list's
		// "parent_node IS NULL" look selective, and planners walked it
		// for all 10,000 rows instead of the sort column's index.
		index.Fields("parent_node").StorageKey("node_parent_node_set").Annotations(entsql.IndexWhere("parent_node IS NOT NULL")),
		// The portal's "sort by created" walks this instead of sorting
		// every node.
		index.Fields("created_at"),
	}
}
