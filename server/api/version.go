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
	VerName           Version = 5  // node name
	VerCleanStep      Version = 7  // clean_step field
	VerCleanSteps     Version = 15 // manual cleaning with explicit clean_steps
	VerAllocations    Version = 52 // /v1/allocations
	VerAllocUpdate    Version = 57 // PATCH /v1/allocations/{id}
	VerAllocOwner     Version = 60 // allocation owner and ?owner=
	VerFields         Version = 8  // ?fields=
	VerRAID           Version = 12 // RAID configuration, /v1/drivers/{name}/raid
	VerDriverLinks    Version = 14 // properties links on drivers
	VerDynamicDrivers Version = 30 // driver type, ?detail= and ?type= on /v1/drivers
	VerStorageIface   Version = 33 // storage interface
	VerRescueIface    Version = 38 // rescue interface
	VerBIOSIface      Version = 40 // bios interface
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
	VerInspectTimes   Version = 6  // inspection_started_at and _finished_at
	VerNetworkIface   Version = 20 // network_interface
	VerDriverIfaces   Version = 31 // boot, console, deploy, inspect, management, power, raid, vendor interfaces
	VerDeployStep     Version = 44 // deploy_step field
	VerResetIfaces    Version = 45 // ?reset_interfaces= on node PATCH
	VerAutomatedClean Version = 47 // automated_clean field
	VerProtected      Version = 48 // protected and protected_reason
	VerRetired        Version = 61 // retired and retired_reason, ?retired=
	VerNetworkData    Version = 66 // network_data field
	VerBootMode       Version = 75 // boot_mode and secure_boot
	// Fields newer than VerMax: stored, validated and carried now, shown
	// once VerMax reaches them.
	VerShard           Version = 82  // shard field, ?shard= and ?sharded=
	VerParentNode      Version = 83  // parent_node, ?parent_node= and ?include_children=
	VerServiceStep     Version = 87  // service_step field
	VerDisablePowerOff Version = 95  // disable_power_off field
	VerInstanceName    Version = 104 // instance_name field
	VerHealth          Version = 109 // health field
	// VerMax is the newest version whose behaviour for the resources Anvil
	// implements is really in place. Debian's python3-ironicclient 5.0.1
	// knows up to 1.78 and negotiates down to the lower of the two.
	VerMax = VerHistory
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

func requireVersion(v, need Version, what string) error {
	if v < need {
		return errs.NotAcceptable("%s requires API version %s or later; the request asked for %s", what, need, v)
	}
	return nil
}
