package api

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
)

// Rules for /v1/drivers, as Ironic names them.
const (
	ruleDriverGet        = "baremetal:driver:get"
	ruleDriverProperties = "baremetal:driver:get_properties"
	ruleDriverRAID       = "baremetal:driver:get_raid_logical_disk_properties"
)

// raidLogicalDiskProperties is what Ironic's RAID schema says a logical
// disk may hold; Ironic answers it for every driver, no-raid included.
var raidLogicalDiskProperties = map[string]string{
	"raid_level":               "RAID level for the logical disk. Valid values are 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0' and '6+0'. Required.",
	"size_gb":                  "Size in GiB (Integer) for the logical disk. Use 'MAX' as size_gb if this logical disk is supposed to use the rest of the space available. Required.",
	"volume_name":              "Name of the volume to be created. If this is not specified, it will be auto-generated. Optional.",
	"is_root_volume":           "Specifies whether this disk is a root volume. By default, this is False. Optional.",
	"share_physical_disks":     "Specifies whether other logical disks can share physical disks with this logical disk. By default, this is False. Optional.",
	"disk_type":                "The type of disk preferred. Valid values are 'hdd' and 'ssd'. If this is not specified, disk type will not be a selection criterion for choosing backing physical disks. Optional.",
	"interface_type":           "The interface type of disk. Valid values are 'sata', 'scsi' and 'sas'. If this is not specified, interface type will not be a selection criterion for choosing backing physical disks. Optional.",
	"number_of_physical_disks": "Number of physical disks to use for this logical disk. By default, the driver uses the minimum number of disks required for that RAID level. Optional.",
	"controller":               "Controller to use for this logical disk. If not specified, the driver will choose a suitable RAID controller on the bare metal node. Optional.",
	"physical_disks":           "The physical disks to use for this logical disk. If not specified, the driver will choose suitable physical disks to use. Optional.",
}

func (a *API) registerDrivers(v1 fiber.Router) {
	v1.Get("/drivers", query("type", "detail", "fields"), a.listDrivers)
	v1.Get("/drivers/:driver", query("fields"), a.getDriver)
	v1.Get("/drivers/:driver/properties", query(), a.driverProperties)
	v1.Get("/drivers/:driver/raid/logical_disk_properties", query(), a.driverRAIDProperties)
}

// activeDrivers maps each driver some live conductor offers to the
// conductors offering it, as Ironic lists only drivers with a live host.
// Conductors that registered under an old name count for the new one.
func (a *API) activeDrivers(c *fiber.Ctx) (map[string][]string, error) {
	cs, err := a.Ops.C.List(c.UserContext())
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, x := range cs {
		if !x.Alive {
			continue
		}
		for _, d := range x.Drivers {
			d = bmc.Canonical(d)
			if !slices.Contains(out[d], x.Hostname) {
				out[d] = append(out[d], x.Hostname)
			}
		}
	}
	return out, nil
}

// driverFields parses ?fields= for drivers, refused before 1.77 as
// Ironic does; callers authorize first.
func driverFields(c *fiber.Ctx) ([]string, error) {
	raw := c.Query("fields")
	if raw == "" {
		return nil, nil
	}
	if err := requireVersion(ver(c), VerDriverFields, "fields on drivers"); err != nil {
		return nil, err
	}
	var out []string
	for f := range strings.SplitSeq(raw, ",") {
		out = append(out, strings.TrimSpace(f))
	}
	return out, nil
}

func driverJSON(c *fiber.Ctx, name string, hosts []string, detail bool, fields []string) (fiber.Map, error) {
	b, v := baseURL(c), ver(c)
	slices.Sort(hosts)
	out := fiber.Map{
		"name":  name,
		"hosts": hosts,
		"links": []fiber.Map{link(b+"/v1/drivers/"+name, "self"), link(b+"/drivers/"+name, "bookmark")},
	}
	if v >= VerDriverLinks {
		out["properties"] = []fiber.Map{link(b+"/v1/drivers/"+name+"/properties", "self"), link(b+"/drivers/"+name+"/properties", "bookmark")}
	}
	if v >= VerDynamicDrivers {
		out["type"] = "dynamic"
		if detail {
			for _, i := range bmc.Interfaces(name) {
				if !ifaceShown(i.Type, v) {
					continue
				}
				var def any
				if i.Default != "" {
					def = i.Default
				}
				out["default_"+i.Type+"_interface"] = def
				out["enabled_"+i.Type+"_interfaces"] = i.Enabled
			}
		}
	}
	if fields == nil {
		return out, nil
	}
	var invalid []string
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			invalid = append(invalid, f)
		}
	}
	if len(invalid) > 0 {
		return nil, errs.BadRequest("fields", "Field(s) %q are not valid", strings.Join(invalid, ", "))
	}
	for k := range out {
		if k != "links" && !slices.Contains(fields, k) {
			delete(out, k)
		}
	}
	return out, nil
}

// ifaceShown reports whether an interface type exists at version v.
func ifaceShown(t string, v Version) bool {
	switch t {
	case "storage":
		return v >= VerStorageIface
	case "rescue":
		return v >= VerRescueIface
	case "bios":
		return v >= VerBIOSIface
	case "firmware":
		return v >= VerFirmwareIface
	}
	return true
}

func (a *API) authorizeDriver(c *fiber.Ctx, rule string) error {
	return a.Guard.Authorize(c.UserContext(), rule, "driver", c.Params("driver"), policies.Target{})
}

func (a *API) listDrivers(c *fiber.Ctx) error {
	detail := false
	if d := c.Query("detail"); d != "" {
		var err error
		if detail, err = strconv.ParseBool(d); err != nil {
			return errs.BadRequest("detail", "detail must be true or false, got %q", d)
		}
	}
	if c.Query("fields") != "" && detail {
		return errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
	}
	if err := a.authorizeDriver(c, ruleDriverGet); err != nil {
		return err
	}
	fields, err := driverFields(c)
	if err != nil {
		return err
	}
	typ := c.Query("type")
	if (c.Query("detail") != "" || typ != "") && ver(c) < VerDynamicDrivers {
		return requireVersion(ver(c), VerDynamicDrivers, "detail and type on drivers")
	}
	if typ != "" && typ != "classic" && typ != "dynamic" {
		return errs.BadRequest("type", `"type" filter must be one of "classic" or "dynamic", if specified.`)
	}
	active, err := a.activeDrivers(c)
	if err != nil {
		return err
	}
	out := []fiber.Map{}
	// Anvil's drivers are all hardware types ("dynamic"); Ironic has had
	// no classic drivers since Rocky and answers that filter with none.
	if typ != "classic" {
		for _, name := range bmc.Drivers() {
			hosts, ok := active[name]
			if !ok {
				continue
			}
			d, err := driverJSON(c, name, hosts, detail, fields)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
	}
	return c.JSON(fiber.Map{"drivers": out})
}

// driverNotFound is Ironic's answer for a driver no live conductor has.
func driverNotFound(name string) error {
	return errs.NotFound("Could not find the following driver(s) or hardware type(s): %s.", name)
}

func (a *API) getDriver(c *fiber.Ctx) error {
	if err := a.authorizeDriver(c, ruleDriverGet); err != nil {
		return err
	}
	fields, err := driverFields(c)
	if err != nil {
		return err
	}
	active, err := a.activeDrivers(c)
	if err != nil {
		return err
	}
	// An alias shows the driver it names, under its Ironic name.
	name := bmc.Canonical(c.Params("driver"))
	hosts, ok := active[name]
	if !ok {
		return driverNotFound(c.Params("driver"))
	}
	d, err := driverJSON(c, name, hosts, true, fields)
	if err != nil {
		return err
	}
	return c.JSON(d)
}

// knownDriver answers 404 for a name that is not one of Anvil's drivers
// or their aliases, as Ironic does for a driver it cannot load.
func knownDriver(name string) error {
	if !bmc.Known(name) {
		return driverNotFound(name)
	}
	return nil
}

func (a *API) driverProperties(c *fiber.Ctx) error {
	if err := a.authorizeDriver(c, ruleDriverProperties); err != nil {
		return err
	}
	if err := knownDriver(c.Params("driver")); err != nil {
		return err
	}
	return c.JSON(bmc.Properties(c.Params("driver")))
}

// driverRAIDProperties answers as Ironic does for a driver whose raid
// interface is no-raid: the logical disk properties of Ironic's RAID
// schema, which a client may write into target_raid_config.
func (a *API) driverRAIDProperties(c *fiber.Ctx) error {
	if err := a.authorizeDriver(c, ruleDriverRAID); err != nil {
		return err
	}
	if err := requireVersion(ver(c), VerRAID, "RAID logical disk properties"); err != nil {
		return err
	}
	if err := knownDriver(c.Params("driver")); err != nil {
		return err
	}
	return c.JSON(raidLogicalDiskProperties)
}
