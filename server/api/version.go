package api

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
)

// Version is an Ironic API microversion, 1.Minor. Anvil speaks only major
// version 1, like Ironic.
type Version int

// Microversions that gate behaviour Anvil implements. A field or feature
// newer than the request's version is hidden or refused, as Ironic does.
const (
	VerMin            Version = 1  // initial API
	VerAvailable      Version = 2  // "available" shown as itself, not as no state (null)
	VerInspectWait    Version = 39 // "inspect wait" shown as itself, not as "inspecting"
	VerDriverInternal Version = 3  // driver_internal_info field
	VerManageable     Version = 4  // manageable state, manage and provide verbs
	VerAbort          Version = 13 // abort verb
	VerAdopt          Version = 17 // adopt verb
	VerName           Version = 5  // node name
	VerCleanStep      Version = 7  // clean_step field
	VerCleanSteps     Version = 15 // manual cleaning with explicit clean_steps
	VerAllocations    Version = 52 // /v1/allocations
	VerAllocUpdate    Version = 57 // PATCH /v1/allocations/{id}
	VerAllocBackfill  Version = 58 // POST /v1/allocations with node
	VerAllocOwner     Version = 60 // allocation owner and ?owner=
	VerFields         Version = 8  // ?fields=
	VerRAID           Version = 12 // RAID configuration, /v1/drivers/{name}/raid
	VerDriverLinks    Version = 14 // properties links on drivers
	VerDynamicDrivers Version = 30 // driver type, ?detail= and ?type= on /v1/drivers
	VerStorageIface   Version = 33 // storage interface
	VerRescueIface    Version = 38 // rescue interface
	VerBIOSIface      Version = 40 // bios interface, /v1/nodes/{node}/bios
	VerInspectAbort   Version = 41 // abort in inspect wait
	VerBIOSRegistry   Version = 74 // BIOS attribute registry fields, detail and fields on bios
	VerDriverFields   Version = 77 // ?fields= on /v1/drivers
	VerFirmwareIface  Version = 86 // firmware interface
	VerProvStateFilt  Version = 9  // ?provision_state=
	VerEnrollDefault  Version = 11 // new nodes start in enroll, not available
	VerDriverFilter   Version = 16 // ?driver=
	VerResourceClass  Version = 21 // resource_class field and filter
	VerSoftPower      Version = 27 // soft power off / soft reboot
	VerTraits         Version = 37 // traits field and sub-resource
	VerFault          Version = 42 // fault field
	VerConductorGroup Version = 46 // conductor_group field and filter
	VerConductor      Version = 49 // node's conductor field, /v1/conductors
	VerOwner          Version = 50 // owner field and filter
	VerDescription    Version = 51 // description field
	VerLessee         Version = 65 // lessee field and filter
	VerDisableRamdisk Version = 70 // disable_ramdisk in manual cleaning
	VerHistory        Version = 78 // node history
	// Deployment (states_deploy.go).
	VerRebuildConfigDrive Version = 35  // configdrive with rebuild
	VerBuildConfigDrive   Version = 56  // configdrive as a JSON object
	VerConfigDriveVendor  Version = 59  // vendor_data in a configdrive object
	VerDeploySteps        Version = 69  // deploy_steps
	VerDeployVerbs        Version = 73  // deploy and undeploy verbs
	VerDeployAbort        Version = 110 // abort in wait call-back
	// Ports, portgroups and VIFs.
	VerPortInternalInfo  Version = 18  // port internal_info
	VerPortAdvancedNet   Version = 19  // port pxe_enabled, local_link_connection
	VerPortgroups        Version = 23  // /v1/portgroups
	VerPortgroupSub      Version = 24  // portgroup_uuid, /nodes/{n}/portgroups, /portgroups/{pg}/ports
	VerPortgroupMode     Version = 26  // portgroup mode and properties
	VerVIFs              Version = 28  // /v1/nodes/{node}/vifs
	VerPortPhysnet       Version = 34  // port physical_network
	VerDetailQuery       Version = 43  // ?detail= on lists
	VerPortSmartNIC      Version = 53  // port is_smartnic
	VerVIFAttachPort     Version = 67  // port_uuid / portgroup_uuid in a VIF attach
	VerPortName          Version = 88  // port name
	VerPortDescription   Version = 97  // port description, ?description_contains=
	VerConductorGroups   Version = 99  // ?conductor_groups= on ports and portgroups
	VerPortVendor        Version = 100 // port vendor
	VerPortCategory      Version = 101 // port category
	VerPortgroupPhysnet  Version = 102 // portgroup physical_network
	VerPortgroupCategory Version = 103 // portgroup category
	VerDynamicPortgroup  Version = 111 // port available_for_dynamic_portgroup, portgroup dynamic_portgroup
	VerAllocName         Version = 79  // allocations try the node named like them first
	VerProjectNodes      Version = 80  // marker: project-scoped node creation and deletion
	VerUnhold            Version = 85  // unhold verb
	VerService           Version = 87  // service verb
	VerRunbooks          Version = 92  // /v1/runbooks
	VerDotJSON           Version = 91  // no stripping of a trailing .json from paths
	VerOVNVTEP           Version = 90  // OVN VTEP keys in a port's local_link_connection
	VerNoOVNVTEP         Version = 105 // OVN VTEP keys refused and hidden again
	VerPortNodeIdent     Version = 94  // node_ident (UUID or name) in a port's create body
	VerPortgroupShard    Version = 106 // ?shard= on portgroups
	VerInspectCallback   Version = 84  // POST /v1/continue_inspection (also at 1.1)
	// The ramdisk agent's endpoints and their fields.
	VerRamdisk        Version = 22 // GET /v1/lookup, POST /v1/heartbeat/{node}
	VerAgentVersion   Version = 36 // agent_version in a heartbeat
	VerAgentToken     Version = 62 // lookup issues config.agent_token
	VerAgentVerifyCA  Version = 68 // agent_verify_ca in a heartbeat
	VerAgentStatus    Version = 72 // agent_status and agent_status_message in a heartbeat
	VerServiceRamdisk Version = 108
	VerRunbookTraits  Version = 112 // runbook traits, description, /v1/runbooks/{rb}/traits
	VerHistoryProject Version = 113 // node history project
	VerHistoryState   Version = 115 // node history state, target_provision_state, duration_seconds
	VerVolume         Version = 32  // /v1/volume
	VerDeployTmpl     Version = 55  // /v1/deploy_templates
	VerEvents         Version = 54  // /v1/events in the /v1 document
	VerInventory      Version = 81  // /v1/nodes/{node}/inventory
	VerInspectTimes   Version = 6   // inspection_started_at and _finished_at
	VerNetworkIface   Version = 20  // network_interface
	VerDriverIfaces   Version = 31  // boot, console, deploy, inspect, management, power, raid, vendor interfaces
	VerDeployStep     Version = 44  // deploy_step field
	VerResetIfaces    Version = 45  // ?reset_interfaces= on node PATCH
	VerAutomatedClean Version = 47  // automated_clean field
	VerProtected      Version = 48  // protected and protected_reason
	VerRetired        Version = 61  // retired and retired_reason, ?retired=
	VerNetworkData    Version = 66  // network_data field
	VerBootMode       Version = 75  // boot_mode and secure_boot
	// Node fields and resources of the newer versions.
	VerShard            Version = 82  // shard field, ?shard= and ?sharded=
	VerParentNode       Version = 83  // parent_node, ?parent_node= and ?include_children=
	VerServiceStep      Version = 87  // service_step field
	VerDisablePowerOff  Version = 95  // disable_power_off field
	VerInstanceName     Version = 104 // instance_name field
	VerHealth           Version = 109 // health field
	VerInspectionRules  Version = 96  // /v1/inspection_rules
	VerVMedia           Version = 89  // POST and DELETE /v1/nodes/{node}/vmedia
	VerVMediaGet        Version = 93  // GET /v1/nodes/{node}/vmedia
	VerFirmwareIdentity Version = 114 // firmware component vendor, model, serial_number
	// VerMax is the newest version whose predecessors' behaviour is all in
	// place (README, "Microversions"): Ironic master's 1.115, so every
	// feature is served from its own version. Debian's python3-ironicclient
	// 5.0.1 knows up to 1.78 and negotiates down to the lower of the two.
	VerMax = VerHistoryState
)

func (v Version) String() string { return "1." + strconv.Itoa(int(v)) }

const (
	hdrIronic    = "X-OpenStack-Ironic-API-Version"
	hdrIronicMin = "X-OpenStack-Ironic-API-Minimum-Version"
	hdrIronicMax = "X-OpenStack-Ironic-API-Maximum-Version"
	hdrGeneric   = "OpenStack-API-Version"
)

// negotiate reads the requested microversion. No header means the minimum,
// as in Ironic; "latest" means the maximum; anything outside the range is
// 406 and anything unparseable 400.
func negotiate(c *fiber.Ctx) (Version, error) {
	raw := c.Get(hdrIronic)
	if raw == "" {
		if g := c.Get(hdrGeneric); g != "" {
			f := strings.Fields(g)
			if len(f) == 2 && strings.EqualFold(f[0], "baremetal") {
				raw = f[1]
			}
		}
	}
	if raw == "" {
		return VerMin, nil
	}
	if strings.EqualFold(raw, "latest") {
		return VerMax, nil
	}
	major, minor, ok := strings.Cut(raw, ".")
	mi, err := strconv.Atoi(minor)
	if !ok || major != "1" || err != nil || mi < 0 || strings.HasPrefix(minor, "+") {
		if ok && major != "1" && err == nil {
			return 0, errs.NotAcceptable("Mutually exclusive versions requested. Version %s requested but not supported by this service. The supported version range is: [%s, %s].", raw, VerMin, VerMax)
		}
		return 0, errs.BadRequest(hdrIronic, "Invalid value for %s header: %q; expected MAJOR.MINOR such as %s, or \"latest\"", hdrIronic, raw, VerMax)
	}
	v := Version(mi)
	if v < VerMin || v > VerMax {
		return 0, errs.NotAcceptable("Version %s was requested but the minor version is not supported by this service. The supported version range is: [%s, %s].", raw, VerMin, VerMax)
	}
	return v, nil
}

// versionHeaders are on every response, including errors.
func versionHeaders(c *fiber.Ctx, v Version) {
	c.Set(hdrIronicMin, VerMin.String())
	c.Set(hdrIronicMax, VerMax.String())
	if v > 0 {
		c.Set(hdrIronic, v.String())
		c.Set(hdrGeneric, "baremetal "+v.String())
	}
}

func versionInfo(base string) fiber.Map {
	return fiber.Map{
		"id":          "v1",
		"links":       []fiber.Map{link(base+"/v1/", "self")},
		"status":      "CURRENT",
		"min_version": VerMin.String(),
		"version":     VerMax.String(),
	}
}

func link(href, rel string) fiber.Map { return fiber.Map{"href": href, "rel": rel} }

// since hides a resource from requests older than the version that added
// it, before authorization, as Ironic's controllers do: a read is 404 and
// anything else 405.
func since(need Version, what string) fiber.Handler { return gate(need, what, false) }

// subSince hides a sub-resource the way Ironic's lookups do: 404 whatever
// the method.
func subSince(need Version, what string) fiber.Handler { return gate(need, what, true) }

func gate(from Version, what string, always404 bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if ver(c) >= from {
			return c.Next()
		}
		msg := "The API version does not allow " + what
		if always404 || c.Method() == fiber.MethodGet {
			return errs.NotFound("%s", msg)
		}
		return fiber.NewError(fiber.StatusMethodNotAllowed, msg)
	}
}

func requireVersion(v, need Version, what string) error {
	if v < need {
		return errs.NotAcceptable("%s requires API version %s or later; the request asked for %s", what, need, v)
	}
	return nil
}
