package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBaremetalCLIDriversAndAllocations drives Debian's client through
// drivers, conductors, supported boot devices and allocation updates.
func TestBaremetalCLIDriversAndAllocations(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, admin := start(t, setting)
		bm := newCLI(t, srv.URL)

		drivers := fmt.Sprint(bm.json("driver", "list"))
		for _, d := range []string{"fake-hardware", "ipmi", "redfish"} {
			if !strings.Contains(drivers, d) {
				t.Errorf("driver list lacks %s: %s", d, drivers)
			}
		}
		if long := fmt.Sprint(bm.json("driver", "list", "--long")); !strings.Contains(long, "ipmitool") {
			t.Errorf("driver list --long: %s", long)
		}
		d := bm.json("driver", "show", "ipmi").(map[string]any)
		if d["name"] != "ipmi" || d["default_power_interface"] != "ipmitool" {
			t.Errorf("driver show: %v", d)
		}
		if props := fmt.Sprint(bm.json("driver", "property", "list", "redfish")); !strings.Contains(props, "redfish_address") || !strings.Contains(props, "Required") {
			t.Errorf("driver property list: %s", props)
		}
		if raid := fmt.Sprint(bm.json("driver", "raid", "property", "list", "ipmi")); !strings.Contains(raid, "raid_level") {
			t.Errorf("driver raid property list: %s", raid)
		}
		if errOut := bm.run(true, "driver", "show", "no-such-driver"); !strings.Contains(errOut, "no-such-driver") {
			t.Errorf("driver show missing: %s", errOut)
		}

		host := bm.json("conductor", "list").([]any)[0].(map[string]any)["Hostname"].(string)
		c := bm.json("conductor", "show", host).(map[string]any)
		if c["hostname"] != host || c["alive"] != true {
			t.Errorf("conductor show: %v", c)
		}
		if errOut := bm.run(true, "conductor", "show", "no-such-host"); !strings.Contains(errOut, "no-such-host") {
			t.Errorf("conductor show missing: %s", errOut)
		}

		bm.json("node", "create", "--driver", "fake-hardware", "--name", "cli-fh")
		if sup := fmt.Sprint(bm.json("node", "boot", "device", "show", "--supported", "cli-fh")); !strings.Contains(sup, "pxe") || !strings.Contains(sup, "safe") {
			t.Errorf("boot device show --supported: %s", sup)
		}

		availableNode(t, admin, map[string]any{"name": "cli-alloc"})
		a := bm.json("allocation", "create", "--resource-class", "baremetal", "--name", "cli-a", "--wait", "30").(map[string]any)
		if a["state"] != "active" {
			t.Fatalf("allocation create: %v", a)
		}
		bm.run(false, "allocation", "set", "cli-a", "--name", "cli-b", "--extra", "team=blue")
		s := bm.json("allocation", "show", "cli-b").(map[string]any)
		if s["extra"].(map[string]any)["team"] != "blue" {
			t.Errorf("allocation set: %v", s)
		}
		bm.run(false, "allocation", "unset", "cli-b", "--extra", "team")
		bm.run(false, "allocation", "unset", "cli-b", "--name")
		s = bm.json("allocation", "show", a["uuid"].(string)).(map[string]any)
		if s["name"] != nil || len(s["extra"].(map[string]any)) != 0 {
			t.Errorf("allocation unset: %v", s)
		}
		if got := fmt.Sprint(bm.json("allocation", "list", "--node", "cli-alloc")); !strings.Contains(got, a["uuid"].(string)) {
			t.Errorf("allocation list --node: %s", got)
		}
		if n := bm.json("node", "show", "cli-alloc").(map[string]any); n["allocation_uuid"] != a["uuid"] {
			t.Errorf("node allocation_uuid %v", n["allocation_uuid"])
		}
	})
}
