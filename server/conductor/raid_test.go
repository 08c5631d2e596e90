package conductor

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func raidNode(t *testing.T, db *store.DB, driver string, target map[string]any) *ent.Node {
	t.Helper()
	n := fakeNode(t, db, nil)
	n, err := db.Node.UpdateOne(n).SetDriver(driver).SetTargetRaidConfig(target).Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func logicalDisks(t *testing.T, n *ent.Node) []map[string]any {
	t.Helper()
	list, ok := n.RaidConfig["logical_disks"].([]any)
	if !ok {
		t.Fatalf("raid_config %v has no logical_disks", n.RaidConfig)
	}
	out := make([]map[string]any, len(list))
	for i, x := range list {
		out[i] = x.(map[string]any)
	}
	return out
}

// TestRAIDFakeCreateDelete builds a root RAID 1 of a given size and a
// RAID 5 of the largest size on the fake BMC, checks raid_config lists
// both as the BMC reports them, then deletes them and checks raid_config
// is empty.
func TestRAIDFakeCreateDelete(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		c := New(db, slog.New(slog.DiscardHandler), Config{Name: "test"})
		n := raidNode(t, db, "fake-hardware", map[string]any{"logical_disks": []any{
			map[string]any{"raid_level": "1", "size_gb": float64(100), "is_root_volume": true, "volume_name": "root"},
			map[string]any{"raid_level": "5", "size_gb": "MAX", "volume_name": "data", "number_of_physical_disks": float64(3)},
		}})
		c.runSteps(n, "clean", []Step{{Interface: "raid", Step: "create_configuration"}}, "tester", false)
		got, err := db.Node.Get(ctx, n.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisionState != nodes.StateManageable || got.LastError != nil {
			t.Fatalf("create: state %s, last_error %v", got.ProvisionState, lastErr(got))
		}
		disks := logicalDisks(t, got)
		if len(disks) != 2 {
			t.Fatalf("raid_config %v, want two disks", got.RaidConfig)
		}
		root, data := disks[0], disks[1]
		if root["name"] != "root" || root["raid_level"] != "1" || root["size_gb"] != float64(100) || root["is_root_volume"] != true || root["controller"] != "RAID.Integrated.1" || root["id"] == "" {
			t.Errorf("root disk %v", root)
		}
		// Three 446 GiB drives in RAID 5 give two drives' worth.
		if data["name"] != "data" || data["raid_level"] != "5" || data["size_gb"] != float64(2*479559942144>>30) || data["is_root_volume"] != nil {
			t.Errorf("data disk %v", data)
		}
		// The root volume becomes local_gb and a raid_level capability,
		// as Ironic's update_raid_info records it.
		if got.Properties["local_gb"] != float64(100) || got.Properties["capabilities"] != "raid_level:1" {
			t.Errorf("properties %v", got.Properties)
		}
		if got.RaidConfig["last_updated"] == nil {
			t.Errorf("raid_config has no last_updated: %v", got.RaidConfig)
		}
		if ev := events(t, db, n.ID); !strings.Contains(strings.Join(ev, "|"), "RAID configuration: root (RAID 1, 100 GiB), data (RAID 5, 893 GiB)") {
			t.Errorf("events %v", ev)
		}

		again := func() {
			t.Helper()
			if err := db.Node.UpdateOneID(n.ID).SetProvisionState(nodes.StateCleaning).SetReservation("test").Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// delete_existing replaces the volumes; only the root one is
		// built when create_nonroot_volumes is false.
		again()
		c.runSteps(got, "clean", []Step{{Interface: "raid", Step: "create_configuration", Args: map[string]any{"delete_existing": true, "create_nonroot_volumes": false}}}, "tester", false)
		if got, err = db.Node.Get(ctx, n.ID); err != nil {
			t.Fatal(err)
		}
		if d := logicalDisks(t, got); got.LastError != nil || len(d) != 1 || d[0]["name"] != "root" || d[0]["id"] == root["id"] {
			t.Fatalf("create with delete_existing: last_error %q, raid_config %v (first root id %v)", lastErr(got), got.RaidConfig, root["id"])
		}

		again()
		c.runSteps(got, "clean", []Step{{Interface: "raid", Step: "delete_configuration"}}, "tester", false)
		got, err = db.Node.Get(ctx, n.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisionState != nodes.StateManageable || got.LastError != nil || len(logicalDisks(t, got)) != 0 {
			t.Errorf("delete: state %s, last_error %v, raid_config %v", got.ProvisionState, lastErr(got), got.RaidConfig)
		}
	})
}

// TestRAIDFailures: each refusal fails the run naming the step and the
// reason, and leaves raid_config as it was.
func TestRAIDFailures(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		c := New(db, slog.New(slog.DiscardHandler), Config{Name: "test"})
		create := []Step{{Interface: "raid", Step: "create_configuration"}}
		onlyNonRoot := []Step{{Interface: "raid", Step: "create_configuration", Args: map[string]any{"create_nonroot_volumes": false}}}
		rootDisk := map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": float64(10)}}}
		for _, tc := range []struct {
			name, driver string
			target       map[string]any
			steps        []Step
			want         string
		}{
			{"empty target", "fake-hardware", map[string]any{}, create, "Step raid.create_configuration failed: node %s has no target RAID configuration"},
			{"filtered to nothing", "fake-hardware", rootDisk, onlyNonRoot, "Step raid.create_configuration failed: node %s has empty target RAID configuration after skipping non-root volumes"},
			{"level the BMC cannot build", "fake-hardware", map[string]any{"logical_disks": []any{map[string]any{"raid_level": "JBOD", "size_gb": float64(10)}}}, create,
				"Step raid.create_configuration failed: target_raid_config logical_disks[0]: RAID level JBOD is not supported by the driver. Supported RAID levels: 0, 1, 1+0, 5, 5+0, 6, 6+0"},
			{"too large", "fake-hardware", map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": float64(5000)}}}, create,
				"Step raid.create_configuration failed: the BMC answered with an error: HTTP 400 5000 GiB exceeds the 446 GiB RAID 1 of 2 drives gives"},
			{"too few drives", "fake-hardware", map[string]any{"logical_disks": []any{map[string]any{"raid_level": "6+0", "size_gb": "MAX"}}}, create,
				"Step raid.create_configuration failed: the BMC answered with an error: RAID 6+0 needs 8 drives; controller RAID.Integrated.1 has 4"},
			{"no-raid", "fake-hardware", rootDisk, create, "Step raid.create_configuration failed: raid_interface no-raid does not build RAID out of band; set raid_interface fake"},
			{"ipmi", "ipmi", rootDisk, create, "Step raid.create_configuration is not supported by driver ipmi."},
			{"ipmi delete", "ipmi", rootDisk, []Step{{Interface: "raid", Step: "delete_configuration"}}, "Step raid.delete_configuration is not supported by driver ipmi."},
		} {
			n := raidNode(t, db, tc.driver, tc.target)
			if tc.name == "no-raid" {
				n = n.Update().SetRaidInterface("no-raid").SaveX(ctx)
			}
			before := map[string]any{"logical_disks": []any{map[string]any{"id": "old", "raid_level": "0", "size_gb": float64(1)}}}
			if err := db.Node.UpdateOneID(n.ID).SetRaidConfig(before).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			c.runSteps(n, "clean", tc.steps, "tester", false)
			got, err := db.Node.Get(ctx, n.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if strings.Contains(want, "%s") {
				want = strings.ReplaceAll(want, "%s", n.UUID)
			}
			if got.ProvisionState != nodes.StateCleanFailed || got.LastError == nil || !strings.HasPrefix(*got.LastError, want) {
				t.Errorf("%s: state %s, last_error %q, want %q", tc.name, got.ProvisionState, lastErr(got), want)
			}
			if d := logicalDisks(t, got); len(d) != 1 || d[0]["id"] != "old" {
				t.Errorf("%s: raid_config changed to %v", tc.name, got.RaidConfig)
			}
		}
	})
}

func lastErr(n *ent.Node) string {
	if n.LastError == nil {
		return ""
	}
	return *n.LastError
}

// TestRAIDPropertiesFromAgentResult derives properties from a
// configuration as the agent's software RAID reports it (size_gb MAX, a
// root_device_hint), as Ironic's update_raid_info does: local_gb keeps
// its value for MAX, root_device becomes the hint, capabilities gain the
// level; an emptied configuration drops root_device.
func TestRAIDPropertiesFromAgentResult(t *testing.T) {
	props := map[string]any{"local_gb": float64(100), "capabilities": "boot_mode:uefi"}
	cfg := map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": "MAX", "raid_level": "1", "controller": "software", "is_root_volume": true,
			"root_device_hint": map[string]any{"name": "/dev/md0"}},
		map[string]any{"size_gb": float64(10), "raid_level": "0", "controller": "software"},
	}}
	got := raidProperties(props, cfg)
	if got["local_gb"] != float64(100) {
		t.Errorf("local_gb %v, want the old 100 for a MAX root volume", got["local_gb"])
	}
	if hint, _ := got["root_device"].(map[string]any); hint["name"] != "/dev/md0" {
		t.Errorf("root_device %v", got["root_device"])
	}
	if c, _ := got["capabilities"].(string); !strings.Contains(c, "raid_level:1") || !strings.Contains(c, "boot_mode:uefi") {
		t.Errorf("capabilities %v", got["capabilities"])
	}
	if props["root_device"] != nil {
		t.Error("raidProperties changed its input")
	}
	sized := raidProperties(props, map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": float64(50), "raid_level": "1", "is_root_volume": true}}})
	if sized["local_gb"] != int64(50) {
		t.Errorf("local_gb %v, want 50", sized["local_gb"])
	}
	gone := raidProperties(got, map[string]any{})
	if _, ok := gone["root_device"]; ok {
		t.Errorf("an emptied configuration kept root_device %v", gone["root_device"])
	}
}

// TestMatchNewVolumes: a round's requests are paired with the volumes
// they built by the Id the BMC named, else by name among the volumes new
// since the round began, else in order; a volume that was there before
// is never taken.
func TestMatchNewVolumes(t *testing.T) {
	before := []bmc.Volume{{ID: "1", Name: "data", Controller: "c"}}
	after := []bmc.Volume{before[0], {ID: "A", Name: "data", Controller: "c"}, {ID: "B", Name: "root", Controller: "c"}, {ID: "C", Controller: "c"}}
	specs := []bmc.VolumeSpec{{Name: "root"}, {}, {Name: "named"}}
	round := []submitted{{p: bmc.Pending{}, i: 0}, {p: bmc.Pending{}, i: 1}, {p: bmc.Pending{Volume: "C"}, i: 2}}
	got := matchNew(before, after, round, specs)
	want := []match{{"C", 2}, {"B", 0}, {"A", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("matchNew %v, want %v", got, want)
	}
}

// TestRAIDApplyConfiguration: raid.apply_configuration makes its
// raid_config the node's target and builds it, deleting the volumes
// already there unless told not to (Ironic's default for the step), so
// a second apply leaves only its own volumes.
func TestRAIDApplyConfiguration(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		c := New(db, slog.New(slog.DiscardHandler), Config{Name: "test"})
		n := raidNode(t, db, "fake-hardware", map[string]any{"logical_disks": []any{
			map[string]any{"raid_level": "0", "size_gb": float64(10), "volume_name": "old"},
		}})
		apply := func(cfg map[string]any, args map[string]any) *ent.Node {
			t.Helper()
			if err := db.Node.UpdateOneID(n.ID).SetProvisionState(nodes.StateCleaning).SetReservation("test").Exec(ctx); err != nil {
				t.Fatal(err)
			}
			a := map[string]any{"raid_config": cfg}
			for k, v := range args {
				a[k] = v
			}
			st := []Step{{Interface: "raid", Step: "apply_configuration", Args: a}}
			if p := ArgProblems(st); len(p) > 0 {
				t.Fatalf("arguments refused: %v", p)
			}
			c.runSteps(n, "clean", st, "tester", false)
			got, err := db.Node.Get(ctx, n.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.ProvisionState != nodes.StateManageable || got.LastError != nil {
				t.Fatalf("apply: state %s, last_error %v", got.ProvisionState, lastErr(got))
			}
			if !reflect.DeepEqual(got.TargetRaidConfig, cfg) {
				t.Errorf("target_raid_config %v, want the step's %v", got.TargetRaidConfig, cfg)
			}
			return got
		}
		names := func(n *ent.Node) []string {
			var out []string
			for _, d := range logicalDisks(t, n) {
				out = append(out, d["name"].(string))
			}
			slices.Sort(out)
			return out
		}
		two := map[string]any{"logical_disks": []any{
			map[string]any{"raid_level": "1", "size_gb": float64(100), "is_root_volume": true, "volume_name": "root"},
			map[string]any{"raid_level": "5", "size_gb": "MAX", "volume_name": "data"},
		}}
		if got := names(apply(two, nil)); !slices.Equal(got, []string{"data", "root"}) {
			t.Errorf("first apply built %v", got)
		}
		one := map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": float64(50), "volume_name": "solo"}}}
		if got := names(apply(one, nil)); !slices.Equal(got, []string{"solo"}) {
			t.Errorf("second apply (deleting the others by default) left %v", got)
		}
		extra := map[string]any{"logical_disks": []any{map[string]any{"raid_level": "0", "size_gb": float64(20), "volume_name": "extra"}}}
		if got := names(apply(extra, map[string]any{"delete_existing": false})); !slices.Equal(got, []string{"extra", "solo"}) {
			t.Errorf("apply keeping the others left %v", got)
		}
	})
}

// A step's raid_config is checked as Ironic's RAID schema, naming the
// field it refuses by its place.
func TestRAIDApplyConfigurationArgs(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"logical_disks": [{"raid_level": "1", "size_gb": 10}, {"raid_level": "7", "size_gb": 10}]}`: "argument raid_config logical_disks[1].raid_level must be one of JBOD",
		`{"logical_disks": [{"raid_level": "1"}]}`:                                                    "argument raid_config logical_disks[0].size_gb is required",
		`{"logical_disks": []}`: "argument raid_config logical_disks must be a non-empty list",
		`{"logical_disks": [{"raid_level": "1", "size_gb": 10, "physical_disks": ["a"]}]}`: "argument raid_config logical_disks[0].controller is required when physical_disks is given",
		`{"logical_disks": [{"raid_level": "1", "size_gb": 10, "colour": "red"}]}`:         "argument raid_config logical_disks[0].colour is not a logical disk key",
		`[]`: "argument raid_config must be an object with logical_disks",
	} {
		var v any
		if err := json.Unmarshal([]byte(cfg), &v); err != nil {
			t.Fatal(err)
		}
		p := ArgProblems([]Step{{Interface: "raid", Step: "apply_configuration", Args: map[string]any{"raid_config": v}}})
		if len(p) != 1 || p[0].Part != "args.raid_config" || !strings.HasPrefix(p[0].Msg, want) {
			t.Errorf("%s: problems %v, want %q", cfg, p, want)
		}
	}
}
