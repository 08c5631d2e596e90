package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// column collects one column of a CLI list.
func column(rows any, name string) []string {
	var out []string
	for _, r := range rows.([]any) {
		out = append(out, r.(map[string]any)[name].(string))
	}
	return out
}

// TestBaremetalCLIInventory drives the real python3-ironicclient through
// chassis, deploy templates and volume connectors and targets.
func TestBaremetalCLIInventory(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := start(t, setting)
		bm := newCLI(t, srv.URL)

		ch := bm.json("chassis", "create", "--description", "rack 7", "--extra", "row=b").(map[string]any)
		chID, _ := ch["uuid"].(string)
		if ch["description"] != "rack 7" || chID == "" {
			t.Fatalf("chassis create: %v", ch)
		}
		if got := column(bm.json("chassis", "list"), "Description"); strings.Join(got, ",") != "rack 7" {
			t.Fatalf("chassis list: %v", got)
		}
		if s := bm.json("chassis", "show", chID).(map[string]any); s["extra"].(map[string]any)["row"] != "b" {
			t.Fatalf("chassis show: %v", s)
		}
		n := bm.json("node", "create", "--driver", "fake", "--name", "cli-vol", "--chassis-uuid", chID).(map[string]any)
		if n["chassis_uuid"] != chID {
			t.Fatalf("node create --chassis-uuid: %v", n["chassis_uuid"])
		}
		if got := names(bm.json("node", "list", "--chassis", chID)); strings.Join(got, ",") != "cli-vol" {
			t.Fatalf("node list --chassis: %v", got)
		}
		if msg := bm.run(true, "chassis", "delete", chID); !strings.Contains(msg, "contains nodes") {
			t.Fatalf("chassis delete with a node: %s", msg)
		}

		steps := `[{"interface": "management", "step": "set_boot_device", "args": {"device": "pxe"}, "priority": 150}]`
		dt := bm.json("deploy", "template", "create", "CUSTOM_PXE_BOOT", "--steps", steps).(map[string]any)
		if dt["name"] != "CUSTOM_PXE_BOOT" || len(dt["steps"].([]any)) != 1 {
			t.Fatalf("deploy template create: %v", dt)
		}
		if msg := bm.run(true, "deploy", "template", "create", "pxe-boot", "--steps", steps); !strings.Contains(msg, "name") {
			t.Fatalf("bad template name: %s", msg)
		}
		if got := column(bm.json("deploy", "template", "list"), "Name"); strings.Join(got, ",") != "CUSTOM_PXE_BOOT" {
			t.Fatalf("deploy template list: %v", got)
		}

		node := n["uuid"].(string)
		vc := bm.json("volume", "connector", "create", "--node", node, "--type", "iqn", "--connector-id", "iqn.2017-07.org.openstack:01:d9a51732c3f").(map[string]any)
		if vc["node_uuid"] != node || vc["type"] != "iqn" {
			t.Fatalf("volume connector create: %v", vc)
		}
		if msg := bm.run(true, "volume", "connector", "create", "--node", node, "--type", "floppy", "--connector-id", "x"); !strings.Contains(msg, "type") {
			t.Fatalf("bad connector type: %s", msg)
		}
		if got := column(bm.json("volume", "connector", "list", "--node", node), "Connector ID"); strings.Join(got, ",") != "iqn.2017-07.org.openstack:01:d9a51732c3f" {
			t.Fatalf("volume connector list: %v", got)
		}
		vt := bm.json("volume", "target", "create", "--node", node, "--type", "iscsi", "--boot-index", "0", "--volume-id", "04452bed-5367-4202-8bf5-de4335ac56d2").(map[string]any)
		if vt["boot_index"] != float64(0) || vt["volume_type"] != "iscsi" {
			t.Fatalf("volume target create: %v", vt)
		}
		if msg := bm.run(true, "volume", "target", "create", "--node", node, "--type", "iscsi", "--boot-index", "0", "--volume-id", "other"); !strings.Contains(msg, "boot index") {
			t.Fatalf("duplicate boot index: %s", msg)
		}
		if got := column(bm.json("volume", "target", "list"), "Volume ID"); strings.Join(got, ",") != "04452bed-5367-4202-8bf5-de4335ac56d2" {
			t.Fatalf("volume target list: %v", got)
		}

		bm.run(false, "volume", "connector", "delete", vc["uuid"].(string))
		bm.run(false, "volume", "target", "delete", vt["uuid"].(string))
		bm.run(false, "deploy", "template", "delete", "CUSTOM_PXE_BOOT")
		bm.run(false, "node", "delete", "cli-vol")
		bm.run(false, "chassis", "delete", chID)
		if got := bm.json("chassis", "list").([]any); len(got) != 0 {
			t.Fatalf("chassis after delete: %v", got)
		}
	})
}
