package conductor

import (
	"errors"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// The boot and inspect verdicts follow what the node can boot: the
// agent from deploy_iso or deploy_kernel and deploy_ramdisk (its own or
// the server's defaults), or, on a node that deploys an ISO, that ISO
// from virtual media. A verdict is never missing for a boot interface
// Anvil drives (metal3 aborts on a null one).
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
		media         ramdisk.Media // the server's defaults
	}{
		{"vmedia without deploy_iso", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent", DriverInfo: rf},
			false, false, "deploy_iso", ramdisk.Media{}},
		{"vmedia with deploy_iso", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent", DriverInfo: with(rf, "deploy_iso", "http://x/a.iso")},
			true, true, "", ramdisk.Media{}},
		{"ISO deploy needs no agent", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", DeployInterface: "ramdisk", DriverInfo: rf,
			InstanceInfo: map[string]any{"boot_iso": "http://x/i.iso"}}, true, true, "", ramdisk.Media{}},
		{"direct deploy of an image still needs the agent", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", DriverInfo: rf,
			InstanceInfo: map[string]any{"boot_iso": "http://x/i.iso", "image_source": "http://x/i.raw"}}, false, true, "deploy_iso", ramdisk.Media{}},
		// Without deploy_iso, an ISO Anvil builds: UEFI only, from
		// http(s) URLs.
		{"vmedia built ISO", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "https://x/r", "bootloader", "http://x/esp.img")}, true, true, "", ramdisk.Media{}},
		{"vmedia built ISO without bootloader", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r")}, false, false, "driver_info.bootloader nor the server's --bootloader", ramdisk.Media{}},
		// metal3's default registration: BMO gives kernel and ramdisk,
		// the server the bootloader.
		{"vmedia built ISO with the server's bootloader", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r")}, true, true, "", ramdisk.Media{Bootloader: "http://x/esp.img"}},
		{"vmedia built ISO from the server's defaults", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent", DriverInfo: rf},
			true, true, "", ramdisk.Media{Bootloader: "http://x/esp.img", DeployKernel: "http://x/k", DeployRamdisk: "http://x/r"}},
		{"vmedia built ISO with a server's bootloader that is a path", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r")}, false, false, "the server's --bootloader \"/srv/esp.img\"", ramdisk.Media{Bootloader: "/srv/esp.img"}},
		// A node's kernel is never paired with the server's ramdisk.
		{"vmedia node kernel with the server's ramdisk", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k")}, false, false, "driver_info.deploy_ramdisk \"\"",
			ramdisk.Media{Bootloader: "http://x/esp.img", DeployKernel: "http://x/k2", DeployRamdisk: "http://x/r2"}},
		{"node's deploy_iso wins over the server's kernel", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_iso", "http://x/a.iso")}, true, true, "", ramdisk.Media{DeployKernel: "ftp://x/k", DeployRamdisk: "ftp://x/r"}},
		{"pxe with the server's kernel and ramdisk", ent.Node{Driver: "ipmi", BootInterface: "pxe", InspectInterface: "agent", DriverInfo: map[string]any{"ipmi_address": "10.0.0.2"}},
			true, true, "", ramdisk.Media{DeployKernel: "http://x/k", DeployRamdisk: "http://x/r"}},
		{"vmedia built ISO in bios", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "deploy_ramdisk", "http://x/r", "bootloader", "http://x/esp.img"),
			Properties: map[string]any{"capabilities": "boot_mode:bios"}}, false, false, "boot mode bios", ramdisk.Media{}},
		{"vmedia built ISO from a file path", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "/srv/k", "deploy_ramdisk", "http://x/r", "bootloader", "http://x/esp.img")}, false, false, "deploy_kernel", ramdisk.Media{}},
		{"vmedia built ISO without ramdisk", ent.Node{Driver: "redfish", BootInterface: "redfish-virtual-media", InspectInterface: "agent",
			DriverInfo: with(rf, "deploy_kernel", "http://x/k", "bootloader", "http://x/esp.img")}, false, false, "deploy_ramdisk", ramdisk.Media{}},
		{"pxe without kernel", ent.Node{Driver: "ipmi", BootInterface: "pxe", InspectInterface: "agent", DriverInfo: map[string]any{"ipmi_address": "10.0.0.2"}},
			false, false, "deploy_kernel", ramdisk.Media{}},
		{"ipxe with kernel and ramdisk", ent.Node{Driver: "ipmi", BootInterface: "ipxe", InspectInterface: "agent",
			DriverInfo: map[string]any{"ipmi_address": "10.0.0.2", "deploy_kernel": "k", "deploy_ramdisk": "r"}}, true, true, "", ramdisk.Media{}},
	} {
		v := validateNode(&c.n, c.media)
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
		err := agentBootError(n, ramdisk.Media{}, "be cleaned")
		if err == nil || errs.FieldOf(err) != want {
			t.Errorf("%v: error %v field %q, want %q", info, err, errs.FieldOf(err), want)
		}
	}
}

// TestDirectDeployPlanRuns: a direct deploy's plan, once accepted, is one
// the runner starts, on every driver that boots the agent: deploy.deploy
// boots it (the runner refused that step on ipmi and bmclib nodes, so
// their deploys failed before the agent booted). A bmclib provider that
// cannot set the boot device has its deploy refused instead, naming it.
func TestDirectDeployPlanRuns(t *testing.T) {
	image := map[string]any{"image_source": "http://192.0.2.1/i.raw", "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32)}
	kernel := map[string]any{"deploy_kernel": "http://192.0.2.1/k", "deploy_ramdisk": "http://192.0.2.1/r"}
	info := func(kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range kernel {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	for _, n := range []ent.Node{
		{Driver: "ipmi", UUID: "ipmi", DriverInfo: info("ipmi_address", "192.0.2.2"), InstanceInfo: image},
		{Driver: "bmclib", UUID: "bmclib-rpc", DriverInfo: info("bmclib_provider", "rpc", "bmclib_rpc_url", "http://192.0.2.3/hook", "bmclib_rpc_secret", "s"), InstanceInfo: image},
		{Driver: "bmclib", UUID: "bmclib-ipmitool", DriverInfo: info("bmclib_provider", "ipmitool", "bmclib_address", "192.0.2.4"), InstanceInfo: image},
	} {
		steps, err := deployPlan(&n, ramdisk.Media{}, ProvisionRequest{Target: "active"})
		if err != nil {
			t.Errorf("%s: deploy refused: %v", n.UUID, err)
			continue
		}
		if why := cannotRun(&n, "deploy", steps); why != "" {
			t.Errorf("%s: the runner refuses the plan: %s", n.UUID, why)
		}
	}
	ha := ent.Node{Driver: "bmclib", UUID: "ha", InstanceInfo: image,
		DriverInfo: info("bmclib_provider", "homeassistant", "bmclib_address", "192.0.2.5", "bmclib_homeassistant_switch", "switch.n1")}
	_, err := deployPlan(&ha, ramdisk.Media{}, ProvisionRequest{Target: "active"})
	if e, ok := errors.AsType[*errs.Error](err); !ok || e.Field != "driver_info/bmclib_provider" {
		t.Errorf("homeassistant deploy: %v, want a 400 naming driver_info/bmclib_provider", err)
	}
}

// A rescue boots the node's rescue kernel and ramdisk, else the server's
// default rescue pair, else the deploy pair (the node's or the server's).
func TestRescueMediaDefaults(t *testing.T) {
	deploy := ramdisk.Media{DeployKernel: "http://x/dk", DeployRamdisk: "http://x/dr"}
	both := deploy
	both.RescueKernel, both.RescueRamdisk = "http://x/rk", "http://x/rr"
	for _, c := range []struct {
		name           string
		info           map[string]any
		media          ramdisk.Media
		kernel, initrd string
	}{
		{"the server's rescue pair", map[string]any{}, both, "http://x/rk", "http://x/rr"},
		{"the node's rescue pair", map[string]any{"rescue_kernel": "http://n/rk", "rescue_ramdisk": "http://n/rr"}, both, "http://n/rk", "http://n/rr"},
		{"the server's deploy pair", map[string]any{}, deploy, "http://x/dk", "http://x/dr"},
		{"the node's deploy pair", map[string]any{"deploy_kernel": "http://n/dk", "deploy_ramdisk": "http://n/dr"}, deploy, "http://n/dk", "http://n/dr"},
	} {
		before := len(c.info)
		rn := rescueMedia(&ent.Node{DriverInfo: c.info}, c.media)
		k, _ := c.media.Get(rn, "deploy_kernel")
		r, _ := c.media.Get(rn, "deploy_ramdisk")
		if k != c.kernel || r != c.initrd {
			t.Errorf("%s: rescue boots %s and %s, want %s and %s", c.name, k, r, c.kernel, c.initrd)
		}
		if len(c.info) != before {
			t.Errorf("%s: rescueMedia changed the node's driver_info: %v", c.name, c.info)
		}
	}
}
