package ramdisk

import (
	"strings"

	"github.com/anvilproject/anvil/ent"
)

// Media are the server-wide agent boot media, Ironic's [conductor]
// bootloader, deploy_kernel, deploy_ramdisk, rescue_kernel and
// rescue_ramdisk: what a node boots when its driver_info names none
// (metal3's baremetal-operator registers nodes with deploy_kernel and
// deploy_ramdisk only, leaving bootloader to the server). Each is an
// http(s) URL, as driver_info's are.
type Media struct {
	Bootloader, DeployKernel, DeployRamdisk, RescueKernel, RescueRamdisk string
}

func (m Media) fallback(field string) string {
	switch field {
	case "bootloader":
		return m.Bootloader
	case "deploy_kernel":
		return m.DeployKernel
	case "deploy_ramdisk":
		return m.DeployRamdisk
	case "rescue_kernel":
		return m.RescueKernel
	case "rescue_ramdisk":
		return m.RescueRamdisk
	}
	return ""
}

// pair is the other half of a kernel or ramdisk field.
func pair(field string) string {
	if k, ok := strings.CutSuffix(field, "_kernel"); ok {
		return k + "_ramdisk"
	}
	if r, ok := strings.CutSuffix(field, "_ramdisk"); ok {
		return r + "_kernel"
	}
	return ""
}

// Get is the node's value of a boot media field and where it comes from:
// driver_info's, else the server's default. A kernel and its ramdisk
// come as a pair, as Ironic takes them (get_agent_kernel_ramdisk): a node
// that names either uses its own pair, so a node giving a kernel without
// its ramdisk lacks the ramdisk rather than mixing its kernel with the
// default ramdisk.
func (m Media) Get(n *ent.Node, field string) (value, from string) {
	own, _ := n.DriverInfo[field].(string)
	if own != "" {
		return own, "driver_info." + field
	}
	if p := pair(field); p != "" {
		if v, _ := n.DriverInfo[p].(string); v != "" {
			return "", "driver_info." + field
		}
	}
	if v := m.fallback(field); v != "" {
		return v, MediaFlag(field)
	}
	return "", "driver_info." + field
}

// MediaFlag names the serve flag of a field's default, as the answers
// that say where a value came from, or what is missing, name it.
func MediaFlag(field string) string {
	return "the server's --" + strings.ReplaceAll(field, "_", "-")
}
