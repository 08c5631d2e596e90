package web_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodeHardwareSection: the node page's Hardware section shows what
// Anvil stored (inventory, NICs joined with ports, BIOS settings with
// the pending ones marked, firmware, boot mode and secure boot), each
// part only where the API's rule lets the viewer read it, and says what
// would fill a part that is empty. The status fragment carries it too.
func TestNodeHardwareSection(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		ctx := context.Background()
		db := srv.DB.Client
		// f-00: owned by blue (pat), leased to green (gil).
		n, err := db.Node.Query().Where(node.UUID(ids["f-00"])).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Update().SetBootMode("uefi").SetSecureBoot(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		inv := map[string]any{
			"cpu":           map[string]any{"count": 64, "sockets": 2, "model_name": "Xeon Gold", "architecture": "x86_64"},
			"memory":        map[string]any{"physical_mb": 65536},
			"disks":         []any{map[string]any{"name": "Drive-0", "model": "SSD", "size": 480 << 30, "serial": "S1"}},
			"interfaces":    []any{map[string]any{"name": "nic-1", "mac_address": "52:54:00:00:00:01"}, map[string]any{"name": "nic-2", "mac_address": "52:54:00:00:00:02"}},
			"system_vendor": map[string]any{"manufacturer": "Sushy", "product_name": "Fake", "serial_number": "SN-9"},
			"boot":          map[string]any{"current_boot_mode": "uefi"},
		}
		if err := db.NodeInventory.Create().SetNodeID(n.ID).SetInventory(inv).SetPluginData(map[string]any{}).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.BiosSetting.Create().SetNodeID(n.ID).SetName("SysProfile").SetValue("PerfPerWattOptimizedDapc").SetPending("PerfOptimized").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.BiosSetting.Create().SetNodeID(n.ID).SetName("ProcTurboMode").SetValue("Enabled").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.FirmwareComponent.Create().SetNodeID(n.ID).SetComponent("bios").SetInitialVersion("1.0.0").SetCurrentVersion("1.1.0").SetLastVersionFlashed("1.1.0").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.FirmwareComponent.Create().SetNodeID(n.ID).SetComponent("bmc").SetInitialVersion("1.00").SetCurrentVersion("1.00").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if r := api.Do(t, "POST", "/v1/ports", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": ids["f-00"], "physical_network": "prov"}); r.Status != 201 {
			t.Fatalf("port: %d %s", r.Status, r.Body)
		}

		pat := signInAs(t, srv, "pat")
		_, page, _ := pat.do("GET", "/nodes/"+ids["f-00"], nil)
		hw := section(t, page, "hardware")
		for _, want := range []string{
			"<dt>System</dt><dd>Sushy Fake (serial SN-9)</dd>", "<dt>CPUs</dt><dd>64 logical, 2 sockets, Xeon Gold, x86_64</dd>",
			"<dt>Memory</dt><dd>64 GiB</dd>", "<li>Drive-0, SSD, 480 GiB, serial S1</li>",
			"<td>nic-1</td><td><code>52:54:00:00:00:01</code></td><td>port, PXE, network prov</td>",
			"<td>nic-2</td><td><code>52:54:00:00:00:02</code></td><td>not enrolled</td>",
			"2 settings; 1 pending: staged, they apply at the node&#39;s next reset",
			`<tr data-setting="SysProfile"><th scope="row">SysProfile</th><td data-testid="bios-current">PerfPerWattOptimizedDapc</td><td data-testid="bios-pending"><strong>PerfOptimized</strong> <span class="badge warn">at next reset</span>`,
			`<tr data-setting="ProcTurboMode"><th scope="row">ProcTurboMode</th><td data-testid="bios-current">Enabled</td><td data-testid="bios-pending"></td>`,
			`<tr data-component="bios"><th scope="row">bios</th><td>1.1.0</td><td>1.1.0</td><td>1.0.0</td>`,
			`<tr data-component="bmc"><th scope="row">bmc</th><td>1.00</td><td>never flashed by Anvil</td><td>1.00</td>`,
			"<dt>Boot mode</dt><dd>uefi</dd>", "<dt>Secure boot</dt><dd>on</dd>",
		} {
			if !strings.Contains(hw, want) {
				t.Errorf("owner member's hardware section lacks %s", want)
			}
		}
		if strings.Contains(hw, "Not available") {
			t.Errorf("owner member is denied a part:\n%s", hw)
		}

		// The lessee reads BIOS and firmware but not the inventory, which
		// Ironic keeps to the owner; the page says so and shows none of it.
		gil := signInAs(t, srv, "gil")
		_, page, _ = gil.do("GET", "/nodes/"+ids["f-00"], nil)
		hw = section(t, page, "hardware")
		if !strings.Contains(hw, refusalHTML("may not read the hardware inventory", "baremetal:node:inventory:get")) || strings.Contains(hw, "Xeon Gold") || strings.Contains(hw, "SN-9") {
			t.Errorf("lessee's inventory part:\n%s", hw)
		}
		if !strings.Contains(hw, "<strong>PerfOptimized</strong>") || !strings.Contains(hw, `data-component="bios"`) {
			t.Errorf("lessee lacks BIOS or firmware:\n%s", hw)
		}
		// Ports the lessee may read; the inventory's NIC names it may not.
		if !strings.Contains(hw, "<td>not recorded</td><td><code>52:54:00:00:00:01</code></td><td>port, PXE, network prov</td>") || strings.Contains(hw, "nic-2") {
			t.Errorf("lessee's network part:\n%s", hw)
		}

		// A node with nothing stored says what would fill each part.
		_, page, _ = pat.do("GET", "/nodes/"+ids["f-02"], nil)
		hw = section(t, page, "hardware")
		for _, want := range []string{
			"No inventory yet; inspect the node", "No NICs or ports recorded",
			"No BIOS settings cached yet; run bios.cache_bios_settings or inspect the node.",
			"No firmware versions recorded yet; inspect the node or run firmware.update.",
			"not recorded; inspect the node or run management.set_boot_mode", "not recorded; run management.set_secure_boot",
			"not read yet; attaching media, or reading them through the API, records them here",
			"not read yet; reading or setting an indicator (management/indicators) records it here",
		} {
			if !strings.Contains(hw, want) {
				t.Errorf("empty hardware section lacks %q", want)
			}
		}

		// A status update replaces the section out of band.
		_, frag, _ := pat.do("GET", "/nodes/"+ids["f-00"]+"/status", nil, "HX-Request", "true")
		if !strings.Contains(frag, `<section id="hardware" aria-labelledby="hardware-title" hx-swap-oob="true">`) || !strings.Contains(frag, "PerfOptimized") {
			t.Errorf("status fragment lacks the hardware section")
		}
	})
}

// TestHardwarePendingFromRedfish: a BIOS setting staged on a real
// (simulated) Redfish BMC but not yet applied is cached as pending by
// bios.cache_bios_settings and shown apart from the current value; once
// a reset applies it, the next cache shows it current and nothing pending.
func TestHardwarePendingFromRedfish(t *testing.T) {
	sim := bmctest.StartRedfish(t)
	srv, api, _ := fleet(t, storetest.Setting(t, "sqlite"))
	r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rf-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "blue"})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["uuid"].(string)
	run := func(target string, steps ...map[string]any) {
		t.Helper()
		body := map[string]any{"target": target}
		if steps != nil {
			body["clean_steps"] = steps
		}
		if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", body); r.Status != 202 {
			t.Fatalf("%s: %d %s", target, r.Status, r.Body)
		}
		waitManageable(t, api, id)
	}
	run("manage")
	// Staged at the BMC by someone else: Anvil learns of it only by reading.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own simulator
	req, _ := http.NewRequest("PATCH", sim.URL+sim.SystemPath("1")+"/BIOS/Settings", bytes.NewBufferString(`{"Attributes": {"SysProfile": "PerfOptimized"}}`))
	req.SetBasicAuth(bmctest.RedfishUser, bmctest.RedfishPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("staging at the simulator: %v %v", resp, err)
	}
	resp.Body.Close()
	cache := map[string]any{"interface": "bios", "step": "cache_bios_settings"}
	run("clean", cache)
	pat := signInAs(t, srv, "pat")
	row := func() string {
		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		hw := section(t, page, "hardware")
		i := strings.Index(hw, `<tr data-setting="SysProfile">`)
		if i < 0 {
			t.Fatalf("no SysProfile row:\n%s", hw)
		}
		return hw[i : i+strings.Index(hw[i:], "</tr>")]
	}
	if got := row(); !strings.Contains(got, `<td data-testid="bios-current">PerfPerWattOptimizedDapc</td>`) ||
		!strings.Contains(got, "<strong>PerfOptimized</strong> <span class=\"badge warn\">at next reset</span>") {
		t.Errorf("staged setting not shown pending: %s", got)
	}
	run("clean", map[string]any{"interface": "power", "step": "reboot"}, cache)
	if got := row(); !strings.Contains(got, `<td data-testid="bios-current">PerfOptimized</td><td data-testid="bios-pending"></td>`) {
		t.Errorf("applied setting still pending or not current: %s", got)
	}
}

func waitManageable(t *testing.T, api *servertest.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] == "manageable" && n["target_provision_state"] == nil {
			if n["last_error"] != nil {
				t.Fatalf("node %s: %v", id, n["last_error"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v", id, n["provision_state"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// section is the <section id=id> of page, to its closing tag.
func section(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `<section id="`+id+`"`)
	if i < 0 {
		t.Fatalf("page has no section %s", id)
	}
	j := strings.Index(page[i:], "</section>")
	return page[i : i+j]
}

// TestHardwareVMediaAndIndicators: virtual media attached and detached
// through the API on a redfish-sim node, and an indicator set, show in
// the Hardware section from what the conductor stored (an image URL
// without its password); a viewer whom policy denies the API's reads
// sees the reason instead. The drop-in keeps both reads to the owner.
func TestHardwareVMediaAndIndicators(t *testing.T) {
	iso := servertest.ServeISO(t)
	secret := strings.Replace(iso, "http://", "http://anvil:s3cret-pw@", 1)
	shown := strings.Replace(iso, "http://", "http://***@", 1)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		pdir := t.TempDir()
		rules := `"baremetal:node:vmedia:get": "rule:system_or_owner_reader"` + "\n" + `"baremetal:node:get_indicator_state": "rule:system_or_owner_reader"` + "\n"
		if err := os.WriteFile(filepath.Join(pdir, "10-owner-only.yaml"), []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		srv, api, _ := fleetWith(t, server.Options{Database: setting, PolicyDir: pdir, PolicyOverrideEnabled: true})
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rf-hw", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "blue", "lessee": "green"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		pat, gil := signInAs(t, srv, "pat"), signInAs(t, srv, "gil")
		// part is the <dd data-testid=testid> of b's view of the node.
		part := func(b *browser, testid string) string {
			t.Helper()
			_, page, _ := b.do("GET", "/nodes/"+id, nil)
			hw := section(t, page, "hardware")
			i := strings.Index(hw, `<dd data-testid="`+testid+`">`)
			if i < 0 {
				t.Fatalf("no %s part:\n%s", testid, hw)
			}
			return hw[i : i+strings.Index(hw[i:], "</dd>")]
		}
		do := func(method, path string, body any) {
			t.Helper()
			if r := api.Do(t, method, path, body); r.Status != 204 {
				t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
			}
		}
		if got := part(pat, "vmedia"); !strings.Contains(got, "not read yet") {
			t.Errorf("vmedia before any attach: %s", got)
		}
		if got := part(pat, "indicators"); !strings.Contains(got, "not read yet") {
			t.Errorf("indicators before any read: %s", got)
		}

		// Virtual media is attached after the 204, as Ironic's conductor
		// does it: the page shows it once the work is done.
		settled := func(ok func(string) bool) string {
			t.Helper()
			var got string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if got = part(pat, "vmedia"); ok(got) {
					break
				}
			}
			return got
		}
		do("POST", "/v1/nodes/"+id+"/vmedia", map[string]any{"device_type": "cdrom", "image_url": secret})
		got := settled(func(s string) bool { return strings.Contains(s, "<li data-device=") })
		if !strings.Contains(got, `<li data-device="cdrom">cdrom: <span data-testid="vmedia-image">`+shown+`</span> (since <time datetime=`) || strings.Contains(got, "s3cret-pw") {
			t.Errorf("vmedia after attach: %s", got)
		}
		got = part(gil, "vmedia")
		if !strings.Contains(got, refusalHTML("may not read virtual media", "baremetal:node:vmedia:get")) || strings.Contains(got, "boot.iso") {
			t.Errorf("lessee's vmedia part: %s", got)
		}
		do("DELETE", "/v1/nodes/"+id+"/vmedia", nil)
		if got := settled(func(s string) bool { return !strings.Contains(s, "boot.iso") }); !strings.Contains(got, "none attached (as of <time datetime=") || strings.Contains(got, "boot.iso") {
			t.Errorf("vmedia after detach: %s", got)
		}

		system := sim.Resource(t, sim.SystemPath("1"))
		led := fmt.Sprint(system["UUID"], "@system")
		do("PUT", "/v1/nodes/"+id+"/management/indicators/"+led, map[string]any{"state": "blinking"})
		if got := part(pat, "indicators"); !strings.Contains(got, `<li data-indicator="`+led+`">`+led+`: <span data-testid="indicator-state">blinking</span> (as of <time datetime=`) {
			t.Errorf("indicators after set: %s", got)
		}
		got = part(gil, "indicators")
		if !strings.Contains(got, refusalHTML("may not read indicator states", "baremetal:node:get_indicator_state")) || strings.Contains(got, "blinking") {
			t.Errorf("lessee's indicators part: %s", got)
		}
	})
}
