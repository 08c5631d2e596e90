package api_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// metal3Baseline is the microversion metal3's baremetal-operator sends on
// every request and requires as the server's maximum
// (pkg/provisioner/ironic/clients/features.go, baseline = 89).
const metal3Baseline api.Version = 89

// TestMetal3Readiness sends the baremetal-operator's first requests as it
// does (refreshCache in pkg/provisioner/ironic/factory.go): version
// discovery on its /v1/ endpoint with its baseline microversion, then
// checks the maximum is at least the baseline and the minimum parses;
// then the conductor check, a driver list, ready when it lists any driver.
func TestMetal3Readiness(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = metal3Baseline.String()
		r := c.Do(t, "GET", "/v1/", nil)
		if api.VerMax < metal3Baseline {
			// Until the ladder reaches the baseline the operator is turned
			// away at this first request, and says so in its log.
			mustStatus(t, r, 406)
			t.Skipf("metal3's baremetal-operator requires API %s; Anvil's VerMax is %s", metal3Baseline, api.VerMax)
		}
		mustStatus(t, r, 200)
		v, _ := r.JSON(t)["version"].(map[string]any)
		maxMinor, okMax := minor(v["version"])
		_, okMin := minor(v["min_version"])
		if !okMax || !okMin || maxMinor < int(metal3Baseline) {
			t.Fatalf("version document %v: want min_version and version 1.N with N >= %d", v, metal3Baseline)
		}
		r = c.Do(t, "GET", "/v1/drivers", nil)
		mustStatus(t, r, 200)
		if ds, _ := r.JSON(t)["drivers"].([]any); len(ds) == 0 {
			t.Fatalf("no drivers listed, so the operator waits for a conductor: %s", r.Body)
		}
	})
}

func minor(v any) (int, bool) {
	s, _ := v.(string)
	m, ok := strings.CutPrefix(s, "1.")
	n, err := strconv.Atoi(m)
	return n, ok && err == nil
}

// The baremetal-operator (BMO) replayed: the requests its Ironic
// provisioner (pkg/provisioner/ironic, metal3-io/baremetal-operator at
// 02aa5059e348) sends through gophercloud v2.13.0, in its order, with
// its microversion header and its body shapes, against Anvil and the real
// agent. The types below are the shapes gophercloud decodes Anvil's
// answers into: a field of the wrong JSON type fails BMO's request, so
// every answer BMO reads is decoded into them.

// bmoNode holds the node fields gophercloud's nodes.Node decodes, with
// its Go types.
type bmoNode struct {
	UUID                                         string         `json:"uuid"`
	Name                                         string         `json:"name"`
	PowerState                                   string         `json:"power_state"`
	TargetPowerState                             string         `json:"target_power_state"`
	ProvisionState                               string         `json:"provision_state"`
	TargetProvisionState                         string         `json:"target_provision_state"`
	Maintenance                                  bool           `json:"maintenance"`
	MaintenanceReason                            string         `json:"maintenance_reason"`
	Fault                                        string         `json:"fault"`
	Health                                       string         `json:"health"`
	LastError                                    string         `json:"last_error"`
	Reservation                                  string         `json:"reservation"`
	Driver                                       string         `json:"driver"`
	DriverInfo                                   map[string]any `json:"driver_info"`
	DriverInternalInfo                           map[string]any `json:"driver_internal_info"`
	Properties                                   map[string]any `json:"properties"`
	InstanceInfo                                 map[string]any `json:"instance_info"`
	InstanceUUID                                 string         `json:"instance_uuid"`
	ChassisUUID                                  string         `json:"chassis_uuid"`
	Extra                                        map[string]any `json:"extra"`
	ConsoleEnabled                               bool           `json:"console_enabled"`
	RAIDConfig                                   map[string]any `json:"raid_config"`
	TargetRAIDConfig                             map[string]any `json:"target_raid_config"`
	CleanStep                                    map[string]any `json:"clean_step"`
	DeployStep                                   map[string]any `json:"deploy_step"`
	ServiceStep                                  map[string]any `json:"service_step"`
	Links, Ports, PortGroups, States, Volume     []struct{ Href, Rel string }
	ResourceClass                                string `json:"resource_class"`
	BIOSInterface                                string `json:"bios_interface"`
	BootInterface                                string `json:"boot_interface"`
	ConsoleInterface                             string `json:"console_interface"`
	DeployInterface                              string `json:"deploy_interface"`
	InspectInterface                             string `json:"inspect_interface"`
	ManagementInterface                          string `json:"management_interface"`
	NetworkInterface                             string `json:"network_interface"`
	PowerInterface                               string `json:"power_interface"`
	RAIDInterface                                string `json:"raid_interface"`
	RescueInterface                              string `json:"rescue_interface"`
	StorageInterface                             string `json:"storage_interface"`
	VendorInterface                              string `json:"vendor_interface"`
	FirmwareInterface                            string `json:"firmware_interface"`
	Traits                                       []string
	ConductorGroup                               string `json:"conductor_group"`
	ParentNode                                   string `json:"parent_node"`
	Protected                                    bool
	ProtectedReason                              string `json:"protected_reason"`
	Owner, Lessee, Shard, Description, Conductor string
	AllocationUUID                               string `json:"allocation_uuid"`
	Retired                                      bool
	RetiredReason                                string         `json:"retired_reason"`
	NetworkData                                  map[string]any `json:"network_data"`
	AutomatedClean                               *bool          `json:"automated_clean"`
	ProvisionUpdatedAt                           time.Time      `json:"provision_updated_at"`
	InspectionStartedAt                          *time.Time     `json:"inspection_started_at"`
	InspectionFinishedAt                         *time.Time     `json:"inspection_finished_at"`
	CreatedAt                                    time.Time      `json:"created_at"`
	UpdatedAt                                    time.Time      `json:"updated_at"`
	DisablePowerOff                              bool           `json:"disable_power_off"`
}

// bmoPort is gophercloud's ports.Port as BMO lists it (fields
// node_uuid,uuid,address).
type bmoPort struct {
	UUID     string `json:"uuid"`
	Address  string `json:"address"`
	NodeUUID string `json:"node_uuid"`
}

// bmoInventory is gophercloud's nodes.InventoryData, the parts BMO's
// hardwaredetails reads, with gophercloud's types.
type bmoInventory struct {
	Inventory struct {
		BmcAddress string `json:"bmc_address"`
		Boot       struct {
			CurrentBootMode string `json:"current_boot_mode"`
			PXEInterface    string `json:"pxe_interface"`
		}
		CPU struct {
			Architecture string   `json:"architecture"`
			Count        int      `json:"count"`
			Flags        []string `json:"flags"`
			Frequency    string   `json:"frequency"`
			ModelName    string   `json:"model_name"`
		} `json:"cpu"`
		Disks []struct {
			Name       string `json:"name"`
			Model      string `json:"model"`
			Size       int64  `json:"size"`
			Rotational bool   `json:"rotational"`
			Serial     string `json:"serial"`
			Vendor     string `json:"vendor"`
			Hctl       string `json:"hctl"`
			ByPath     string `json:"by_path"`
			Wwn        string `json:"wwn"`
		} `json:"disks"`
		Interfaces []struct {
			Name        string `json:"name"`
			MACAddress  string `json:"mac_address"`
			IPV4Address string `json:"ipv4_address"`
			IPV6Address string `json:"ipv6_address"`
			HasCarrier  bool   `json:"has_carrier"`
			SpeedMbps   int    `json:"speed_mbps"`
			Vendor      string `json:"vendor"`
			Product     string `json:"product"`
			PCIAddress  string `json:"pci_address"`
			BIOSDevName string `json:"biosdevname"`
			ClientID    string `json:"client_id"`
		} `json:"interfaces"`
		Memory struct {
			PhysicalMb int `json:"physical_mb"`
			Total      int `json:"total"`
		} `json:"memory"`
		SystemVendor struct {
			Manufacturer string `json:"manufacturer"`
			ProductName  string `json:"product_name"`
			SerialNumber string `json:"serial_number"`
			Firmware     struct {
				Version   string `json:"version"`
				BuildDate string `json:"build_date"`
				Vendor    string `json:"vendor"`
			} `json:"firmware"`
		} `json:"system_vendor"`
		Hostname string `json:"hostname"`
	} `json:"inventory"`
	PluginData json.RawMessage `json:"plugin_data"`
}

// bmoValidation is gophercloud's nodes.NodeValidation.
type bmoValidation map[string]struct {
	Result bool   `json:"result"`
	Reason string `json:"reason"`
}

// bmoMicroversion is the version BMO sends once it has read Anvil's
// maximum (clients.AvailableFeatures.ChooseMicroversion): the newest of
// the versions whose features it uses that the server has.
func bmoMicroversion(maxMinor int) string {
	for _, v := range []int{110, 109, 95, 93} {
		if maxMinor >= v {
			return "1." + strconv.Itoa(v)
		}
	}
	return metal3Baseline.String()
}

// bmo is BMO's Ironic client: an admin (BMO authenticates with noauth
// or HTTP basic and is all-powerful) with BMO's microversion.
type bmo struct {
	c  *servertest.Client
	id string
	// kernel is where BMO's default preprovisioning image is (its
	// DEPLOY_KERNEL_URL and DEPLOY_RAMDISK_URL: vmlinuz and initrd
	// there); "" registers an ISO instead.
	kernel string
}

func newBMO(t *testing.T, admin *servertest.Client) *bmo {
	t.Helper()
	c := *admin
	c.Version = metal3Baseline.String()
	r := c.Do(t, "GET", "/v1/", nil)
	mustStatus(t, r, 200)
	v, _ := r.JSON(t)["version"].(map[string]any)
	maxMinor, _ := minor(v["version"])
	c.Version = bmoMicroversion(maxMinor)
	t.Logf("BMO's microversion against Anvil: %s (Anvil's maximum 1.%d)", c.Version, maxMinor)
	return &bmo{c: &c}
}

func decode[T any](t *testing.T, r *servertest.Response, want int) T {
	t.Helper()
	mustStatus(t, r, want)
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("gophercloud could not decode %T: %v\n%s", v, err, r.Body)
	}
	return v
}

func (b *bmo) node(t *testing.T) bmoNode {
	t.Helper()
	return decode[bmoNode](t, b.c.Do(t, "GET", "/v1/nodes/"+b.id, nil), 200)
}

// ports is BMO's getPorts: a port list with its fields, by node or MAC.
func (b *bmo) ports(t *testing.T, by, value string) []bmoPort {
	t.Helper()
	r := b.c.Do(t, "GET", "/v1/ports?"+by+"="+value+"&fields=node_uuid,uuid,address", nil)
	return decode[struct{ Ports []bmoPort }](t, r, 200).Ports
}

func (b *bmo) patch(t *testing.T, ops ...map[string]any) bmoNode {
	t.Helper()
	return decode[bmoNode](t, b.c.Do(t, "PATCH", "/v1/nodes/"+b.id, ops), 200)
}

func add(path string, value any) map[string]any {
	return map[string]any{"op": "add", "path": path, "value": value}
}

// provision is tryChangeNodeProvisionState: gophercloud wants 202.
func (b *bmo) provision(t *testing.T, body map[string]any) {
	t.Helper()
	provision(t, b.c, b.id, body, 202)
}

// wait polls as BMO's reconciler does until the node rests in state,
// failing on a failed state other than the one awaited.
func (b *bmo) wait(t *testing.T, state string, rack *agenttest.Rack) bmoNode {
	t.Helper()
	var n bmoNode
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n = b.node(t)
		if n.ProvisionState == state && n.TargetProvisionState == "" && n.Reservation == "" {
			return n
		}
		if strings.HasSuffix(n.ProvisionState, "failed") && n.ProvisionState != state {
			t.Fatalf("node went to %s: %s\n%s", n.ProvisionState, n.LastError, rack.Log("1", 5000))
		}
	}
	t.Fatalf("node did not reach %s: %s %s\n%s", state, n.ProvisionState, n.LastError, rack.Log("1", 5000))
	return n
}

// validate is BMO's validateNode: boot and deploy must pass; power and
// management are what the brief's flows need of a redfish node.
func (b *bmo) validate(t *testing.T) {
	t.Helper()
	v := decode[bmoValidation](t, b.c.Do(t, "GET", "/v1/nodes/"+b.id+"/validate", nil), 200)
	for _, iface := range []string{"boot", "deploy", "power", "management"} {
		if !v[iface].Result {
			t.Errorf("validate %s: %v (BMO: host validation error)", iface, v[iface])
		}
	}
}

// register is BMO's Register for a new BareMetalHost metal3/<name> with
// bmc.address redfish-virtualmedia+https://<sim>/redfish/v1/Systems/<id>,
// disableCertificateVerification, bootMACAddress its first NIC and boot
// mode UEFI: look-ups by name and MAC, node create, port create, manage,
// then configureNode's PATCH (deploy_iso, or deploy_kernel and
// deploy_ramdisk without a bootloader; and automated_clean).
func (b *bmo) register(t *testing.T, rg *rig, sys int, name, deployIface string, automatedClean bool) {
	t.Helper()
	s := rg.sim.Systems[sys]
	mac := strings.ToLower(s.MACs[0])
	mustStatus(t, b.c.Do(t, "GET", "/v1/nodes/metal3~"+name, nil), 404)
	mustStatus(t, b.c.Do(t, "GET", "/v1/nodes/"+name, nil), 404)
	if p := b.ports(t, "address", mac); len(p) != 0 {
		t.Fatalf("ports for %s before registration: %v", mac, p)
	}
	create := map[string]any{"driver": "redfish", "boot_interface": "redfish-virtual-media", "name": "metal3~" + name,
		"driver_info": map[string]any{"redfish_username": "admin", "redfish_password": "password",
			"redfish_address": rg.sim.URL, "redfish_system_id": rg.sim.SystemPath(s.ID), "redfish_verify_ca": false},
		"firmware_interface": "redfish", "inspect_interface": "agent", "raid_interface": "redfish",
		"disable_power_off": false, "properties": map[string]any{"capabilities": "boot_mode:uefi", "cpu_arch": "x86_64"}}
	if deployIface != "" {
		create["deploy_interface"] = deployIface
	}
	n := decode[bmoNode](t, b.c.Do(t, "POST", "/v1/nodes", create), 201)
	b.id = n.UUID
	if n.ProvisionState != "enroll" || n.InspectInterface != "agent" || n.BootInterface != "redfish-virtual-media" {
		t.Fatalf("created node: state %s inspect %s boot %s", n.ProvisionState, n.InspectInterface, n.BootInterface)
	}
	// createPortsForNode: the node's ports, the MAC's, then the port.
	if p := b.ports(t, "node_uuid", b.id); len(p) != 0 {
		t.Fatalf("new node has ports %v", p)
	}
	_ = b.ports(t, "address", mac)
	mustStatus(t, b.c.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": b.id, "address": mac, "pxe_enabled": true}), 201)
	b.provision(t, map[string]any{"target": "manage"})
	n = b.wait(t, "manageable", rg.rack)
	if n.LastError != "" {
		t.Fatalf("manage: last_error %q", n.LastError)
	}
	// configureNode: BMO's preprovisioning image (its deploy ISO, as
	// the host supports ISO images, or its default kernel and ramdisk)
	// and automated cleaning by its mode.
	image := []map[string]any{add("/driver_info/deploy_iso", servertest.ServeISO(t))}
	if b.kernel != "" {
		image = []map[string]any{add("/driver_info/deploy_kernel", b.kernel+"vmlinuz"), add("/driver_info/deploy_ramdisk", b.kernel+"initrd")}
	}
	n = b.patch(t, append(image, add("/automated_clean", automatedClean))...)
	if n.AutomatedClean == nil || *n.AutomatedClean != automatedClean || n.DriverInfo["deploy_iso"] == nil && n.DriverInfo["deploy_kernel"] == nil {
		t.Fatalf("configureNode: automated_clean %v driver_info %v", n.AutomatedClean, n.DriverInfo)
	}
	if _, ok := n.DriverInfo["bootloader"]; ok {
		t.Fatalf("driver_info %v has a bootloader, which BMO never sends", n.DriverInfo)
	}
	if n.Properties["capabilities"] != "boot_mode:uefi" || n.Properties["cpu_arch"] != "x86_64" {
		t.Errorf("properties %v: BMO would rewrite them on every reconcile", n.Properties)
	}
}

// bmoConfigDrive is the config drive BMO builds (getConfigDrive): the
// user data, network_data as an object, and its meta_data defaults.
func bmoConfigDrive(name, uid string) map[string]any {
	return map[string]any{
		"user_data": "#cloud-config\nhostname: " + name + "\n",
		"network_data": map[string]any{
			"links":    []any{map[string]any{"id": "enp1s0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}},
			"networks": []any{map[string]any{"id": "net0", "link": "enp1s0", "type": "ipv4_dhcp"}},
			"services": []any{},
		},
		"meta_data": map[string]any{"uuid": uid, "metal3-namespace": "metal3", "metal3-name": name,
			"local-hostname": name, "local_hostname": name, "name": name},
	}
}

// configDriveHolds tells whether the config-2 partition's first MiB
// (a small ISO stores its files uncompressed) contains want.
func configDriveHolds(t *testing.T, disk, want string) bool {
	t.Helper()
	for _, start := range partitions(t, disk) {
		pvd := readAt(t, disk, start*512+16*2048, 48)
		if string(pvd[1:6]) == "CD001" && strings.TrimSpace(string(pvd[40:48])) == "config-2" {
			return strings.Contains(string(readAt(t, disk, start*512, 1<<20)), want)
		}
	}
	return false
}

// TestMetal3Provisioning is a BareMetalHost's life as BMO drives it:
// register, inspect with the agent, provide (automated cleaning), deploy
// a whole-disk image with a config drive, deprovision (cleaning again),
// and delete; with a preprovisioning ISO.
func TestMetal3Provisioning(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg, b := metal3Rig(t, setting, false)
		// A stand-in ISO: metal3's ramdisk always carries the inspection
		// call-back URL, without a token (metal3Rig turns discovery on).
		rg.rack.InspectionURL(t, rg.srv.URL+"/v1/continue_inspection")
		metal3Provisioning(t, rg, b)
	})
}

// TestMetal3ProvisioningKernelRamdisk is TestMetal3Provisioning with
// BMO's default registration: deploy_kernel and deploy_ramdisk, no
// bootloader (the server's default gives it), so Anvil builds the
// agent's ISO for each boot; its grub.cfg carries the inspection
// call-back only while inspecting.
func TestMetal3ProvisioningKernelRamdisk(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg, b := metal3Rig(t, setting, true)
		metal3Provisioning(t, rg, b)
	})
}

// metal3Rig is a rig of one system, and BMO; with kernel, BMO registers
// its default kernel and ramdisk, and the server has a default
// bootloader and builds ISOs.
func metal3Rig(t *testing.T, setting string, kernel bool) (*rig, *bmo) {
	t.Helper()
	// An operator's ISO (the stand-in) carries no token for the
	// inventory's post, so only discovery finds its node; the ISO Anvil
	// builds of BMO's kernel and ramdisk carries one.
	ac := conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, Discovery: !kernel}
	if !kernel {
		rg := newRig(t, setting, ac, 1)
		return rg, newBMO(t, rg.cs["system-admin"])
	}
	base, _, _, _ := bootFiles(t)
	ac.Media.Bootloader = base + "esp.img"
	rg := newRigWith(t, setting, server.Options{BootISODir: t.TempDir(), Conductor: conductor.Config{Agent: ac}}, 1)
	b := newBMO(t, rg.cs["system-admin"])
	b.kernel = base
	return rg, b
}

func metal3Provisioning(t *testing.T, rg *rig, b *bmo) {
	sys := rg.sim.Systems[0]
	disk := rg.rack.Machine(t, sys.ID)
	if minor, err := strconv.Atoi(strings.TrimPrefix(b.c.Version, "1.")); err != nil || api.Version(minor) < metal3Baseline {
		t.Fatalf("BMO's version %s", b.c.Version)
	}
	b.register(t, rg, 0, "worker-0", "", true)

	// Inspection: no inventory yet (BMO then starts inspection on
	// the 404), inspect, and the inventory as gophercloud reads it.
	mustStatus(t, b.c.Do(t, "GET", "/v1/nodes/"+b.id+"/inventory", nil), 404)
	b.provision(t, map[string]any{"target": "inspect"})
	n := b.wait(t, "manageable", rg.rack)
	if n.LastError != "" || n.InspectionFinishedAt == nil {
		t.Errorf("after inspection: last_error %q finished %v", n.LastError, n.InspectionFinishedAt)
	}
	if b.kernel != "" {
		// The agent booted an ISO Anvil built of BMO's kernel and
		// ramdisk and the server's bootloader.
		want := "Built the ramdisk agent's ISO from driver_info.deploy_kernel, driver_info.deploy_ramdisk and the server's --bootloader"
		if h := string(b.c.Do(t, "GET", "/v1/nodes/"+b.id+"/history", nil).Body); !strings.Contains(h, want) {
			t.Errorf("the node's history does not say %q:\n%s", want, h)
		}
	}
	inv := decode[bmoInventory](t, b.c.Do(t, "GET", "/v1/nodes/"+b.id+"/inventory", nil), 200)
	if inv.Inventory.CPU.Count == 0 || inv.Inventory.Memory.PhysicalMb == 0 || len(inv.Inventory.Interfaces) == 0 {
		t.Errorf("inventory lacks what BMO's HardwareDetails shows: cpu %+v memory %+v", inv.Inventory.CPU, inv.Inventory.Memory)
	}
	found := false
	for _, d := range inv.Inventory.Disks {
		found = found || d.Name == disk
	}
	if !found {
		t.Errorf("inventory disks %+v lack %s", inv.Inventory.Disks, disk)
	}
	var pd struct {
		AllInterfaces map[string]struct {
			PXEEnabled bool `json:"pxe_enabled"`
		} `json:"all_interfaces"`
	}
	if len(inv.PluginData) > 0 && string(inv.PluginData) != "null" {
		if err := json.Unmarshal(inv.PluginData, &pd); err != nil {
			t.Errorf("plugin_data is not gophercloud's StandardPluginData: %v", err)
		}
	}
	// The next Register creates ports for the NICs inspection found,
	// unless a port has the MAC; one on another node is an error.
	for _, nic := range inv.Inventory.Interfaces {
		for _, p := range b.ports(t, "address", nic.MACAddress) {
			if p.NodeUUID != b.id {
				t.Errorf("port %s of NIC %s belongs to node %s", p.UUID, nic.MACAddress, p.NodeUUID)
			}
		}
	}

	// Provide: automated cleaning in the agent.
	b.provision(t, map[string]any{"target": "provide"})
	n = b.wait(t, "available", rg.rack)
	if n.LastError != "" {
		t.Errorf("after cleaning: last_error %q", n.LastError)
	}

	// Provision: instance_uuid, instance_info, then validate, then
	// active with the config drive.
	const uid = "6b1c4f6e-3c5c-4a55-9f36-6c1b3d0b7a11"
	n = b.patch(t, add("/instance_uuid", uid), add("/instance_info/capabilities", map[string]any{}),
		add("/instance_info/root_device", map[string]any{}), add("/instance_info/image_source", rg.im.URL+rg.im.Raw),
		add("/instance_info/image_disk_format", "raw"), add("/instance_info/image_os_hash_algo", "sha256"),
		add("/instance_info/image_os_hash_value", rg.im.RawSum), add("/driver_info/force_persistent_boot_device", "Default"))
	// ironicHasSameImage compares what Anvil gives back.
	if n.InstanceInfo["image_source"] != rg.im.URL+rg.im.Raw || n.InstanceInfo["image_os_hash_value"] != rg.im.RawSum ||
		n.InstanceInfo["image_os_hash_algo"] != "sha256" || n.InstanceInfo["image_checksum"] != nil || n.InstanceUUID != uid {
		t.Errorf("instance_info as BMO reads it back: %v (instance_uuid %q)", n.InstanceInfo, n.InstanceUUID)
	}
	b.validate(t)
	b.provision(t, map[string]any{"target": "active", "configdrive": bmoConfigDrive("worker-0", uid)})
	n = b.wait(t, "active", rg.rack)
	if n.LastError != "" || n.PowerState != "power on" {
		t.Errorf("active: last_error %q power %s", n.LastError, n.PowerState)
	}
	if !hasConfigDrive(t, disk) {
		t.Errorf("no config-2 partition on the disk: %v", partitions(t, disk))
	}
	// The config drive's files hold BMO's network_data and meta_data.
	for _, want := range []string{`"ipv4_dhcp"`, `"metal3-namespace"`, "hostname: worker-0"} {
		if !configDriveHolds(t, disk, want) {
			t.Errorf("the config drive does not hold %s", want)
		}
	}

	// Deprovision: automated_clean already matches, so deleted at
	// once; the tear down forgets the instance.
	b.provision(t, map[string]any{"target": "deleted"})
	n = b.wait(t, "available", rg.rack)
	if n.LastError != "" || n.InstanceUUID != "" || len(n.InstanceInfo) != 0 {
		t.Errorf("after deprovisioning: last_error %q instance_uuid %q instance_info %v", n.LastError, n.InstanceUUID, n.InstanceInfo)
	}
	if p := partitions(t, disk); len(p) != 0 {
		t.Errorf("cleaning left partitions %v", p)
	}

	// Delete: an available node without instance_uuid goes at once.
	mustStatus(t, b.c.Do(t, "DELETE", "/v1/nodes/"+b.id, nil), 204)
	mustStatus(t, b.c.Do(t, "GET", "/v1/nodes/"+b.id, nil), 404)
}

// TestMetal3CustomDeploy is a BareMetalHost with spec.customDeploy
// (method install_coreos, no image, automated cleaning disabled, no
// inspection): registered with the custom-agent deploy interface,
// provisioned with BMO's one deploy step. The reference agent has no
// hardware manager offering install_coreos, so the deploy fails naming
// the step; BMO reports that last_error.
func TestMetal3CustomDeploy(t *testing.T) {
	agenttest.Need(t)
	for _, kernel := range []bool{false, true} {
		t.Run(map[bool]string{false: "iso", true: "kernel-ramdisk"}[kernel], func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				metal3CustomDeploy(t, setting, kernel)
			})
		})
	}
}

func metal3CustomDeploy(t *testing.T, setting string, kernel bool) {
	rg, b := metal3Rig(t, setting, kernel)
	rg.rack.Machine(t, rg.sim.Systems[0].ID)
	b.register(t, rg, 0, "worker-1", "custom-agent", false)
	b.provision(t, map[string]any{"target": "provide"})
	b.wait(t, "available", rg.rack)

	const uid = "0d3f5a5e-8a8e-4f0e-9d35-4b7f8f6d2c22"
	n := b.patch(t, add("/instance_uuid", uid), add("/instance_info/capabilities", map[string]any{}),
		add("/instance_info/root_device", map[string]any{}))
	if n.DeployInterface != "custom-agent" {
		t.Fatalf("deploy_interface %q", n.DeployInterface)
	}
	b.validate(t)
	b.provision(t, map[string]any{"target": "active", "configdrive": bmoConfigDrive("worker-1", uid),
		"deploy_steps": []any{map[string]any{"interface": "deploy", "step": "install_coreos", "args": map[string]any{}, "priority": 80}}})
	n = b.wait(t, "deploy failed", rg.rack)
	if !strings.Contains(n.LastError, "deploy.install_coreos") || !strings.Contains(n.LastError, "offers no deploy step") {
		t.Errorf("last_error %q does not name the step the agent lacks", n.LastError)
	}
	t.Logf("custom deploy's last_error: %s", n.LastError)

	// Deprovision from deploy failed, without cleaning.
	b.provision(t, map[string]any{"target": "deleted"})
	n = b.wait(t, "available", rg.rack)
	if n.InstanceUUID != "" {
		t.Errorf("instance_uuid %q after deprovisioning", n.InstanceUUID)
	}
}
