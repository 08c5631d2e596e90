package conductor

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
)

// The boot and inspect verdicts follow what the node can boot: the
// agent from deploy_iso or deploy_kernel and deploy_ramdisk, or, on a
// node that deploys an ISO, that ISO from virtual media. A verdict is
// never missing for a boot interface Anvil drives (metal3 aborts on a
// null one).
func TestValidateBootAndInspect(t *testing.T) {
	rf := map[string]any{"redfish_address": "https://10.0.0.1"}
	with := func(m map[string]any, kv ...string) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		name          string
		n             ent.Node
		boot, inspect any // true, false, or nil
		reason        string
	}{
		{"vmedia without deploy_iso", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent", DriverInfo: rf},
			false, false, "deploy_iso"},
		{"vmedia with deploy_iso", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent", DriverInfo: with(rf, "deploy_iso", "http://x/a.iso")},
			true, true, ""},
		{"ISO deploy needs no agent", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", DeployInterface: "ramdisk", DriverInfo: rf,
			InstanceInfo: map[string]any{"boot_iso": "http://x/i.iso"}}, true, true, ""},
		{"direct deploy of an image still needs the agent", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", DriverInfo: rf,
			InstanceInfo: map[string]any{"boot_iso": "http://x/i.iso", "image_source": "http://x/i.raw"}}, false, true, "deploy_iso"},
		// Without deploy_iso, an ISO Anvil builds: UEFI only, from
		// http(s) URLs.
		{"vmedia built ISO", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "https://x/r", "bootloader", "http://x/esp.img")}, true, true, ""},
		{"vmedia built ISO without bootloader", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r")}, false, false, "driver_info.bootloader"},
		{"vmedia built ISO in bios", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r", "bootloader", "http://x/esp.img"),
			Properties: map[string]any{"capabilities": "boot_mode:bios"}}, false, false, "boot mode bios"},
		{"vmedia built ISO from a file path", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "/srv/k", "deploy_ramdisk", "http://x/r", "bootloader", "http://x/esp.img")}, false, false, "deploy_kernel"},
		{"vmedia built ISO without ramdisk", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "bootloader", "http://x/esp.img")}, false, false, "deploy_ramdisk"},
		{"pxe without kernel", ent.Node{Driver: "ipmi", BootInterface: "pxe", InspectInterface: "agent", DriverInfo: map[string]any{"ipmi_address": "10.0.0.2"}},
			false, false, "deploy_kernel"},
		{"ipxe with kernel and ramdisk", ent.Node{Driver: "ipmi", BootInterface: "ipxe", InspectInterface: "agent",
			DriverInfo: map[string]any{"ipmi_address": "10.0.0.2", "deploy_kernel": "k", "deploy_ramdisk": "r"}}, true, true, ""},
	} {
		v := validateNode(&c.n)
		for iface, want := range map[string]any{"boot": c.boot, "inspect": c.inspect} {
			got := v[iface]
			if want == nil && got.Result != nil || want != nil && (got.Result == nil || *got.Result != want.(bool)) {
				t.Errorf("%s: %s result %v, want %v", c.name, iface, deref(got.Result), want)
			}
			if want == false && (got.Reason == nil || !strings.Contains(*got.Reason, c.reason)) {
				t.Errorf("%s: %s reason %v does not name %s", c.name, iface, deref(got.Reason), c.reason)
			}
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// A request the agent cannot boot for is a 400 naming the field to set.
func TestAgentBootErrorField(t *testing.T) {
	rf := map[string]any{"redfish_address": "https://10.0.0.1"}
	for want, info := range map[string]map[string]any{
		"driver_info/deploy_iso":    {},
		"driver_info/bootloader":    {"deploy_kernel": "http://x/k", "deploy_ramdisk": "http://x/r"},
		"driver_info/deploy_kernel": {"deploy_kernel": "ftp://x/k", "deploy_ramdisk": "http://x/r", "bootloader": "http://x/e"},
	} {
		di := map[string]any{}
		for k, v := range rf {
			di[k] = v
		}
		for k, v := range info {
			di[k] = v
		}
		n := &ent.Node{UUID: "u1", Driver: "redfish", BootInterface: "redfish-virtual-media", DriverInfo: di}
		err := agentBootError(n, "be cleaned")
		if err == nil || errs.FieldOf(err) != want {
			t.Errorf("%v: error %v field %q, want %q", info, err, errs.FieldOf(err), want)
		}
	}
}
