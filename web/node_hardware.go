package web

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/biossetting"
	"github.com/anvilproject/anvil/ent/firmwarecomponent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/urlsafe"
	"github.com/anvilproject/anvil/views"
)

// machine fills the Hardware section from what Anvil stored when it last
// inspected the node, ran a BIOS or firmware step, or used its virtual
// media or indicators: the page never asks the BMC. Each part obeys the
// rule the API applies to the same data, so the page shows no more than
// the viewer could read through the API.
func (p *Portal) machine(ctx context.Context, v *nodes.View) (views.Machine, error) {
	var m views.Machine
	t := nodes.Target(v.Node)
	n := v.Node
	if p.Guard.Allowed(ctx, conductor.RuleInventoryGet, t) {
		inv, err := n.QueryInventory().Only(ctx)
		switch {
		case ent.IsNotFound(err):
		case err != nil:
			return m, err
		default:
			if err := inventory(&m, inv); err != nil {
				return m, err
			}
		}
	} else {
		m.InventoryWhy = p.denied(ctx, "may not read the hardware inventory", conductor.RuleInventoryGet)
	}
	if p.Guard.Allowed(ctx, ports.RuleGet, t) {
		list, err := n.QueryPorts().Order(ent.Asc(port.FieldAddress)).All(ctx)
		if err != nil {
			return m, err
		}
		network(&m, list)
	} else {
		m.PortsWhy = p.denied(ctx, "may not read the node's ports", ports.RuleGet)
	}
	if p.Guard.Allowed(ctx, conductor.RuleBIOSGet, t) {
		bios, err := n.QueryBiosSettings().Order(ent.Asc(biossetting.FieldName)).All(ctx)
		if err != nil {
			return m, err
		}
		for _, s := range bios {
			row := views.BIOSRow{Name: s.Name, Current: s.Value}
			if s.Pending != nil {
				row.Pending = *s.Pending
				m.BIOSPending++
			}
			m.BIOS = append(m.BIOS, row)
		}
	} else {
		m.BIOSWhy = p.denied(ctx, "may not read BIOS settings", conductor.RuleBIOSGet)
	}
	if p.Guard.Allowed(ctx, conductor.RuleFirmwareGet, t) {
		fw, err := n.QueryFirmwareComponents().Order(ent.Asc(firmwarecomponent.FieldComponent)).All(ctx)
		if err != nil {
			return m, err
		}
		for _, f := range fw {
			m.Firmware = append(m.Firmware, views.FirmwareRow{Component: f.Component, Initial: f.InitialVersion,
				Current: deref(f.CurrentVersion), Last: deref(f.LastVersionFlashed)})
		}
	} else {
		m.FirmwareWhy = p.denied(ctx, "may not read firmware versions", conductor.RuleFirmwareGet)
	}
	m.BootMode = deref(v.BootMode)
	if m.BootMode == "" && m.InspectedBootMode != "" {
		m.BootMode = m.InspectedBootMode + " (as inspected)"
	}
	if v.SecureBoot != nil {
		m.SecureBoot = map[bool]string{true: "on", false: "off"}[*v.SecureBoot]
	}
	// Virtual media and indicators are what the BMC last reported or
	// accepted, as the conductor kept them in driver_internal_info; an
	// image's URL is shown without credentials, which copies kept before
	// the conductor stripped them may still hold.
	if p.Guard.Allowed(ctx, conductor.RuleVMediaGet, t) {
		if s, ok := conductor.StoredVMedia(n.DriverInternalInfo); ok {
			m.VMediaKnown, m.VMediaAt = true, s.At
			for _, d := range s.Devices {
				m.VMedia = append(m.VMedia, views.VMediaRow{Device: d.Device, Image: urlsafe.Strip(d.Image), Since: d.Since})
			}
		}
	} else {
		m.VMediaWhy = p.denied(ctx, "may not read virtual media", conductor.RuleVMediaGet)
	}
	if p.Guard.Allowed(ctx, conductor.RuleGetIndicator, t) {
		s := conductor.StoredIndicators(n.DriverInternalInfo)
		for _, name := range slices.Sorted(maps.Keys(s)) {
			m.Indicators = append(m.Indicators, views.IndicatorRow{Name: name, State: s[name].State, At: s[name].At})
		}
	} else {
		m.IndicatorsWhy = p.denied(ctx, "may not read indicator states", conductor.RuleGetIndicator)
	}
	return m, nil
}

// inventory summarises the stored inventory, which has the shape of
// bmc.Inventory (Ironic's).
func inventory(m *views.Machine, rec *ent.NodeInventory) error {
	raw, err := json.Marshal(rec.Inventory)
	if err != nil {
		return err
	}
	var inv bmc.Inventory
	if err := json.Unmarshal(raw, &inv); err != nil {
		return fmt.Errorf("node inventory: %w", err)
	}
	m.Inspected, m.InspectedAt = true, rec.CreatedAt
	var cpu []string
	if inv.CPU.Count > 0 {
		cpu = append(cpu, strconv.Itoa(inv.CPU.Count)+" logical")
	}
	if inv.CPU.Sockets > 0 {
		cpu = append(cpu, strconv.Itoa(inv.CPU.Sockets)+" sockets")
	}
	for _, s := range []string{inv.CPU.ModelName, inv.CPU.Architecture} {
		if s != "" {
			cpu = append(cpu, s)
		}
	}
	m.CPU = strings.Join(cpu, ", ")
	if inv.Memory.PhysicalMB > 0 {
		m.Memory = strconv.FormatFloat(float64(inv.Memory.PhysicalMB)/1024, 'f', -1, 64) + " GiB"
	}
	sv := inv.SystemVendor
	m.System = strings.TrimSpace(strings.Join([]string{sv.Manufacturer, sv.ProductName}, " "))
	if sv.SerialNumber != "" {
		m.System = strings.TrimSpace(m.System + " (serial " + sv.SerialNumber + ")")
	}
	for _, d := range inv.Disks {
		m.Disks = append(m.Disks, views.DiskRow{Name: d.Name, Model: d.Model, Serial: d.Serial, Size: gib(d.Size)})
	}
	for _, nic := range inv.Interfaces {
		m.NICs = append(m.NICs, views.NICRow{Name: nic.Name, MAC: strings.ToLower(nic.MACAddress)})
	}
	m.InspectedBootMode = inv.Boot.CurrentBootMode
	return nil
}

// gib words a size in bytes in GiB.
func gib(b int64) string {
	if b <= 0 {
		return ""
	}
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', -1, 64) + " GiB"
}

// network joins the inspected NICs with the node's ports by MAC: a NIC
// without a port is not enrolled, and a port inspection did not see is
// listed too.
func network(m *views.Machine, ports []*ent.Port) {
	m.PortsKnown = true
	for _, pt := range ports {
		mac := strings.ToLower(pt.Address)
		desc := "port"
		if pt.PxeEnabled {
			desc += ", PXE"
		}
		if pt.PhysicalNetwork != nil {
			desc += ", network " + *pt.PhysicalNetwork
		}
		i := slices.IndexFunc(m.NICs, func(r views.NICRow) bool { return r.MAC == mac })
		if i < 0 {
			m.NICs = append(m.NICs, views.NICRow{MAC: mac})
			i = len(m.NICs) - 1
		}
		m.NICs[i].Port = desc
	}
}
