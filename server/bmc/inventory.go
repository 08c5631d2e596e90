package bmc

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/stmcginnis/gofish/redfish"
)

// Inventory is what out-of-band inspection learns about a machine, in the
// shape of Ironic's inventory (the one its ramdisk agent reports), so a
// client that reads GET /v1/nodes/{node}/inventory from Ironic reads
// Anvil's the same way. Fields the BMC does not report stay empty.
type Inventory struct {
	CPU          CPU          `json:"cpu"`
	Memory       Memory       `json:"memory"`
	Disks        []Disk       `json:"disks"`
	Interfaces   []NIC        `json:"interfaces"`
	SystemVendor SystemVendor `json:"system_vendor"`
	Boot         BootInfo     `json:"boot"`
}

// CPU sums the machine's processors; Count is logical processors, as
// Ironic's cpus property counts them.
type CPU struct {
	ModelName    string `json:"model_name"`
	Count        int    `json:"count"`
	Architecture string `json:"architecture"`
	Sockets      int    `json:"sockets"`
}

// Memory is the machine's RAM.
type Memory struct {
	Total      int64 `json:"total"` // bytes
	PhysicalMB int   `json:"physical_mb"`
}

// Disk is one drive.
type Disk struct {
	Name   string `json:"name"`
	Model  string `json:"model"`
	Size   int64  `json:"size"` // bytes
	Serial string `json:"serial"`
}

// NIC is one network interface; MAC addresses become ports.
type NIC struct {
	Name       string `json:"name"`
	MACAddress string `json:"mac_address"`
}

// SystemVendor names the machine.
type SystemVendor struct {
	ProductName  string `json:"product_name"`
	SerialNumber string `json:"serial_number"`
	Manufacturer string `json:"manufacturer"`
}

// BootInfo is how the machine boots: "uefi" or "bios".
type BootInfo struct {
	CurrentBootMode string `json:"current_boot_mode"`
}

// Inspector is a BMC that reports the machine's hardware.
type Inspector interface {
	Inventory(ctx context.Context) (*Inventory, error)
}

// archOf maps Redfish's instruction sets to the architectures Ironic's
// cpu_arch uses.
var archOf = map[redfish.InstructionSet]string{
	redfish.X8664InstructionSet: "x86_64", redfish.X86InstructionSet: "i686",
	redfish.ARMA64InstructionSet: "aarch64", redfish.ARMA32InstructionSet: "armhf",
	redfish.PowerISAInstructionSet: "ppc64le",
}

func (c *redfishClient) Inventory(ctx context.Context) (*Inventory, error) {
	inv := &Inventory{Disks: []Disk{}, Interfaces: []NIC{}}
	err := c.do(ctx, "reading the inventory", func() error {
		*inv = Inventory{Disks: []Disk{}, Interfaces: []NIC{}}
		sys, err := c.system()
		if err != nil {
			return err
		}
		inv.SystemVendor = SystemVendor{ProductName: sys.Model, SerialNumber: sys.SerialNumber, Manufacturer: sys.Manufacturer}
		inv.CPU.ModelName = sys.ProcessorSummary.Model
		inv.CPU.Sockets = sys.ProcessorSummary.Count
		inv.CPU.Count = sys.ProcessorSummary.LogicalProcessorCount
		procs, err := sys.Processors()
		if err != nil {
			return err
		}
		threads := 0
		for _, p := range procs {
			if p.ProcessorType != "" && p.ProcessorType != redfish.CPUProcessorType {
				continue
			}
			threads += p.TotalThreads
			if a, ok := archOf[p.InstructionSet]; ok && inv.CPU.Architecture == "" {
				inv.CPU.Architecture = a
			}
			if inv.CPU.ModelName == "" {
				inv.CPU.ModelName = p.Model
			}
		}
		if inv.CPU.Count == 0 {
			inv.CPU.Count = threads
		}
		if inv.CPU.Count == 0 {
			inv.CPU.Count = inv.CPU.Sockets
		}
		inv.Memory.PhysicalMB = int(sys.MemorySummary.TotalSystemMemoryGiB * 1024)
		inv.Memory.Total = int64(inv.Memory.PhysicalMB) << 20
		switch sys.Boot.BootSourceOverrideMode {
		case redfish.UEFIBootSourceOverrideMode:
			inv.Boot.CurrentBootMode = "uefi"
		case redfish.LegacyBootSourceOverrideMode:
			inv.Boot.CurrentBootMode = "bios"
		}
		nics, err := sys.EthernetInterfaces()
		if err != nil {
			return err
		}
		for _, n := range nics {
			mac := n.MACAddress
			if mac == "" {
				mac = n.PermanentMACAddress
			}
			if mac != "" {
				inv.Interfaces = append(inv.Interfaces, NIC{Name: n.ID, MACAddress: strings.ToLower(mac)})
			}
		}
		// A system without Storage is no error: the disks stay unknown.
		storage, err := sys.Storage()
		if err != nil {
			return nil
		}
		for _, s := range storage {
			drives, err := s.Drives()
			if err != nil {
				return err
			}
			for _, d := range drives {
				inv.Disks = append(inv.Disks, Disk{Name: d.Name, Model: d.Model, Size: d.CapacityBytes, Serial: d.SerialNumber})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inv, nil
}

// Inventory of the fake machine: fixed hardware, with MACs derived from
// the node's UUID so every fake node has its own.
func (f *fake) Inventory(context.Context) (*Inventory, error) {
	h := fnv.New32a()
	h.Write([]byte(f.uuid))
	x := h.Sum32()
	mac := func(i int) string {
		return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", byte(x>>24), byte(x>>16), byte(x>>8), i)
	}
	return &Inventory{
		CPU:    CPU{ModelName: "Fake CPU", Count: 32, Architecture: "x86_64", Sockets: 2},
		Memory: Memory{Total: 64 << 30, PhysicalMB: 64 << 10},
		Disks: []Disk{
			{Name: "Fake Disk 0", Model: "Fake SSD", Size: 480 << 30, Serial: fmt.Sprintf("FAKE%08x0", x)},
			{Name: "Fake Disk 1", Model: "Fake SSD", Size: 480 << 30, Serial: fmt.Sprintf("FAKE%08x1", x)},
		},
		Interfaces:   []NIC{{Name: "eth0", MACAddress: mac(1)}, {Name: "eth1", MACAddress: mac(2)}},
		SystemVendor: SystemVendor{ProductName: "Fake Hardware", SerialNumber: fmt.Sprintf("FAKE%08x", x), Manufacturer: "Anvil"},
		Boot:         BootInfo{CurrentBootMode: "uefi"},
	}, nil
}
