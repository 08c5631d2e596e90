package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestIPXEScripts: what iPXE gets from Anvil without credentials. A
// machine whose node boots the agent from the network gets its kernel and
// ramdisk with the agent's parameters; every other MAC, known or not,
// gets the same script that boots the local disk.
func TestIPXEScripts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting)
		admin, anon := cs["system-admin"], cs["anonymous"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "px", "driver": "ipmi", "driver_info": map[string]any{
			"ipmi_address": "192.0.2.7", "ipmi_username": "u", "ipmi_password": "p",
			"deploy_kernel": "http://192.0.2.1/ipa.kernel", "deploy_ramdisk": "http://192.0.2.1/ipa.initramfs",
			"kernel_append_params": "console=ttyS0 nofb"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": "52:54:00:1c:00:01"}), 201)

		script := func(mac string) string {
			t.Helper()
			r := anon.Do(t, "GET", "/ipxe/"+mac, nil)
			mustStatus(t, r, 200)
			return string(r.Body)
		}
		local := script("52-54-00-ff-ff-ff")
		if !strings.HasPrefix(local, "#!ipxe") || !strings.Contains(local, "exit") {
			t.Fatalf("unknown MAC: %q", local)
		}
		if got := script("52-54-00-1c-00-01"); got != local {
			t.Errorf("a node that boots no agent (enroll) got %q", got)
		}
		setState(t, srv, id, "clean wait")
		got := script("52-54-00-1c-00-01")
		for _, want := range []string{"kernel --name kernel http://192.0.2.1/ipa.kernel initrd=ramdisk", "ipa-api-url=" + srv.URL,
			"BOOTIF=01-52-54-00-1c-00-01", "console=ttyS0 nofb", "initrd --name ramdisk http://192.0.2.1/ipa.initramfs", "\nboot\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("script lacks %q:\n%s", want, got)
			}
		}
		if strings.Contains(got, "agent_token") || strings.Contains(got, "ipmi_password") {
			t.Errorf("script carries a secret:\n%s", got)
		}
		if strings.Contains(got, "ipa-inspection-callback-url") || !strings.Contains(got, "ipa-global-request-id=req-") {
			t.Errorf("a cleaning boot's script: want a request id and no inspection call-back:\n%s", got)
		}
		// An inspection's boot tells the agent where to post its
		// inventory, as Ironic's iPXE configuration does.
		setState(t, srv, id, "inspect wait")
		if got := script("52-54-00-1c-00-01"); !strings.Contains(got, " ipa-inspection-callback-url="+srv.URL+"/v1/continue_inspection ") {
			t.Errorf("an inspection's script lacks the call-back:\n%s", got)
		}
		setState(t, srv, id, "clean wait")
		// A URL iPXE would expand settings in is not served.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id+"?keep_secrets=true", []map[string]any{
			{"op": "replace", "path": "/driver_info/deploy_kernel", "value": "http://192.0.2.1/${password}"}}), 200)
		if got := script("52:54:00:1c:00:01"); got != local {
			t.Errorf("a kernel URL with ${ got %q", got)
		}
		if r := anon.Do(t, "GET", "/ipxe/not-a-mac", nil); r.Status != 400 {
			t.Errorf("bad MAC: %d", r.Status)
		}
		boot := anon.Do(t, "GET", "/ipxe/boot.ipxe", nil)
		mustStatus(t, boot, 200)
		if !strings.Contains(string(boot.Body), "chain --autofree ${mac:hexhyp}") {
			t.Errorf("boot.ipxe: %s", boot.Body)
		}
	})
}

// TestIPXEScriptsServerDefaults: a pxe node whose driver_info names no
// kernel boots the server's default deploy kernel and ramdisk, and its
// rescue the default rescue pair; a node with its own pair boots that.
func TestIPXEScriptsServerDefaults(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		media := ramdisk.Media{DeployKernel: "http://192.0.2.1/default.kernel", DeployRamdisk: "http://192.0.2.1/default.initramfs",
			RescueKernel: "http://192.0.2.1/rescue.kernel", RescueRamdisk: "http://192.0.2.1/rescue.initramfs"}
		srv, cs := startLocal(t, setting, server.Options{Conductor: conductor.Config{Agent: conductor.AgentConfig{Media: media}}})
		admin, anon := cs["system-admin"], cs["anonymous"]
		mk := func(name, mac string, info map[string]any) string {
			t.Helper()
			info["ipmi_address"] = "192.0.2.7"
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "ipmi", "boot_interface": "pxe", "driver_info": info})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}), 201)
			return id
		}
		bare := mk("px-default", "52:54:00:1d:00:01", map[string]any{})
		own := mk("px-own", "52:54:00:1d:00:02", map[string]any{"deploy_kernel": "http://192.0.2.9/own.kernel", "deploy_ramdisk": "http://192.0.2.9/own.initramfs"})
		script := func(mac string) string {
			t.Helper()
			r := anon.Do(t, "GET", "/ipxe/"+mac, nil)
			mustStatus(t, r, 200)
			return string(r.Body)
		}
		for _, c := range []struct{ id, mac, state, kernel, initrd string }{
			{bare, "52-54-00-1d-00-01", "clean wait", media.DeployKernel, media.DeployRamdisk},
			{bare, "52-54-00-1d-00-01", "rescue wait", media.RescueKernel, media.RescueRamdisk},
			{own, "52-54-00-1d-00-02", "clean wait", "http://192.0.2.9/own.kernel", "http://192.0.2.9/own.initramfs"},
		} {
			setState(t, srv, c.id, c.state)
			got := script(c.mac)
			if !strings.Contains(got, "kernel --name kernel "+c.kernel+" ") || !strings.Contains(got, "initrd --name ramdisk "+c.initrd+"\n") {
				t.Errorf("%s in %s: want %s and %s:\n%s", c.mac, c.state, c.kernel, c.initrd, got)
			}
		}
		v := admin.Do(t, "GET", "/v1/nodes/"+bare+"/validate", nil).JSON(t)
		if b := v["boot"].(map[string]any); b["result"] != true {
			t.Errorf("validate boot of a node on the server's kernel and ramdisk: %v", b)
		}
	})
}
