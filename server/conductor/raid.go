package conductor

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
// succeeds, so a failed step leaves the last known configuration. It
// returns the power state it left when it rebooted the node.
func (c *Conductor) execRAID(ctx context.Context, n *ent.Node, cl bmc.Client, st Step) (string, error) {
	r, ok := cl.(bmc.RAID)
	if !ok {
		return "", fmt.Errorf("driver %s has no out-of-band RAID", n.Driver)
	}
	// agent RAID runs in a ramdisk Anvil does not have; no-raid is
	// Ironic's way of turning RAID off for the node.
	if impl := (&nodes.View{Node: n}).Interface("raid"); impl != "redfish" && impl != "fake" {
		return "", fmt.Errorf("raid_interface %s does not build RAID out of band; set raid_interface %s", impl, bmc.DefaultInterface(n.Driver, "raid"))
	}
	rr := raidRun{c: c, cl: cl, r: r}
	var created map[string]map[string]any
	switch st.Step {
	case "create_configuration", "apply_configuration":
		apply := st.Step == "apply_configuration"
		if apply {
			// As Ironic's apply_configuration: the step's configuration
			// becomes the node's target before it is built.
			cfg, _ := st.Args["raid_config"].(map[string]any)
			k, err := c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).SetTargetRaidConfig(cfg).Save(ctx)
			if err != nil {
				return "", err
			}
			if k == 0 {
				return "", fmt.Errorf("node %s is no longer reserved by conductor %s", n.UUID, c.cfg.Name)
			}
		}
		// The target may have changed since the run was requested.
		cur, err := c.db.Node.Get(ctx, n.ID)
		if err != nil {
			return "", err
		}
		disks, specs, err := raidPlan(cur, boolArg(st, "create_root_volume", true), boolArg(st, "create_nonroot_volumes", true))
		if err != nil {
			return "", err
		}
		if boolArg(st, "delete_existing", apply) {
			if err := rr.deleteAll(ctx); err != nil {
				return rr.power, err
			}
		}
		if created, err = rr.create(ctx, disks, specs); err != nil {
			return rr.power, err
		}
	case "delete_configuration":
		if err := rr.deleteAll(ctx); err != nil {
			return rr.power, err
		}
	default:
		return "", fmt.Errorf("step %s has no implementation", st.Name())
	}
	vols, err := r.Volumes(ctx)
	if err != nil {
		return rr.power, err
	}
	return rr.power, c.recordRAID(ctx, n, raidConfig(vols, created))
}

// How long RAID tasks are followed. An Immediate one is what sushy's
// blocking create and delete wait for (500 s); one applied at a reset is
// bounded by Ironic's clean_callback_timeout (1800 s), the CLEANWAIT its
// periodic _query_raid_config_status polls in. Anvil follows the task in
// the step itself rather than from a periodic task, so a conductor
// restart ends the wait and fails the step, as any running step.
const (
	raidImmediateWait = 500 * time.Second
	raidResetWait     = 30 * time.Minute
)

// raidRun is one RAID step's work on the BMC: what it rebooted.
type raidRun struct {
	c     *Conductor
	cl    bmc.Client
	r     bmc.RAID
	power string // the power state the last reboot left, if any
}

// submitted is a request the BMC took, for the logical disk at index i.
type submitted struct {
	p bmc.Pending
	i int
}

// create asks for specs' volumes in rounds, as Ironic's
// _submit_create_configuration: on each controller requests go until one
// answers with a task that waits for a reset (a controller takes one
// such request at a time); the node is then rebooted once, every task
// followed, and the rest asked for in the next round. It returns the
// volume Ids it built, each with its target_raid_config entry. A BMC
// that did the work without naming the volume has it found among the
// volumes that appeared in the round, by name, else in order.
func (rr *raidRun) create(ctx context.Context, disks []map[string]any, specs []bmc.VolumeSpec) (map[string]map[string]any, error) {
	created := map[string]map[string]any{}
	var ids []string
	// Said in last_error: the BMC now holds volumes that raid_config
	// does not list until the step runs again.
	failed := func(err error) error {
		if len(ids) == 0 {
			return err
		}
		return fmt.Errorf("%s (after creating volumes %s)", bmc.Summary(err), strings.Join(ids, ", "))
	}
	todo := make([]int, len(specs))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		before, err := rr.r.Volumes(ctx)
		if err != nil {
			return nil, failed(err)
		}
		var round []submitted
		var next []int
		busy := map[string]bool{}
		for _, i := range todo {
			// A spec naming no controller may land on a busy one.
			if busy[specs[i].Controller] || specs[i].Controller == "" && len(busy) > 0 {
				next = append(next, i)
				continue
			}
			p, err := rr.r.CreateVolume(ctx, specs[i])
			if err != nil {
				return nil, failed(err)
			}
			round = append(round, submitted{p, i})
			if p.Reboot() {
				busy[p.Controller] = true
			}
		}
		if err := rr.finish(ctx, round, "creating a RAID volume"); err != nil {
			return nil, failed(err)
		}
		after, err := rr.r.Volumes(ctx)
		if err != nil {
			return nil, failed(err)
		}
		for _, id := range matchNew(before, after, round, specs) {
			created[id.vol] = disks[id.i]
			ids = append(ids, id.vol)
		}
		todo = next
	}
	return created, nil
}

type match struct {
	vol string
	i   int
}

// matchNew pairs the round's requests with the volumes they built: the
// Id the BMC named, else a volume new since before with the name asked
// for, else the next new volume nobody named.
func matchNew(before, after []bmc.Volume, round []submitted, specs []bmc.VolumeSpec) []match {
	old := map[[2]string]bool{}
	for _, v := range before {
		old[[2]string{v.Controller, v.ID}] = true
	}
	var fresh []bmc.Volume
	for _, v := range after {
		if !old[[2]string{v.Controller, v.ID}] {
			fresh = append(fresh, v)
		}
	}
	taken := map[string]bool{}
	var out []match
	var unnamed []submitted
	for _, s := range round {
		if s.p.Volume != "" {
			taken[s.p.Volume] = true
			out = append(out, match{s.p.Volume, s.i})
		}
	}
	for _, s := range round {
		if s.p.Volume != "" {
			continue
		}
		found := false
		for _, v := range fresh {
			if !taken[v.ID] && specs[s.i].Name != "" && v.Name == specs[s.i].Name {
				taken[v.ID], found = true, true
				out = append(out, match{v.ID, s.i})
				break
			}
		}
		if !found {
			unnamed = append(unnamed, s)
		}
	}
	for _, s := range unnamed {
		for _, v := range fresh {
			if !taken[v.ID] {
				taken[v.ID] = true
				out = append(out, match{v.ID, s.i})
				break
			}
		}
	}
	return out
}

// deleteAll removes every volume in rounds, as Ironic's
// _submit_delete_configuration: one request per controller when it waits
// for a reset, then a reboot and the tasks followed, until the BMC lists
// none. A volume still listed after its deletion was done fails the step
// rather than asking again forever.
func (rr *raidRun) deleteAll(ctx context.Context) error {
	gone := map[[2]string]bool{}
	for {
		vols, err := rr.r.Volumes(ctx)
		if err != nil || len(vols) == 0 {
			return err
		}
		for _, v := range vols {
			if gone[[2]string{v.Controller, v.ID}] {
				return &bmc.Error{Op: "deleting RAID volume " + v.ID, Kind: bmc.ErrBMC, Message: "the BMC still lists the volume after its deletion was done"}
			}
		}
		var round []submitted
		busy := map[string]bool{}
		for _, v := range vols {
			if busy[v.Controller] {
				continue
			}
			p, err := rr.r.DeleteVolume(ctx, v)
			if err != nil {
				return err
			}
			round = append(round, submitted{p: p})
			gone[[2]string{v.Controller, v.ID}] = true
			if p.Reboot() {
				busy[v.Controller] = true
			}
		}
		if err := rr.finish(ctx, round, "deleting RAID volumes"); err != nil {
			return err
		}
		if len(busy) == 0 {
			return nil
		}
	}
}

// finish reboots the node when a request of the round waits for a reset
// (Ironic's reboot_to_finish_step), then follows every task to its end.
// A task that fails fails the step with the BMC's words: Ironic logs it
// and records whatever volumes there are, which leaves a clean that
// succeeded without the RAID it was asked for.
func (rr *raidRun) finish(ctx context.Context, round []submitted, op string) error {
	if slices.ContainsFunc(round, func(s submitted) bool { return s.p.Reboot() }) {
		power, err := rr.c.reboot(ctx, rr.cl)
		rr.power = power
		if err != nil {
			return err
		}
	}
	poll := rr.c.cfg.BMC.PowerPoll
	if poll <= 0 {
		poll = time.Second
	}
	for _, s := range round {
		if s.p.Task == "" {
			continue
		}
		wait := raidImmediateWait
		if s.p.Reboot() {
			wait = raidResetWait
		}
		deadline := time.Now().Add(wait)
		for {
			t, err := rr.r.RAIDTask(ctx, s.p.Task)
			if err != nil {
				return err
			}
			if t.Failed() {
				// The task's URI and message are the BMC's own text:
				// operators'.
				msg := "the RAID task ended in " + t.State
				if t.Status != "" {
					msg += " (TaskStatus " + t.Status + ")"
				}
				return &bmc.Error{Op: op, Kind: bmc.ErrBMC, Message: msg, Said: s.p.Task + ": " + t.Message}
			}
			if t.Done() {
				break
			}
			if time.Now().After(deadline) {
				return &bmc.Error{Op: op, Kind: bmc.ErrBMC, Message: fmt.Sprintf("the RAID task was not done (%d%%) after %s", t.Percent, wait), Said: s.p.Task + ": task state " + t.State}
			}
			select {
			case <-rr.c.ctx.Done():
				return errShutdown
			case <-time.After(poll):
			}
		}
	}
	return nil
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
		return nil, fmt.Errorf("node %s has no target RAID configuration. Its owner or an operator must set one (API: PUT /v1/nodes/%s/states/raid)", n.UUID, n.UUID)
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
