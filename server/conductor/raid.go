package conductor

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// execRAID builds or removes the node's logical disks through its BMC
// and records what the BMC then reports in raid_config, as Ironic's
// redfish RAID interface does. raid_config is written only when the step
// succeeds, so a failed step leaves the last known configuration.
func (c *Conductor) execRAID(ctx context.Context, n *ent.Node, cl bmc.Client, st Step) error {
	r, ok := cl.(bmc.RAID)
	if !ok {
		return fmt.Errorf("driver %s has no out-of-band RAID", n.Driver)
	}
	// agent RAID runs in a ramdisk Anvil does not have; no-raid is
	// Ironic's way of turning RAID off for the node.
	if impl := (&nodes.View{Node: n}).Interface("raid"); impl != "redfish" && impl != "fake" {
		return fmt.Errorf("raid_interface %s does not build RAID out of band; set raid_interface %s", impl, bmc.DefaultInterface(n.Driver, "raid"))
	}
	var created map[string]map[string]any
	switch st.Step {
	case "create_configuration":
		// The target may have changed since the run was requested.
		cur, err := c.db.Node.Get(ctx, n.ID)
		if err != nil {
			return err
		}
		disks, specs, err := raidPlan(cur, boolArg(st, "create_root_volume", true), boolArg(st, "create_nonroot_volumes", true))
		if err != nil {
			return err
		}
		if boolArg(st, "delete_existing", false) {
			if err := deleteVolumes(ctx, r); err != nil {
				return err
			}
		}
		created = map[string]map[string]any{}
		var ids []string
		for i, spec := range specs {
			id, err := r.CreateVolume(ctx, spec)
			if err != nil && len(ids) > 0 {
				// Said in last_error: the BMC now holds volumes that
				// raid_config does not list until the step runs again.
				return fmt.Errorf("%s (after creating volumes %s)", bmc.Summary(err), strings.Join(ids, ", "))
			}
			if err != nil {
				return err
			}
			ids = append(ids, id)
			created[id] = disks[i]
		}
	case "delete_configuration":
		if err := deleteVolumes(ctx, r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("step %s has no implementation", st.Name())
	}
	vols, err := r.Volumes(ctx)
	if err != nil {
		return err
	}
	return c.recordRAID(ctx, n, raidConfig(vols, created))
}

// recordRAID stores cfg as the node's raid_config, with the properties
// Ironic's update_raid_info derives from its root volume, and says what
// it holds in the node's history. An empty configuration (a delete) also
// drops properties.root_device, as Ironic's agent RAID does.
func (c *Conductor) recordRAID(ctx context.Context, n *ent.Node, cfg map[string]any) error {
	if err := store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		cur, err := tx.Node.Get(ctx, n.ID)
		if err != nil {
			return err
		}
		return tx.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).
			SetRaidConfig(cfg).SetProperties(raidProperties(cur.Properties, cfg)).Exec(ctx)
	}); err != nil {
		return err
	}
	var names []string
	disks, _ := cfg["logical_disks"].([]any)
	for _, d := range disks {
		m, _ := d.(map[string]any)
		name := m["name"]
		if name == nil {
			name = m["volume_name"] // the agent's software RAID names it so
		}
		names = append(names, fmt.Sprintf("%v (RAID %v, %v GiB)", name, m["raid_level"], m["size_gb"]))
	}
	msg := "RAID configuration: no logical disks"
	if len(names) > 0 {
		msg = "RAID configuration: " + strings.Join(names, ", ")
	}
	return history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: "raid", Conductor: c.cfg.Name, Message: msg})
}

func deleteVolumes(ctx context.Context, r bmc.RAID) error {
	vols, err := r.Volumes(ctx)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if err := r.DeleteVolume(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

func boolArg(st Step, name string, def bool) bool {
	if b, ok := st.Args[name].(bool); ok {
		return b
	}
	return def
}

// raidPlan reads the logical disks to build from the node's
// target_raid_config, filtered as Ironic's filter_target_raid_config
// does, and checks every one before any is built.
func raidPlan(n *ent.Node, root, nonroot bool) ([]map[string]any, []bmc.VolumeSpec, error) {
	disks, err := filterTarget(n, root, nonroot)
	if err != nil {
		return nil, nil, err
	}
	specs := make([]bmc.VolumeSpec, len(disks))
	for i, d := range disks {
		s := bmc.VolumeSpec{}
		s.Level, _ = d["raid_level"].(string)
		if gb, ok := d["size_gb"].(float64); ok {
			s.SizeGB = int64(gb)
		}
		s.Name, _ = d["volume_name"].(string)
		s.Controller, _ = d["controller"].(string)
		if f, ok := d["number_of_physical_disks"].(float64); ok {
			s.Disks = int(f)
		}
		pd, _ := d["physical_disks"].([]any)
		for _, p := range pd {
			id, ok := p.(string)
			if !ok {
				return nil, nil, fmt.Errorf("target_raid_config logical_disks[%d].physical_disks must name drive Ids for out-of-band RAID, not %v", i, p)
			}
			s.Drives = append(s.Drives, id)
		}
		if err := bmc.CheckVolumeSpec(s); err != nil {
			return nil, nil, fmt.Errorf("target_raid_config logical_disks[%d]: %w", i, err)
		}
		specs[i] = s
	}
	return disks, specs, nil
}

// filterTarget is the node's target_raid_config without the root or the
// other volumes when a step skips them, as Ironic's
// filter_target_raid_config; nothing left is an error.
func filterTarget(n *ent.Node, root, nonroot bool) ([]map[string]any, error) {
	list, _ := n.TargetRaidConfig["logical_disks"].([]any)
	if len(list) == 0 {
		return nil, fmt.Errorf("node %s has no target RAID configuration; set one with PUT /v1/nodes/%s/states/raid", n.UUID, n.UUID)
	}
	var disks []map[string]any
	for _, x := range list {
		d, _ := x.(map[string]any)
		if isRoot, _ := d["is_root_volume"].(bool); isRoot && root || !isRoot && nonroot {
			disks = append(disks, d)
		}
	}
	if len(disks) == 0 {
		var skipped []string
		if !root {
			skipped = append(skipped, "skipping root volume")
		}
		if !nonroot {
			skipped = append(skipped, "skipping non-root volumes")
		}
		return nil, fmt.Errorf("node %s has empty target RAID configuration after %s", n.UUID, strings.Join(skipped, " and "))
	}
	return disks, nil
}

// raidConfig is raid_config as Ironic's update_raid_config writes it:
// every volume with a RAID level, by the BMC's id, name and controller.
// A volume this step built keeps the level and root flag asked for
// when the BMC reports no level of its own.
func raidConfig(vols []bmc.Volume, created map[string]map[string]any) map[string]any {
	disks := []any{}
	for _, v := range vols {
		asked := created[v.ID]
		level := v.Level
		if level == "" {
			level, _ = asked["raid_level"].(string)
		}
		if level == "" {
			continue
		}
		d := map[string]any{"id": v.ID, "name": v.Name, "controller": v.Controller, "raid_level": level, "size_gb": v.SizeBytes >> 30}
		if root, _ := asked["is_root_volume"].(bool); root {
			d["is_root_volume"] = true
		}
		disks = append(disks, d)
	}
	return map[string]any{"logical_disks": disks, "last_updated": time.Now().UTC().Format("2006-01-02 15:04:05.000000")}
}

// raidProperties is what Ironic's update_raid_info makes of a root
// volume: local_gb is its size (unless MAX), root_device its
// root_device_hint, and capabilities gain its raid_level, so scheduling
// and deployment see the disk the instance lands on. An empty
// configuration drops root_device, as Ironic's agent RAID delete does.
func raidProperties(props, cfg map[string]any) map[string]any {
	out := maps.Clone(props)
	if out == nil {
		out = map[string]any{}
	}
	disks, _ := cfg["logical_disks"].([]any)
	if len(cfg) == 0 {
		delete(out, "root_device")
	}
	for _, x := range disks {
		d, _ := x.(map[string]any)
		if root, _ := d["is_root_volume"].(bool); !root {
			continue
		}
		if size, ok := d["size_gb"].(float64); ok {
			out["local_gb"] = int64(size)
		} else if size, ok := d["size_gb"].(int64); ok {
			out["local_gb"] = size
		}
		if hint, ok := d["root_device_hint"]; ok {
			out["root_device"] = hint
		}
		level, _ := d["raid_level"].(string)
		out["capabilities"] = withCapability(out["capabilities"], "raid_level", level)
	}
	return out
}
