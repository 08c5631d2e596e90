package conductor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/nodeinventory"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inspectionrules"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Inspection's states, with Ironic's names.
const (
	StateInspecting    = "inspecting"
	StateInspectFailed = "inspect failed"
)

// RuleInventoryGet guards GET /v1/nodes/{node}/inventory.
const RuleInventoryGet = "baremetal:node:inventory:get"

// minDiskGiB is the smallest drive Ironic's inspection counts as a root
// disk candidate.
const minDiskGiB = 4

// inspect reads the machine's hardware through its BMC (Ironic's
// out-of-band inspection), sets the scheduling properties from it and
// stores the whole inventory; the node ends manageable, or inspect
// failed with the BMC's reason.
func (c *Conductor) inspect(n *ent.Node, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ev := history.Event{NodeID: n.ID, Type: "inspect", User: who, Conductor: c.cfg.Name}
	inv, err := c.readInventory(ctx, n)
	if err == nil {
		err = c.saveInventory(ctx, n, inv)
	}
	var portNote string
	if err == nil {
		portNote, err = c.ensurePorts(ctx, n, inv)
	}
	if err == nil {
		err = inspectionrules.Apply(ctx, c.db, c.log, n.ID, inv)
	}
	upd := c.db.Node.UpdateOneID(n.ID).ClearTargetProvisionState().SetProvisionUpdatedAt(time.Now())
	// The timestamps move as Ironic's node update moves them: finished
	// (and started cleared) on success, started cleared on failure.
	if err != nil {
		upd.SetProvisionState(StateInspectFailed).SetLastError("Inspection failed: " + bmc.Summary(err)).ClearInspectionStartedAt()
		ev.Failed("Inspection failed: ", err)
	} else {
		upd.SetProvisionState(nodes.StateManageable).SetInspectionFinishedAt(time.Now()).ClearInspectionStartedAt()
		ev.Message = fmt.Sprintf("Inspected: %d CPUs (%s), %d MiB RAM, %d disks, %d NICs; node is manageable",
			inv.CPU.Count, inv.CPU.Architecture, inv.Memory.PhysicalMB, len(inv.Disks), len(inv.Interfaces)) + portNote
	}
	if err := upd.Exec(ctx); err != nil {
		c.log.Error("recording inspection", "node", n.UUID, "err", err)
	}
	_ = history.Record(ctx, c.db.Client, ev)
}

// PortMaker gives a node a port for a MAC unless it has one: the port
// service is one.
type PortMaker interface {
	EnsurePort(ctx context.Context, nodeUUID, mac string) (*ent.Port, bool, error)
}

// MakePorts makes inspection create a port for each NIC it finds, as
// Ironic's inspection "ports" hook does. Call it before Start.
func (c *Conductor) MakePorts(p PortMaker) { c.ports = p }

// ensurePorts creates the ports of the NICs inspection found, before the
// rules run (as Ironic's hooks do). A MAC another node's port has is
// noted in the node's history and skipped, as Ironic skips it; any other
// failure fails the inspection. The note says what was done, for the
// history.
func (c *Conductor) ensurePorts(ctx context.Context, n *ent.Node, inv *bmc.Inventory) (string, error) {
	if c.ports == nil {
		return "", nil
	}
	var made, taken []string
	for _, nic := range inv.Interfaces {
		_, created, err := c.ports.EnsurePort(ctx, n.UUID, nic.MACAddress)
		switch {
		case errs.Status(err) == 409:
			taken = append(taken, nic.MACAddress)
		case err != nil:
			return "", fmt.Errorf("creating the port of %s: %w", nic.MACAddress, err)
		case created:
			made = append(made, nic.MACAddress)
		}
	}
	var note string
	if len(made) > 0 {
		note += "; ports created for " + strings.Join(made, ", ")
	}
	if len(taken) > 0 {
		note += "; another node has a port for " + strings.Join(taken, ", ")
	}
	return note, nil
}

func (c *Conductor) readInventory(ctx context.Context, n *ent.Node) (*bmc.Inventory, error) {
	cl, err := c.client(n)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ins, ok := cl.(bmc.Inspector)
	if !ok {
		return nil, fmt.Errorf("driver %s cannot inspect out of band", n.Driver)
	}
	inv, err := ins.Inventory(ctx)
	c.noteBMC(ctx, n, err)
	if err != nil {
		return nil, err
	}
	// The BIOS cache follows the machine, as after a BIOS step.
	if err := c.cacheHardware(ctx, n, cl); err != nil {
		return nil, err
	}
	return inv, nil
}

// refreshCaches re-reads a node's BIOS settings and firmware versions
// before and after a clean or service run, as Ironic's node_update_cache
// does at both ends: what changed outside Anvil (an update the BMC ran
// itself, a setting made in its own interface) shows in /bios and
// /firmware. A failure is only logged and never fails the run, as in
// Ironic. fake-hardware is skipped: its values change only through
// Anvil's own steps, which write the caches themselves, and a thousand
// fake nodes cleaning at once would pay two transactions each for
// nothing.
func (c *Conductor) refreshCaches(ctx context.Context, n *ent.Node, kind string) {
	if (kind != "clean" && kind != "service") || bmc.Canonical(n.Driver) == "fake-hardware" {
		return
	}
	cl, err := c.client(n)
	if err == nil {
		err = c.cacheHardware(ctx, n, cl)
		c.noteBMC(ctx, n, err)
		cl.Close()
	}
	if err != nil {
		c.log.Warn("refreshing BIOS settings and firmware around "+kind, "node", n.UUID, "err", err)
	}
}

// cacheHardware reads the BIOS settings and firmware versions the BMC
// reports into Anvil's caches (GET /v1/nodes/{node}/bios and /firmware),
// as Ironic's node_update_cache does; a BMC without either is skipped.
func (c *Conductor) cacheHardware(ctx context.Context, n *ent.Node, cl bmc.Client) error {
	if b, ok := cl.(bmc.BIOS); ok {
		if err := c.cacheBIOS(ctx, n.ID, b); err != nil && !errors.Is(err, bmc.ErrUnsupported) {
			return err
		}
	}
	if fw, ok := cl.(bmc.Firmware); ok {
		versions, ids, err := readFirmware(ctx, fw)
		if err == nil {
			err = c.cacheFirmware(ctx, n.ID, versions, ids, nil)
		}
		if err != nil && !errors.Is(err, bmc.ErrUnsupported) {
			return err
		}
	}
	return nil
}

// inspectedProperties merges what inspection found into the node's
// properties as Ironic's inspection sets them; other properties and
// capabilities stay.
func inspectedProperties(props map[string]any, inv *bmc.Inventory) map[string]any {
	out := maps.Clone(props)
	if out == nil {
		out = map[string]any{}
	}
	if inv.CPU.Count > 0 {
		out["cpus"] = inv.CPU.Count
	}
	if inv.CPU.Architecture != "" {
		out["cpu_arch"] = inv.CPU.Architecture
	}
	if inv.Memory.PhysicalMB > 0 {
		out["memory_mb"] = inv.Memory.PhysicalMB
	}
	// local_gb is the largest disk less one GiB, as Ironic reports it,
	// leaving room for the partition table.
	var largest int64
	for _, d := range inv.Disks {
		if d.Size >= minDiskGiB<<30 && d.Size > largest {
			largest = d.Size
		}
	}
	if largest > 0 {
		out["local_gb"] = int(largest>>30) - 1
	}
	if inv.Boot.CurrentBootMode != "" {
		out["capabilities"] = withCapability(out["capabilities"], "boot_mode", inv.Boot.CurrentBootMode)
	}
	return out
}

// withCapability sets one key of capabilities, which Ironic keeps as
// "k:v,k:v" (a map from some clients is kept a map).
func withCapability(caps any, key, value string) any {
	if m, ok := caps.(map[string]any); ok {
		m = maps.Clone(m)
		m[key] = value
		return m
	}
	s, _ := caps.(string)
	var kept []string
	for _, kv := range strings.Split(s, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), ":"); k != "" && k != key {
			kept = append(kept, strings.TrimSpace(kv))
		}
	}
	return strings.Join(append(kept, key+":"+value), ",")
}

func (c *Conductor) saveInventory(ctx context.Context, n *ent.Node, inv *bmc.Inventory) error {
	raw, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		cur, err := tx.Node.Get(ctx, n.ID)
		if err != nil {
			return err
		}
		if err := tx.Node.UpdateOneID(n.ID).SetProperties(inspectedProperties(cur.Properties, inv)).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NodeInventory.Delete().Where(nodeinventory.NodeID(n.ID)).Exec(ctx); err != nil {
			return err
		}
		return tx.NodeInventory.Create().SetNodeID(n.ID).SetInventory(doc).SetPluginData(map[string]any{}).Exec(ctx)
	})
}

// Inventory is the node's last inspected inventory; a node never
// inspected is a 404 in Ironic's words.
func (o *Ops) Inventory(ctx context.Context, ident string) (*ent.NodeInventory, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleInventoryGet)
	if err != nil {
		return nil, err
	}
	inv, err := o.C.db.NodeInventory.Query().Where(nodeinventory.NodeID(n.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("Node inventory record for node %s could not be found.", n.UUID)
	}
	return inv, err
}
