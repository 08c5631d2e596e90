package conductor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// RuleValidate guards GET /v1/nodes/{node}/validate.
const RuleValidate = "baremetal:node:validate"

// Interfaces are Ironic's driver interfaces, in the order its validate
// response lists them.
var Interfaces = []string{"bios", "boot", "console", "deploy", "inspect", "management", "network", "power", "raid", "rescue", "storage"}

// Validation is one interface's verdict: Result is nil when the driver
// does not have the interface, as Ironic reports it.
type Validation struct {
	Result *bool   `json:"result"`
	Reason *string `json:"reason,omitempty"`
}

// Validate checks a node's driver settings per interface, as Ironic's
// validate does: from what is stored, without contacting the BMC.
func (o *Ops) Validate(ctx context.Context, ident string) (map[string]Validation, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleValidate)
	if err != nil {
		return nil, err
	}
	return validateNode(n, o.C.cfg.Agent.Media), nil
}

// validateNode is Validate's answer for n, the server's default boot
// media m standing in for what its driver_info lacks.
func validateNode(n *ent.Node, m ramdisk.Media) map[string]Validation {
	yes, no := true, false
	unsupported := "not supported"
	bmcCheck := Validation{Result: &yes}
	if cl, err := bmc.Open(n.Driver, n.UUID, n.DriverInfo, bmc.Options{}); err != nil {
		reason := err.Error()
		bmcCheck = Validation{Result: &no, Reason: &reason}
	} else {
		cl.Close()
	}
	view := &nodes.View{Node: n}
	out := make(map[string]Validation, len(Interfaces))
	for _, iface := range Interfaces {
		impl := view.Interface(iface)
		switch {
		case iface == "management" && *bmcCheck.Result && bmc.Canonical(n.Driver) == "bmclib":
			// Which steps the provider offers; the others are refused
			// before a run starts.
			p, _ := n.DriverInfo["bmclib_provider"].(string)
			steps := bmc.BmclibSteps(p)
			if len(steps) == 0 {
				steps = []string{"none"}
			}
			reason := fmt.Sprintf("bmclib provider %s; steps beyond power: %s", p, strings.Join(steps, ", "))
			out[iface] = Validation{Result: &yes, Reason: &reason}
		case iface == "power" || iface == "management":
			out[iface] = bmcCheck
		case iface == "deploy":
			// What a deploy request would be refused for (deploy.go).
			if err := deployFits(n, m); err != nil {
				reason := err.Error()
				out[iface] = Validation{Result: &no, Reason: &reason}
			} else {
				out[iface] = Validation{Result: &yes}
			}
		case impl == "fake" || impl == "noop":
			// Ironic's fake and no-op implementations need nothing
			// configured: always valid.
			out[iface] = Validation{Result: &yes}
		case strings.HasPrefix(impl, "no-"):
			// Ironic's no-* implementations fail validation, saying so.
			reason := fmt.Sprintf("Driver %s does not support %s (disabled or not implemented).", n.Driver, iface)
			out[iface] = Validation{Result: &no, Reason: &reason}
		case iface == "boot" && slices.Contains([]string{"redfish-virtual-media", "pxe", "ipxe"}, impl):
			out[iface] = validateBoot(n, m, impl)
		case impl == "agent" && (iface == "inspect" || iface == "raid" || iface == "rescue"):
			// In-band inspection, software RAID and rescue boot the agent.
			out[iface] = agentVerdict(n, m)
		case iface == "console" && impl == ConsoleSocat:
			// The console logs in to the BMC as power does; its port is
			// checked when it is enabled (console.go).
			out[iface] = bmcCheck
		case iface == "bios" || iface == "inspect" || iface == "raid" && impl == "redfish":
			// Redfish BIOS settings, inspection and RAID, through the BMC.
			out[iface] = bmcCheck
		default:
			// An implementation Anvil records but does not drive (see
			// README, Drivers).
			out[iface] = Validation{Reason: &unsupported}
		}
	}
	return out
}

// validateBoot says whether the boot interface can boot what the node
// needs: the ramdisk agent (cleaning, direct deploys, inspection), or,
// for a node that deploys by booting instance_info.boot_iso, that ISO
// from virtual media. metal3 refuses a node whose boot verdict is
// missing, so every boot implementation Anvil drives has one.
func validateBoot(n *ent.Node, m ramdisk.Media, impl string) Validation {
	if iso, _ := n.InstanceInfo["boot_iso"].(string); iso != "" && impl == "redfish-virtual-media" && deployMode(n) == modeISO {
		yes := true
		return Validation{Result: &yes}
	}
	return agentVerdict(n, m)
}

// agentVerdict is agentBoot's: true, or false with its reason.
func agentVerdict(n *ent.Node, m ramdisk.Media) Validation {
	yes, no := true, false
	if _, err := agentBoot(n, m); err != nil {
		reason := err.Error()
		return Validation{Result: &no, Reason: &reason}
	}
	return Validation{Result: &yes}
}
