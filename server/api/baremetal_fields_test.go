package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBaremetalCLINodeFields drives the real python3-ironicclient through
// the node fields an operator sets by hand: interfaces and the conductor
// group at enrolment, retired, automated cleaning, protection, and an
// allocation's name and extra.
func TestBaremetalCLINodeFields(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := start(t, setting)
		bm := newCLI(t, srv.URL)

		n := bm.json("node", "create", "--driver", "ipmi", "--name", "cli-f1", "--driver-info", "ipmi_address=192.0.2.1",
			"--boot-interface", "pxe", "--deploy-interface", "ramdisk", "--network-interface", "noop", "--raid-interface", "agent",
			"--conductor-group", "rack1").(map[string]any)
		for k, want := range map[string]string{"boot_interface": "pxe", "deploy_interface": "ramdisk", "network_interface": "noop",
			"raid_interface": "agent", "power_interface": "ipmitool", "conductor_group": "rack1"} {
			if n[k] != want {
				t.Errorf("create: %s = %v, want %s", k, n[k], want)
			}
		}
		if errOut := bm.run(true, "node", "create", "--driver", "ipmi", "--driver-info", "ipmi_address=192.0.2.2", "--boot-interface", "fake"); !strings.Contains(errOut, "boot_interface") || !strings.Contains(errOut, "ipxe, pxe") {
			t.Errorf("bad boot interface: %s", errOut)
		}
		bm.run(false, "node", "set", "cli-f1", "--boot-interface", "ipxe")
		bm.run(false, "node", "set", "cli-f1", "--reset-deploy-interface")
		s := bm.json("node", "show", "cli-f1", "--fields", "boot_interface", "deploy_interface").(map[string]any)
		if s["boot_interface"] != "ipxe" || s["deploy_interface"] != "direct" {
			t.Errorf("interfaces after set: %v", s)
		}

		bm.run(false, "node", "set", "cli-f1", "--retired", "--retired-reason", "end of life")
		s = bm.json("node", "show", "cli-f1").(map[string]any)
		if s["retired"] != true || s["retired_reason"] != "end of life" {
			t.Errorf("retired: %v %v", s["retired"], s["retired_reason"])
		}
		if got := names(bm.json("node", "list", "--retired")); strings.Join(got, ",") != "cli-f1" {
			t.Errorf("list --retired: %v", got)
		}
		bm.run(false, "node", "unset", "cli-f1", "--retired")
		if s = bm.json("node", "show", "cli-f1").(map[string]any); s["retired"] != false || s["retired_reason"] != nil {
			t.Errorf("unset retired: %v %v", s["retired"], s["retired_reason"])
		}
		bm.run(false, "node", "set", "cli-f1", "--automated-clean")
		if s = bm.json("node", "show", "cli-f1").(map[string]any); s["automated_clean"] != true {
			t.Errorf("automated_clean: %v", s["automated_clean"])
		}
		bm.run(false, "node", "unset", "cli-f1", "--automated-clean")
		if s = bm.json("node", "show", "cli-f1").(map[string]any); s["automated_clean"] != nil {
			t.Errorf("unset automated_clean: %v", s["automated_clean"])
		}

		// Protection is for active nodes: adopt one, protect it, and it
		// cannot be deleted even in maintenance.
		bm.json("node", "create", "--driver", "fake-hardware", "--name", "cli-f2", "--resource-class", "cli-rc")
		if errOut := bm.run(true, "node", "set", "cli-f2", "--protected"); !strings.Contains(errOut, "protected") {
			t.Errorf("protect in enroll: %s", errOut)
		}
		bm.run(false, "node", "manage", "cli-f2", "--wait", "30")
		bm.run(false, "node", "adopt", "cli-f2", "--wait", "30")
		bm.run(false, "node", "set", "cli-f2", "--protected", "--protected-reason", "database")
		bm.run(false, "node", "maintenance", "set", "cli-f2")
		if errOut := bm.run(true, "node", "delete", "cli-f2"); !strings.Contains(errOut, "protected") {
			t.Errorf("delete protected: %s", errOut)
		}
		bm.run(false, "node", "unset", "cli-f2", "--protected")
		if s = bm.json("node", "show", "cli-f2").(map[string]any); s["protected"] != false || s["protected_reason"] != nil {
			t.Errorf("unset protected: %v %v", s["protected"], s["protected_reason"])
		}

		// An allocation is settled by the conductor; --wait waits for it.
		bm.json("node", "create", "--driver", "fake-hardware", "--name", "cli-f3", "--resource-class", "cli-rc")
		bm.run(false, "node", "manage", "cli-f3", "--wait", "30")
		bm.run(false, "node", "provide", "cli-f3", "--wait", "30")
		a := bm.json("allocation", "create", "--resource-class", "cli-rc", "--wait", "30").(map[string]any)
		if a["state"] != "active" || a["node_uuid"] == nil {
			t.Fatalf("allocation: %v", a)
		}
		bm.run(false, "allocation", "set", a["uuid"].(string), "--name", "cli-alloc", "--extra", "ticket=42")
		x := bm.json("allocation", "show", "cli-alloc").(map[string]any)
		if fmt.Sprint(x["extra"].(map[string]any)["ticket"]) != "42" {
			t.Errorf("allocation set: %v", x)
		}
		bm.run(false, "allocation", "unset", "cli-alloc", "--name", "--extra", "ticket")
		x = bm.json("allocation", "show", a["uuid"].(string)).(map[string]any)
		if x["name"] != nil || len(x["extra"].(map[string]any)) != 0 {
			t.Errorf("allocation unset: %v", x)
		}
		bm.run(false, "allocation", "delete", a["uuid"].(string))
	})
}
