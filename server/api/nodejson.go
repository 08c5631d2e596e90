package api

import (
	"sort"
	"strings"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
)

// nodeField is one field of a node's JSON: the microversion that
// introduced it and how to write it.
type nodeField struct {
	name  string
	since Version
	write func(w *jw, v *nodes.View, ver Version)
}

// nodeFields is the node's JSON in Ironic's field order. A field newer than
// the request's version is left out, as Ironic does.
var nodeFields = []nodeField{
	{"uuid", VerMin, func(w *jw, v *nodes.View, _ Version) { w.str("uuid", v.UUID) }},
	{"name", VerName, func(w *jw, v *nodes.View, _ Version) { w.strp("name", v.Name) }},
	{"ports", VerMin, func(w *jw, v *nodes.View, _ Version) { w.subLinks(v.UUID, "ports") }},
	{"states", VerDriverLinks, func(w *jw, v *nodes.View, _ Version) { w.subLinks(v.UUID, "states") }},
	{"portgroups", VerPortgroupSub, func(w *jw, v *nodes.View, _ Version) { w.subLinks(v.UUID, "portgroups") }},
	{"volume", VerVolume, func(w *jw, v *nodes.View, _ Version) { w.subLinks(v.UUID, "volume") }},
	{"chassis_uuid", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("chassis_uuid", v.ChassisUUID) }},
	{"driver", VerMin, func(w *jw, v *nodes.View, _ Version) { w.str("driver", v.Driver) }},
	{"driver_info", VerMin, func(w *jw, v *nodes.View, _ Version) { w.obj("driver_info", v.DriverInfo) }},
	{"driver_internal_info", VerDriverInternal, func(w *jw, v *nodes.View, _ Version) { w.obj("driver_internal_info", v.DriverInternalInfo) }},
	{"owner", VerOwner, func(w *jw, v *nodes.View, _ Version) { w.proj("owner", v.Owner) }},
	{"lessee", VerLessee, func(w *jw, v *nodes.View, _ Version) { w.proj("lessee", v.Lessee) }},
	{"description", VerDescription, func(w *jw, v *nodes.View, _ Version) { w.strp("description", v.Description) }},
	{"power_state", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("power_state", v.PowerState) }},
	{"target_power_state", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("target_power_state", v.TargetPowerState) }},
	{"provision_state", VerMin, func(w *jw, v *nodes.View, ver Version) {
		w.strp("provision_state", legacyProvisionState(v.ProvisionState, ver))
	}},
	{"target_provision_state", VerMin, func(w *jw, v *nodes.View, _ Version) {
		w.strp("target_provision_state", v.TargetProvisionState)
	}},
	{"provision_updated_at", VerMin, func(w *jw, v *nodes.View, _ Version) { w.time("provision_updated_at", v.ProvisionUpdatedAt) }},
	{"last_error", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("last_error", v.LastError) }},
	{"maintenance", VerMin, func(w *jw, v *nodes.View, _ Version) { w.boolean("maintenance", v.Maintenance) }},
	{"maintenance_reason", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("maintenance_reason", v.MaintenanceReason) }},
	{"fault", VerFault, func(w *jw, v *nodes.View, _ Version) { w.strp("fault", v.Fault) }},
	{"reservation", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("reservation", v.Reservation) }},
	{"clean_step", VerCleanStep, func(w *jw, v *nodes.View, _ Version) { w.obj("clean_step", v.CleanStep) }},
	{"resource_class", VerResourceClass, func(w *jw, v *nodes.View, _ Version) { w.strp("resource_class", v.ResourceClass) }},
	{"conductor_group", VerConductorGroup, func(w *jw, v *nodes.View, _ Version) { w.str("conductor_group", v.ConductorGroup) }},
	{"conductor", VerConductor, func(w *jw, v *nodes.View, _ Version) {
		var host *string
		if w.conductor != nil {
			if h := w.conductor(v.UUID, v.ConductorGroup); h != "" {
				host = &h
			}
		}
		w.strp("conductor", host)
	}},
	ifaceField("bios", VerBIOSIface), ifaceField("boot", VerDriverIfaces), ifaceField("console", VerDriverIfaces),
	ifaceField("deploy", VerDriverIfaces), ifaceField("firmware", VerFirmwareIface), ifaceField("inspect", VerDriverIfaces),
	ifaceField("management", VerDriverIfaces), ifaceField("network", VerNetworkIface), ifaceField("power", VerDriverIfaces),
	ifaceField("raid", VerDriverIfaces), ifaceField("rescue", VerRescueIface), ifaceField("storage", VerStorageIface),
	ifaceField("vendor", VerDriverIfaces),
	{"protected", VerProtected, func(w *jw, v *nodes.View, _ Version) { w.boolean("protected", v.Protected) }},
	{"protected_reason", VerProtected, func(w *jw, v *nodes.View, _ Version) { w.strp("protected_reason", v.ProtectedReason) }},
	{"retired", VerRetired, func(w *jw, v *nodes.View, _ Version) { w.boolean("retired", v.Retired) }},
	{"retired_reason", VerRetired, func(w *jw, v *nodes.View, _ Version) { w.strp("retired_reason", v.RetiredReason) }},
	{"automated_clean", VerAutomatedClean, func(w *jw, v *nodes.View, _ Version) { w.boolp("automated_clean", v.AutomatedClean) }},
	{"console_enabled", VerMin, func(w *jw, v *nodes.View, _ Version) { w.boolean("console_enabled", v.ConsoleEnabled) }},
	{"raid_config", VerRAID, func(w *jw, v *nodes.View, _ Version) { w.obj("raid_config", v.RaidConfig) }},
	{"target_raid_config", VerRAID, func(w *jw, v *nodes.View, _ Version) { w.obj("target_raid_config", v.TargetRaidConfig) }},
	{"deploy_step", VerDeployStep, func(w *jw, v *nodes.View, _ Version) { w.obj("deploy_step", v.DeployStep) }},
	{"service_step", VerServiceStep, func(w *jw, v *nodes.View, _ Version) { w.obj("service_step", v.ServiceStep) }},
	{"network_data", VerNetworkData, func(w *jw, v *nodes.View, _ Version) { w.obj("network_data", v.NetworkData) }},
	{"boot_mode", VerBootMode, func(w *jw, v *nodes.View, _ Version) { w.strp("boot_mode", v.BootMode) }},
	{"secure_boot", VerBootMode, func(w *jw, v *nodes.View, _ Version) { w.boolp("secure_boot", v.SecureBoot) }},
	{"inspection_started_at", VerInspectTimes, func(w *jw, v *nodes.View, _ Version) { w.time("inspection_started_at", v.InspectionStartedAt) }},
	{"inspection_finished_at", VerInspectTimes, func(w *jw, v *nodes.View, _ Version) { w.time("inspection_finished_at", v.InspectionFinishedAt) }},
	{"shard", VerShard, func(w *jw, v *nodes.View, _ Version) { w.strp("shard", v.Shard) }},
	{"parent_node", VerParentNode, func(w *jw, v *nodes.View, _ Version) { w.strp("parent_node", v.ParentNode) }},
	{"disable_power_off", VerDisablePowerOff, func(w *jw, v *nodes.View, _ Version) { w.boolean("disable_power_off", v.DisablePowerOff) }},
	{"instance_name", VerInstanceName, func(w *jw, v *nodes.View, _ Version) { w.strp("instance_name", v.InstanceName) }},
	{"health", VerHealth, func(w *jw, v *nodes.View, _ Version) { w.strp("health", v.Health) }},
	{"traits", VerTraits, func(w *jw, v *nodes.View, _ Version) { w.strs("traits", v.Traits) }},
	{"instance_uuid", VerMin, func(w *jw, v *nodes.View, _ Version) { w.strp("instance_uuid", v.InstanceUUID) }},
	{"allocation_uuid", VerAllocations, func(w *jw, v *nodes.View, _ Version) { w.strp("allocation_uuid", v.AllocationUUID) }},
	{"instance_info", VerMin, func(w *jw, v *nodes.View, _ Version) { w.obj("instance_info", v.InstanceInfo) }},
	{"properties", VerMin, func(w *jw, v *nodes.View, _ Version) { w.obj("properties", v.Properties) }},
	{"extra", VerMin, func(w *jw, v *nodes.View, _ Version) { w.obj("extra", v.Extra) }},
	{"created_at", VerMin, func(w *jw, v *nodes.View, _ Version) { w.time("created_at", &v.CreatedAt) }},
	{"updated_at", VerMin, func(w *jw, v *nodes.View, _ Version) { w.time("updated_at", v.UpdatedAt) }},
}

// ifaceField is a <t>_interface field; a node that never chose one shows
// its driver's default.
func ifaceField(t string, since Version) nodeField {
	name := t + "_interface"
	return nodeField{name, since, func(w *jw, v *nodes.View, _ Version) { w.str(name, v.Interface(t)) }}
}

var nodeFieldIndex = func() map[string]int {
	m := make(map[string]int, len(nodeFields))
	for i, f := range nodeFields {
		m[f.name] = i
	}
	return m
}()

// defaultListFields are what a list without detail returns, less those
// newer than the request (name below 1.5), as Ironic's
// _DEFAULT_RETURN_FIELDS.
var defaultListFields = []string{"uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance"}

// legacyProvisionState is a provision state as an older request knows it,
// as Ironic's update_state_in_older_versions: before 1.2 "available" was
// no state at all (null), before 1.39 "inspect wait" was "inspecting".
func legacyProvisionState(state string, ver Version) *string {
	switch {
	case ver < VerAvailable && state == nodes.StateAvailable:
		return nil
	case ver < VerInspectWait && state == "inspect wait":
		state = "inspecting"
	}
	return &state
}

// fieldSet selects which node fields a response holds.
type fieldSet []int

func allFields(ver Version) fieldSet {
	fs := make(fieldSet, 0, len(nodeFields))
	for i, f := range nodeFields {
		if f.since <= ver {
			fs = append(fs, i)
		}
	}
	return fs
}

// parseFields reads ?fields=, refusing unknown fields and fields newer than
// the request's version.
func parseFields(raw string, ver Version) (fieldSet, error) {
	var bad []string
	fs := fieldSet{}
	seen := map[int]bool{}
	for _, name := range strings.Split(raw, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i, ok := nodeFieldIndex[name]
		if !ok || nodeFields[i].since > ver {
			bad = append(bad, name)
			continue
		}
		if !seen[i] {
			seen[i] = true
			fs = append(fs, i)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, errs.BadRequest("fields", "Field(s) %q are not valid for this API version", strings.Join(bad, ","))
	}
	sort.Ints(fs)
	return fs, nil
}

// namedFields selects names, leaving out those newer than ver: a list
// without ?fields= shows what the version has of the defaults.
func namedFields(names []string, ver Version) fieldSet {
	fs := fieldSet{}
	for _, name := range names {
		if i, ok := nodeFieldIndex[name]; ok && nodeFields[i].since <= ver {
			fs = append(fs, i)
		}
	}
	sort.Ints(fs)
	return fs
}

// needs reports whether fs includes field; traits, allocation_uuid and
// chassis_uuid each cost a query, conductor the hash ring.
func (fs fieldSet) needs(field string) bool {
	for _, i := range fs {
		if nodeFields[i].name == field {
			return true
		}
	}
	return false
}

// writeNode writes one node; w's base must be set.
func writeNode(w *jw, v *nodes.View, fs fieldSet, ver Version) {
	w.open()
	for _, i := range fs {
		nodeFields[i].write(w, v, ver)
	}
	w.nodeLinks("links", v.UUID, "")
	w.close()
}

// versionGatedPatchFields maps patchable fields to the version that made
// them visible, so a client cannot set what it cannot see.
var versionGatedPatchFields = map[string]Version{
	"name": VerName, "owner": VerOwner, "lessee": VerLessee, "description": VerDescription,
	"resource_class": VerResourceClass, "conductor_group": VerConductorGroup,
	"bios_interface": VerBIOSIface, "boot_interface": VerDriverIfaces, "console_interface": VerDriverIfaces,
	"deploy_interface": VerDriverIfaces, "firmware_interface": VerFirmwareIface, "inspect_interface": VerDriverIfaces,
	"management_interface": VerDriverIfaces, "network_interface": VerNetworkIface, "power_interface": VerDriverIfaces,
	"raid_interface": VerDriverIfaces, "rescue_interface": VerRescueIface, "storage_interface": VerStorageIface,
	"vendor_interface": VerDriverIfaces, "automated_clean": VerAutomatedClean, "protected": VerProtected,
	"protected_reason": VerProtected, "retired": VerRetired, "retired_reason": VerRetired,
	"network_data": VerNetworkData, "shard": VerShard, "parent_node": VerParentNode,
	"disable_power_off": VerDisablePowerOff, "instance_name": VerInstanceName,
}
