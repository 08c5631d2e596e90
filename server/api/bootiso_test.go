package api_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// bootFiles serves a kernel, a ramdisk and an ESP image of random bytes
// over loopback HTTP.
func bootFiles(t *testing.T) (url string, kernel, initrd, esp []byte) {
	t.Helper()
	dir := t.TempDir()
	mk := func(name string, n int) []byte {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	kernel, initrd, esp = mk("vmlinuz", 1<<20+3), mk("initrd", 2<<20+5), mk("esp.img", 1<<20)
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/", kernel, initrd, esp
}

// TestAgentBuiltISO boots the real agent on a redfish-virtual-media node
// that gives deploy_kernel, deploy_ramdisk and bootloader instead of a
// deploy_iso: validate accepts it (and refuses boot mode bios), provide's
// automated cleaning inserts an ISO Anvil built and serves, which the
// BMC downloads, and which holds the kernel, ramdisk, ESP and the
// agent's parameters; when the run ends the ISO is gone and its URL
// answers 404.
func TestAgentBuiltISO(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		isoDir := t.TempDir()
		rg := newRigWith(t, setting, server.Options{BootISODir: isoDir,
			Conductor: conductor.Config{Agent: conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second}}}, 1)
		base, kernel, initrd, esp := bootFiles(t)
		rg.boot = map[string]any{"deploy_kernel": base + "vmlinuz", "deploy_ramdisk": base + "initrd", "bootloader": base + "esp.img",
			"kernel_append_params": "nofb vga=normal"}
		admin, member := rg.cs["system-admin"], rg.cs["owner-member"]
		sys := rg.sim.Systems[0]
		id, disk := rg.node(t, 0, "iso1", true, nil)

		v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)
		if b := v["boot"].(map[string]any); b["result"] != true {
			t.Errorf("validate boot with kernel, ramdisk and bootloader: %v", b)
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/properties/capabilities", "value": "boot_mode:bios"}}), 200)
		v = admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)
		if b := v["boot"].(map[string]any); b["result"] != false || !strings.Contains(b["reason"].(string), "boot mode bios") {
			t.Errorf("validate boot in bios: %v", b)
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "remove", "path": "/properties/capabilities"}}), 200)

		run(t, "sgdisk", "-o", "-n", "1:2048:+16M", disk)
		provision(t, member, id, map[string]any{"target": "provide"}, 202)
		// While the agent runs, the BMC's CD holds the built ISO: fetch it
		// as the BMC did.
		var isoURL string
		var iso []byte
		var n map[string]any
		for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node did not become available: %v %v\n%s", n["provision_state"], n["last_error"], rg.rack.Log("1", 5000))
			}
			if img, inserted := rg.sim.CD(t, sys.ID); isoURL == "" && inserted && img != "" {
				isoURL = img
				iso = get(t, isoURL, "", 200)
				// A BMC reading the CD in pieces: the primary volume
				// descriptor's first bytes.
				if part := get(t, isoURL, "bytes=32768-32773", 206); string(part) != "\x01CD001" {
					t.Errorf("range of the ISO: %q", part)
				}
			}
			n = admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
			if n["provision_state"] == "available" && n["target_provision_state"] == nil {
				break
			}
			if s, _ := n["provision_state"].(string); strings.HasSuffix(s, "failed") {
				t.Fatalf("node went to %s: %v\n%s", s, n["last_error"], rg.rack.Log("1", 5000))
			}
		}
		if p := partitions(t, disk); len(p) != 0 {
			t.Errorf("after automated cleaning the disk still has partitions %v", p)
		}
		if isoURL == "" {
			t.Fatal("no ISO was seen inserted during cleaning")
		}
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(rg.srv.URL) + `/boot-iso/[0-9a-f]{64}\.iso$`).MatchString(isoURL) {
			t.Errorf("inserted ISO URL %s is not one of Anvil's", isoURL)
		}

		// The ISO: El Torito's boot record, the files, grub.cfg with the
		// agent's parameters.
		if len(iso) < 18*2048 || !bytes.HasPrefix(iso[17*2048+7:], []byte("EL TORITO SPECIFICATION")) {
			t.Fatal("the ISO has no El Torito boot record")
		}
		path := filepath.Join(t.TempDir(), "got.iso")
		if err := os.WriteFile(path, iso, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs, err := iso9660.Read(file.New(f, true), int64(len(iso)), 0, 2048)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string][]byte{"vmlinuz": kernel, "initrd": initrd, "boot/grub/efiboot.img": esp} {
			if got, err := fs.ReadFile(p); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s in the ISO: %d bytes, %v", p, len(got), err)
			}
		}
		mac := "01-" + strings.ReplaceAll(strings.ToLower(sys.MACs[0]), ":", "-")
		for _, p := range []string{"boot/grub/grub.cfg", "EFI/BOOT/grub.cfg"} {
			cfg, err := fs.ReadFile(p)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			line := regexp.MustCompile(`(?m)^linux /vmlinuz (.*) --$`).FindSubmatch(cfg)
			if line == nil {
				t.Errorf("%s boots no kernel:\n%s", p, cfg)
				continue
			}
			params := string(line[1])
			for _, want := range []string{"ipa-api-url=" + rg.srv.URL, "BOOTIF=" + mac, "nofb vga=normal"} {
				if !strings.Contains(" "+params+" ", " "+want+" ") {
					t.Errorf("%s: kernel parameters %q lack %q", p, params, want)
				}
			}
			if !regexp.MustCompile(`(^| )ipa-global-request-id=req-[0-9a-f-]{36}( |$)`).MatchString(params) {
				t.Errorf("%s: kernel parameters %q lack a request id", p, params)
			}
			if strings.Contains(params, "ipa-agent-token") {
				t.Errorf("%s: the agent's token is in the kernel parameters", p)
			}
			// Cleaning posts no inventory: only an inspection's boot
			// carries the call-back.
			if strings.Contains(params, "ipa-inspection-callback-url") {
				t.Errorf("%s: a cleaning boot's parameters %q name the inspection call-back", p, params)
			}
		}

		// After the run: no ISO kept, its URL gone, the CD ejected.
		if left, _ := os.ReadDir(isoDir); len(left) != 0 {
			t.Errorf("ISOs left after the run: %v", left)
		}
		get(t, isoURL, "", 404)
		if _, inserted := rg.sim.CD(t, sys.ID); inserted {
			t.Error("the CD is still inserted after cleaning")
		}

		// In-band inspection boots a built ISO too, and removes it after.
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/inspect_interface", "value": "agent"}}), 200)
		// The machine finds where to post its inventory on the ISO's
		// kernel line alone (the hook reads grub.cfg), as a real one does.
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		waitFor(t, admin, id, "manageable", rg.rack)
		booted, err := os.ReadFile(filepath.Join(rg.rack.Dir, sys.ID, "boot-params"))
		// The call-back carries the inspection's token: without it the
		// inventory would be refused (docs/agent-trust.md).
		callback := regexp.MustCompile(`ipa-inspection-callback-url=` + regexp.QuoteMeta(rg.srv.URL+"/v1/continue_inspection?agent_token=") + `[A-Za-z0-9_-]{43}\n`)
		if err != nil || !callback.Match(booted) {
			t.Errorf("the inspection's boot read %q (%v), want the call-back from the ISO", booted, err)
		}
		if inv := admin.Do(t, "GET", "/v1/nodes/"+id+"/inventory", nil); inv.Status != 200 {
			t.Errorf("no inventory after the inspection: %d", inv.Status)
		}
		if left, _ := os.ReadDir(isoDir); len(left) != 0 {
			t.Errorf("ISOs left after inspection: %v", left)
		}
		built := 0
		for _, e := range admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).JSON(t)["history"].([]any) {
			if strings.HasPrefix(e.(map[string]any)["event"].(string), "Built the ramdisk agent's ISO") {
				built++
			}
		}
		if built != 2 {
			t.Errorf("history records %d ISO builds, want 2 (cleaning, inspection)", built)
		}
	})
}

// get fetches url (with a Range header when rng is set) and wants status.
func get(t *testing.T, url, rng string, status int) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		t.Fatalf("GET %s (range %q): %s, want %d: %s", url, rng, resp.Status, status, b)
	}
	return b
}
