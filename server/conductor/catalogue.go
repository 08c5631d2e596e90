package conductor

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/nodes"
)

// Arg describes one step argument for the catalogue's readers (the
// portal, the README, the API's step list) and checks a value of it.
type Arg struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string, boolean, integer, or "list of {...}"
	Required    bool   `json:"required"`
	Description string `json:"description"`
	// Choices are the only values a string argument takes, for a form's
	// <select>; the check refuses any other.
	Choices []string `json:"choices,omitempty"`
	check   func(any) error
}

// StepInfo is a step of the catalogue and the drivers that run it.
type StepInfo struct {
	Interface   string   `json:"interface"`
	Step        string   `json:"step"`
	Description string   `json:"description"`
	Args        []Arg    `json:"args"`
	Drivers     []string `json:"drivers"`
	// InBand steps run in the ramdisk agent on the machine, which the
	// run boots first; disable_ramdisk refuses them.
	InBand bool `json:"in_band"`
}

// Name is interface.step.
func (s StepInfo) Name() string { return s.Interface + "." + s.Step }

var (
	// allDrivers are every driver; a bmclib node runs of them only what
	// its provider offers (offers).
	allDrivers = []string{"fake-hardware", "ipmi", "redfish", "bmclib"}
	// outOfBand are the drivers whose BMC speaks Redfish's resources;
	// the fake driver mimics them in memory so demos and benchmarks run
	// every step.
	outOfBand = []string{"fake-hardware", "redfish"}
	// withAgent are the drivers whose machines boot the ramdisk agent;
	// a bmclib node's when its provider sets the boot device (offers).
	withAgent = []string{"ipmi", "redfish", "bmclib"}
)

// agentStep is a step the ramdisk agent runs.
func agentStep(iface, step, desc string) StepInfo {
	return StepInfo{Interface: iface, Step: step, Description: desc, Drivers: withAgent, InBand: true}
}

// catalogue is every step Anvil runs, in one table: what it does, its
// arguments, which drivers run it. Steps of Ironic's interfaces that are
// not here may still be stored in runbooks and requests (a runbook
// written for Ironic keeps its steps); a run containing one fails before
// its first step, naming it and the driver.
var catalogue = []StepInfo{
	{"power", "power_on", "Power the node on.", nil, allDrivers, false},
	{"power", "power_off", "Power the node off.", nil, allDrivers, false},
	{"power", "reboot", "Restart the node (power it on when off) and wait until the BMC reports it on.", nil, allDrivers, false},
	{"management", "set_boot_device", "Set the next boot device.", []Arg{
		{"device", "string", true, "one of " + strings.Join(bmc.AllBootDevices(), ", ") + " (redfish has no safe)", bmc.AllBootDevices(), isDevice},
		{"persistent", "boolean", false, "keep the device for every boot, not only the next", nil, isBool},
	}, allDrivers, false},
	{"management", "reset_bmc", "Restart the BMC (Redfish GracefulRestart, IPMI warm reset).", nil, allDrivers, false},
	{"deploy", "wait", "Wait the given seconds in the wait state (abort ends it early).", []Arg{
		{"seconds", "integer", false, "0 to 86400; 0 when left out", nil, isSeconds},
	}, allDrivers, false},
	{"deploy", "hold", "Stop in the hold state until an operator or tenant sends unhold.", nil, allDrivers, false},
	// Every driver's deployments run it; what each can deploy (ipmi and
	// bmclib only through the ramdisk agent) is checked before it is
	// planned (deployFits).
	{"deploy", "deploy", "Put the instance in place and power the node on: the direct and custom-agent deploys boot the machine into the ramdisk agent; redfish's ramdisk deploy inserts instance_info.boot_iso as a virtual CD and boots it once; fake-hardware only powers on. Runs in every deployment, at priority 100.", nil, allDrivers, false},
	{"bios", "apply_configuration", "Apply BIOS settings: stage them at the BMC, reboot the node so they take effect (only when one differs from the current value), check each became current, and refresh the cached settings.", []Arg{
		{"settings", "list of {name, value}", true, "BIOS attributes to set, by the BMC's attribute names", nil, isSettings},
	}, outOfBand, false},
	{"bios", "factory_reset", "Reset the BIOS settings to the vendor's defaults (rebooting to apply them) and refresh the cached settings.", nil, outOfBand, false},
	{"management", "attach_virtual_media", "Insert an image (an ISO the BMC downloads) into a virtual drive; an image already there is ejected first. An Anvil step (Ironic does this through its vmedia API).", []Arg{
		{"image_url", "string", true, "http:// or https:// URL the BMC can reach", nil, isImageURL},
		{"device_type", "string", false, "cdrom (default) or floppy", bmc.VMediaDevices, isVMediaDevice},
	}, outOfBand, false},
	{"management", "detach_virtual_media", "Eject the image from a virtual drive, or from every one. An Anvil step.", []Arg{
		{"device_type", "string", false, "cdrom or floppy; every drive when left out", bmc.VMediaDevices, isVMediaDevice},
	}, outOfBand, false},
	{"management", "set_boot_mode", "Set the boot mode the machine boots in next (Redfish BootSourceOverrideMode). An Anvil step (Ironic: PUT states/boot_mode).", []Arg{
		{"mode", "string", true, "uefi or bios", bootModes, isBootMode},
	}, outOfBand, false},
	{"management", "set_secure_boot", "Turn UEFI secure boot on or off (Redfish SecureBoot). An Anvil step (Ironic: PUT states/secure_boot).", []Arg{
		{"enabled", "boolean", true, "true to turn secure boot on", nil, isBool},
	}, outOfBand, false},
	{"bios", "cache_bios_settings", "Read the current BIOS settings from the BMC into Anvil's cache (GET /v1/nodes/{node}/bios).", nil, outOfBand, false},
	{"management", "clear_event_log", "Clear the BMC's event log: IPMI's SEL (sel clear), Redfish's LogService.ClearLog on every log service of the system and its manager; a BMC with no log service fails the step saying so. An Anvil step (Ironic has none).", nil, allDrivers, false},
	{"management", "clear_sel", "Clear the BMC's system event log through the node's bmclib provider (bmclib ClearSystemEventLog). An Anvil step.", nil, []string{"bmclib"}, false},
	{"management", "get_post_code", "Read the BIOS/UEFI POST code the host last showed through the node's bmclib provider (bmclib PostCode; ASRockRack) into the node's history, as a diagnostics event: the code, in decimal and hex, and the boot stage bmclib names for it (boot-init/pxe, uefi, grub/os or unknown). An Anvil step.", nil, []string{"bmclib"}, false},
	{"management", "screenshot", "Capture the node's video console through its bmclib provider (bmclib Screenshot; Dell, Supermicro) and keep it as the node's console screenshot, replacing the last, at GET /v1/nodes/{node}/screenshot for whoever may see the node's console (baremetal:node:get_console). Only a PNG or JPEG image of at most 8 MiB is kept. An Anvil step.", nil, []string{"bmclib"}, false},
	{"management", "get_sel", "Read the BMC's system event log through the node's bmclib provider (bmclib GetSystemEventLog) into the node's history: the entry count for every reader, the entries for system-scope readers only, as other BMC output. An Anvil step.", nil, []string{"bmclib"}, false},
	{"firmware", "update", "Update firmware components from image URLs through the BMC's UpdateService.SimpleUpdate, one after another, as Ironic's redfish firmware interface: the BMC's task is followed (Location, the Task the answer is, or its TaskMonitor); a BIOS update reboots the machine once its task starts (BMCs apply BIOS images at the next POST), a NIC update after its task; a BMC update waits for the BMC to report a new version; a BMC that stops answering meanwhile is waited out (--firmware-unresponsive-bmc-wait). A task that ends in an exception fails the step with the BMC's message. On a bmclib node whose vendor BMC cannot pull (dell, supermicro, asrockrack, openbmc), Anvil pushes the image itself through bmclib's vendor upload and install flow, in the steps bmclib names for the component: url must then be an image of Anvil's own firmware image store, the host is powered off or power cycled and the BMC reset where the vendor asks, and nothing is reset or rebooted that it does not.", []Arg{
		{"settings", "list of {component, url, wait}", true, "component bios, bmc or nic:<adapter serial number or id> (bmclib: the components its provider updates); url http(s) the BMC can reach (bmclib: this Anvil's /firmware/<sha256>/<name> URL); wait seconds: for bmc how long to wait for its new version (default 300), otherwise a pause after the update", nil, isFirmwareSettings},
	}, append(slices.Clone(outOfBand), "bmclib"), false},
	{"raid", "create_configuration", "Build the node's target_raid_config out of band: each logical disk becomes a Volume POSTed to the system's Redfish Storage controller (RAIDType from raid_level, CapacityBytes from size_gb unless MAX, drives from physical_disks, number_of_physical_disks or the fewest the level needs) with the apply time Ironic picks (Immediate, else OnReset); a request the BMC answers with a task or job is followed to its end, after rebooting the node when it waits for a reset, then raid_config records every volume the BMC reports. A node without a target, or a task that fails, fails the step.", []Arg{
		{"create_root_volume", "boolean", false, "build the root volume (is_root_volume); default true", nil, isBool},
		{"create_nonroot_volumes", "boolean", false, "build the other volumes; default true", nil, isBool},
		{"delete_existing", "boolean", false, "delete every existing volume first; default false", nil, isBool},
	}, outOfBand, false},
	// Ironic's RAIDInterface.apply_configuration: the configuration
	// travels with the step, so a runbook carries the logical disks it
	// builds rather than depending on what the node's target says.
	{"raid", "apply_configuration", "Make raid_config the node's target_raid_config, then build it as create_configuration does (delete_existing defaults to true here, as in Ironic).", []Arg{
		{"raid_config", "object {logical_disks}", true, "the target RAID configuration (Ironic's RAID schema): logical_disks, each with raid_level and size_gb (GiB or MAX) and optionally is_root_volume, volume_name, controller, physical_disks, disk_type, interface_type, number_of_physical_disks, share_physical_disks", nil, isRAIDConfig},
		{"create_root_volume", "boolean", false, "build the root volume (is_root_volume); default true", nil, isBool},
		{"create_nonroot_volumes", "boolean", false, "build the other volumes; default true", nil, isBool},
		{"delete_existing", "boolean", false, "delete every existing volume first; default true", nil, isBool},
	}, outOfBand, false},
	{"raid", "delete_configuration", "Delete every volume of the system's Redfish Storage controllers (DELETE on each, with the apply time Ironic picks; tasks followed, the node rebooted for those waiting for a reset, one per controller per reboot) and record the empty configuration in raid_config.", nil, outOfBand, false},
	// The conductor's side of an agent deploy (direct, custom-agent),
	// planned around the request's steps at Ironic's priorities.
	{"deploy", "write_image", "Have the ramdisk agent download instance_info.image_source, verify its checksum and write it to the root disk, then the config drive (priority 80 of a direct deploy).", nil, withAgent, false},
	{"deploy", "prepare_instance_boot", "Make the disk the machine's persistent boot device (priority 60 of an agent deploy).", nil, withAgent, false},
	{"deploy", "tear_down_agent", "Power the machine off through its BMC, eject the agent's CD and forget the agent (priority 40 of an agent deploy).", nil, withAgent, false},
	{"deploy", "boot_instance", "Power the machine on into its instance (priority 20 of an agent deploy).", nil, withAgent, false},
	// The ramdisk agent's steps (ironic-python-agent's generic hardware
	// manager): the run boots the machine into the agent first.
	agentStep("deploy", "erase_devices_metadata", "In the ramdisk agent: wipe every disk's partition tables and filesystem signatures (fast; what automated cleaning runs between tenants)."),
	agentStep("deploy", "erase_devices", "In the ramdisk agent: erase every disk, by ATA secure erase or NVMe format where the disk supports it, else by overwriting (hours on large disks)."),
	agentStep("deploy", "erase_devices_express", "In the ramdisk agent: erase each disk the fastest way it supports (hardware erase, else metadata only)."),
	agentStep("deploy", "burnin_cpu", "In the ramdisk agent: load every CPU with stress-ng (driver_info agent_burnin_cpu_timeout, default 86400 s)."),
	agentStep("deploy", "burnin_memory", "In the ramdisk agent: exercise the memory with stress-ng (driver_info agent_burnin_vm_timeout and agent_burnin_vm_vm-bytes)."),
	agentStep("deploy", "burnin_disk", "In the ramdisk agent: exercise every disk with fio (driver_info agent_burnin_fio_disk_*)."),
	agentStep("deploy", "burnin_network", "In the ramdisk agent: exercise the network with fio against a paired node (driver_info agent_burnin_fio_network_*)."),
}

// Catalogue lists every step Anvil runs.
func Catalogue() []StepInfo { return slices.Clone(catalogue) }

// StepsFor lists the steps node n can run, for the API's step list. With
// raid_interface agent, the RAID steps are the agent's software RAID.
func StepsFor(n *ent.Node) []StepInfo {
	d := bmc.Canonical(n.Driver)
	var out []StepInfo
	for _, s := range catalogue {
		if s.Interface == "raid" && agentRAID(n) {
			// The agent's apply_configuration is a deploy step only.
			if slices.Contains(withAgent, d) && s.Step != "apply_configuration" {
				out = append(out, agentRAIDStep(s))
			}
			continue
		}
		if offers(n, s) {
			out = append(out, s)
		}
	}
	return out
}

// offers reports whether node n's driver runs catalogue step s; a
// bmclib node, whether its provider does.
func offers(n *ent.Node, s StepInfo) bool {
	d := bmc.Canonical(n.Driver)
	if !slices.Contains(s.Drivers, d) {
		return false
	}
	if d == "bmclib" {
		p, _ := n.DriverInfo["bmclib_provider"].(string)
		if s.InBand || agentDeploySteps[s.Name()] != nil || s.Name() == "deploy.deploy" {
			// The agent's steps and the conductor's around them need a
			// network boot, which needs the boot device set.
			return bmc.BmclibOffers(p, "management.set_boot_device")
		}
		return bmc.BmclibOffers(p, s.Name())
	}
	return true
}

// agentRAIDStep is a RAID step as the agent runs it: software RAID
// (mdadm) over the machine's disks, for logical disks with controller
// software; the agent takes no delete_existing.
func agentRAIDStep(s StepInfo) StepInfo {
	s.Drivers, s.InBand = withAgent, true
	switch s.Step {
	case "create_configuration":
		s.Description = "In the ramdisk agent: build the node's target_raid_config as Linux software RAID (logical disks with controller software, one or two of them, over the disks physical_disks names or all of them), then record what the agent built in raid_config."
		s.Args = slices.DeleteFunc(slices.Clone(s.Args), func(a Arg) bool { return a.Name == "delete_existing" })
	case "delete_configuration":
		s.Description = "In the ramdisk agent: stop and remove every software RAID device and clear the disks' RAID superblocks, then empty raid_config."
	}
	return s
}

// reserved are Ironic's reserved step names, which run on whatever
// interface a step names (deploy.reboot is a reboot), as
// ironic/conductor/steps.py maps them; the value is the interface of
// Anvil's step of that name.
var reserved = map[string]string{"power_on": "power", "power_off": "power", "reboot": "power", "hold": "deploy", "wait": "deploy"}

func canonical(iface, step string) (string, string) {
	if i, ok := reserved[step]; ok {
		return i, step
	}
	return iface, step
}

func lookupStep(iface, step string) *StepInfo {
	iface, step = canonical(iface, step)
	for i := range catalogue {
		if catalogue[i].Interface == iface && catalogue[i].Step == step {
			return &catalogue[i]
		}
	}
	return nil
}

// unsupported names the first step node n's driver cannot run, before a
// run starts, so nothing is done to a node for a run that cannot finish.
func unsupported(n *ent.Node, steps []Step) string {
	driver := n.Driver
	d := bmc.Canonical(driver)
	for _, s := range steps {
		info := lookupStep(s.Interface, s.Step)
		switch {
		case info != nil && offers(n, *info):
			continue
		case info != nil && d == "bmclib":
			p, _ := n.DriverInfo["bmclib_provider"].(string)
			return fmt.Sprintf("Step %s is not supported by driver %s with bmclib provider %s.", s.Name(), driver, p)
		case s.Interface == "raid" && agentRAID(n) && slices.Contains(withAgent, d):
			// The agent's software RAID; the agent says whether it has
			// the step (apply_configuration is a deploy step only).
			continue
		case info == nil && s.Interface == "deploy" && slices.Contains(withAgent, d):
			// Another deploy-interface step is the agent's own (a
			// custom hardware manager's, such as metal3's
			// install_coreos); the agent says whether it has it.
			continue
		case InBand(s.Interface, s.Step):
			return fmt.Sprintf("Step %s runs in the ramdisk agent, and driver %s has no machine to boot one on.", s.Name(), driver)
		default:
			return fmt.Sprintf("Step %s is not supported by driver %s.", s.Name(), driver)
		}
	}
	return ""
}

func isDevice(v any) error {
	s, _ := v.(string)
	if !slices.Contains(bmc.AllBootDevices(), s) {
		return fmt.Errorf("must be one of %s", strings.Join(bmc.AllBootDevices(), ", "))
	}
	return nil
}

func isBool(v any) error {
	if _, ok := v.(bool); !ok {
		return fmt.Errorf("must be true or false")
	}
	return nil
}

func isSeconds(v any) error {
	f, ok := v.(float64)
	if !ok || f < 0 || f > 86400 || f != float64(int(f)) {
		return fmt.Errorf("must be a whole number of seconds from 0 to 86400")
	}
	return nil
}

func isImageURL(v any) error {
	s, _ := v.(string)
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(s) > 2048 {
		return fmt.Errorf("must be an http:// or https:// URL of at most 2048 characters")
	}
	return nil
}

func isVMediaDevice(v any) error {
	if s, _ := v.(string); !slices.Contains(bmc.VMediaDevices, s) {
		return fmt.Errorf("must be one of %s", strings.Join(bmc.VMediaDevices, ", "))
	}
	return nil
}

var bootModes = []string{"uefi", "bios"}

func isBootMode(v any) error {
	if s, _ := v.(string); !slices.Contains(bootModes, s) {
		return fmt.Errorf("must be uefi or bios")
	}
	return nil
}

func isFirmwareSettings(v any) error {
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > 10 {
		return fmt.Errorf("must be a list of 1 to 10 {component, url, wait} objects")
	}
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return fmt.Errorf("[%d] must be an object with component and url", i)
		}
		for k := range m {
			if k != "component" && k != "url" && k != "wait" {
				return fmt.Errorf("[%d] has %q; a setting has component, url and wait", i, k)
			}
		}
		if c, _ := m["component"].(string); !slices.Contains(bmc.FirmwareComponents, c) && (!strings.HasPrefix(c, bmc.NICPrefix) || c == bmc.NICPrefix) {
			return fmt.Errorf("[%d].component must be one of %s or %s<adapter>", i, strings.Join(bmc.FirmwareComponents, ", "), bmc.NICPrefix)
		}
		if err := isImageURL(m["url"]); err != nil {
			return fmt.Errorf("[%d].url %v", i, err)
		}
		if w, ok := m["wait"]; ok {
			// Ironic's schema: an integer of at least 1.
			if err := isSeconds(w); err != nil || w == 0.0 {
				return fmt.Errorf("[%d].wait must be a whole number of seconds from 1 to 86400", i)
			}
		}
	}
	return nil
}

// maxSettings bounds one apply_configuration; BIOSes have a few hundred
// attributes.
const maxSettings = 500

func isSettings(v any) error {
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > maxSettings {
		return fmt.Errorf("must be a list of 1 to %d {name, value} objects", maxSettings)
	}
	seen := map[string]bool{}
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return fmt.Errorf("[%d] must be an object with name and value", i)
		}
		for k := range m {
			if k != "name" && k != "value" {
				return fmt.Errorf("[%d] has %q; a setting has only name and value", i, k)
			}
		}
		name, _ := m["name"].(string)
		if name == "" || len(name) > 255 {
			return fmt.Errorf("[%d].name must be a non-empty string of at most 255 characters", i)
		}
		if seen[name] {
			return fmt.Errorf("[%d] sets %s a second time", i, name)
		}
		seen[name] = true
		switch m["value"].(type) {
		case string, float64, bool:
		default:
			return fmt.Errorf("[%d].value must be a string, number or boolean", i)
		}
	}
	return nil
}

// isRAIDConfig checks a step's raid_config against Ironic's RAID schema,
// naming the field it refuses (logical_disks[1].raid_level).
func isRAIDConfig(v any) error {
	cfg, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("must be an object with logical_disks")
	}
	if field, why := nodes.RAIDConfigProblem(cfg); field != "" {
		return fmt.Errorf("%s %s", field, why)
	}
	return nil
}

// settingsArg reads a checked settings argument.
func settingsArg(st Step) map[string]any {
	out := map[string]any{}
	list, _ := st.Args["settings"].([]any)
	for _, x := range list {
		m, _ := x.(map[string]any)
		name, _ := m["name"].(string)
		out[name] = m["value"]
	}
	return out
}
