package ramdisk

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
)

// RuleIPXE names the per-MAC iPXE script in the aggregated audit of
// refused agent calls; no policy rule governs it (iPXE has no
// credentials, as from Ironic's HTTP server).
const RuleIPXE = "anvil:ipxe_script"

// IPXEBoot is the script an operator's DHCP server hands iPXE (its
// filename option, e.g. http://anvil:6385/ipxe/boot.ipxe): it chains to
// the script of the machine's own MAC, as Ironic's boot.ipxe chains to
// its per-MAC configuration (a relative URL: /ipxe/<mac>), and boots the
// local disk when Anvil has none.
const IPXEBoot = "#!ipxe\n\nchain --autofree ${mac:hexhyp} || exit\n"

// ipxeLocal lets the firmware go on to the next boot device (the disk):
// a machine Anvil is not booting into the agent boots what it has.
const ipxeLocal = "#!ipxe\n\nexit\n"

// bootStates are where a node's machine boots the ramdisk from the
// network: the states that expect an agent, and inspection's wait.
var bootStates = append(slices.Clone(LookupStates), "inspect wait")

// IPXEScript is the script for the machine with NIC mac (Ironic's
// per-MAC iPXE configuration): for a node of a pxe or ipxe boot interface
// in a state that boots the agent, its deploy (or, rescuing, rescue)
// kernel and ramdisk (the node's, else the server's defaults) with the
// agent's parameters; for anything else, boot the local disk. The answer
// never says whether mac is known. A boot whose token was pregenerated
// puts it on the kernel line (ipa-agent-token) for the first address to
// fetch the script and, for its retries, that address only (bindIPXE).
func (s *Service) IPXEScript(ctx context.Context, mac, source string) (string, error) {
	mac, err := ports.NormalizeMAC("mac", strings.ReplaceAll(mac, "-", ":"))
	if err != nil {
		return "", err
	}
	p, err := s.db.Port.Query().Where(port.Address(mac)).Only(ctx)
	if err != nil {
		return ipxeLocal, nil
	}
	n, err := s.db.Node.Query().Where(node.ID(p.NodeID)).Only(ctx)
	if err != nil || !slices.Contains(bootStates, n.ProvisionState) {
		return ipxeLocal, nil
	}
	if b := (&nodes.View{Node: n}).Interface("boot"); b != "pxe" && b != "ipxe" {
		return ipxeLocal, nil
	}
	prefix := "deploy"
	if strings.HasPrefix(n.ProvisionState, "rescu") {
		if k, _ := s.Media.Get(n, "rescue_kernel"); k != "" {
			prefix = "rescue"
		}
	}
	kernel, _ := s.Media.Get(n, prefix+"_kernel")
	ramdisk, _ := s.Media.Get(n, prefix+"_ramdisk")
	if !httpURL(kernel) || !httpURL(ramdisk) {
		return ipxeLocal, nil
	}
	params := []string{"ipa-api-url=" + s.APIURL(), "ipa-global-request-id=req-" + uuid.NewString(),
		"BOOTIF=01-" + strings.ReplaceAll(mac, ":", "-")}
	if n.ProvisionState == StateInspectWait {
		params = append(params, "ipa-inspection-callback-url="+InspectionCallbackFor(s.APIURL(), n))
	}
	if tok := MediumToken(n); tok != "" {
		ok, err := s.bindIPXE(ctx, n, source)
		if err != nil {
			return "", err
		}
		if !ok {
			return ipxeLocal, nil
		}
		params = append(params, "ipa-agent-token="+tok)
	}
	if extra, _ := n.DriverInfo["kernel_append_params"].(string); extra != "" {
		params = append(params, strings.Fields(extra)...)
	}
	return fmt.Sprintf("#!ipxe\n\nkernel --name kernel %s initrd=ramdisk %s\ninitrd --name ramdisk %s\nboot\n",
		kernel, ipxeText(strings.Join(params, " ")), ramdisk), nil
}

// httpURL accepts the http(s) URLs iPXE fetches, without characters that
// would end the script's line.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && !strings.ContainsAny(s, " \r\n\t") && !strings.Contains(s, "${")
}

// ipxeText keeps operator text on its one script line.
func ipxeText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
