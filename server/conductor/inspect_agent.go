package conductor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeinventory"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inspectionrules"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/store"
)

// StateInspectWait is where a node waits for its agent's inventory.
const StateInspectWait = ramdisk.StateInspectWait

// inspectsInBand tells whether n's inspection boots the ramdisk agent
// (the agent inspect interface, metal3's default) rather than reading
// the BMC.
func inspectsInBand(n *ent.Node) bool {
	return (&nodes.View{Node: n}).Interface("inspect") == "agent"
}

// agentBootError is agentBoot's refusal as a 400 naming what is missing,
// for requests that need the agent.
func agentBootError(n *ent.Node, m ramdisk.Media, what string) error {
	_, err := agentBoot(n, m)
	if err == nil {
		return nil
	}
	field := "boot_interface"
	if be, ok := errors.AsType[*bootSetupError](err); ok {
		field = be.field
	}
	return errs.BadRequest(field, "Node %s cannot %s: %v", n.UUID, what, err)
}

// bmcLookupAddresses are the addresses an agent's inventory may name
// n's BMC by: its driver_info address and, for a name, what it resolves
// to now (Ironic caches them the same way when inspection starts).
func bmcLookupAddresses(ctx context.Context, n *ent.Node) []any {
	var host string
	switch bmc.Canonical(n.Driver) {
	case "redfish":
		if u, err := bmc.ParseRedfishAddress(fmt.Sprint(n.DriverInfo["redfish_address"])); err == nil {
			host = u.Hostname()
		}
	case "ipmi":
		host, _ = n.DriverInfo["ipmi_address"].(string)
	}
	host = strings.Trim(strings.TrimSpace(host), "[]")
	if host == "" {
		return nil
	}
	out := []any{strings.ToLower(host)}
	if _, err := netip.ParseAddr(host); err == nil {
		return out
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, _ := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	for _, a := range addrs {
		out = append(out, a.Unmap().String())
	}
	return out
}

// inspectInBand is the agent inspect interface (Ironic's in-band
// inspection): the machine boots the ramdisk agent while the node waits
// in inspect wait; the agent posts its inventory to
// /v1/continue_inspection (it need not heartbeat), which stores it; the
// conductor then fills the properties, creates the ports and runs the
// inspection rules as the out-of-band inspection does, powers the
// machine off and ejects the agent's CD. The node ends manageable, or
// inspect failed when no inventory comes within InspectWaitTimeout of
// the start (heartbeats do not extend it, as in Ironic) or an abort
// ends the wait.
func (c *Conductor) inspectInBand(n *ent.Node, who string) {
	ctx := context.WithoutCancel(c.ctx)
	deadline := time.Now().Add(c.cfg.Agent.InspectWaitTimeout)
	ev := history.Event{NodeID: n.ID, Type: "inspect", User: who, Conductor: c.cfg.Name}
	how, err := agentBoot(n, c.cfg.Agent.Media)
	booted := false
	if err == nil {
		err = c.startInspectWait(ctx, n, how)
	}
	if err == nil {
		booted = true
		err = c.bootIntoAgent(ctx, n, how)
	}
	var doc map[string]any
	if err == nil {
		doc, err = c.awaitInventory(ctx, n, deadline)
	}
	var inv *bmc.Inventory
	var portNote string
	if err == nil {
		// Processing the data is inspecting again, as in Ironic.
		err = c.setRunState(ctx, n, StateInspecting)
	}
	if err == nil {
		inv, err = inventoryOf(doc)
	}
	if err == nil {
		err = c.setInspectedProperties(ctx, n, inv)
	}
	if err == nil {
		portNote, err = c.ensurePorts(ctx, n, inv)
	}
	if err == nil {
		err = inspectionrules.Apply(ctx, c.db, c.log, n.ID, doc)
	}
	if booted {
		c.powerOffAfterAgent(ctx, n, how)
	}
	upd := c.db.Node.UpdateOneID(n.ID).ClearTargetProvisionState().SetProvisionUpdatedAt(time.Now())
	if n.PowerState != nil {
		upd.SetPowerState(*n.PowerState)
	}
	switch {
	case errors.Is(err, errAborted):
		// Ironic's words for an aborted inspection.
		upd.SetProvisionState(StateInspectFailed).SetLastError("Inspection was aborted by request.").ClearInspectionStartedAt()
		ev.Severity, ev.Message = history.Error, "Inspection was aborted by request."
	case errors.Is(err, errShutdown):
		upd.SetProvisionState(StateInspectFailed).SetLastError(fmt.Sprintf("Conductor %s shut down during inspection; inspect again.", c.cfg.Name)).ClearInspectionStartedAt()
		ev.Failed("Inspection failed: ", err)
	case err != nil:
		upd.SetProvisionState(StateInspectFailed).SetLastError("Inspection failed: " + bmc.Summary(err)).ClearInspectionStartedAt()
		ev.Failed("Inspection failed: ", err)
	default:
		upd.SetProvisionState(nodes.StateManageable).SetInspectionFinishedAt(time.Now()).ClearInspectionStartedAt()
		ev.Message = fmt.Sprintf("Inspected in band by the ramdisk agent: %d CPUs (%s), %d MiB RAM, %d disks, %d NICs; node is manageable",
			inv.CPU.Count, inv.CPU.Architecture, inv.Memory.PhysicalMB, len(inv.Disks), len(inv.Interfaces)) + portNote
	}
	if err := c.durably(ctx, func() error { return upd.Exec(ctx) }); err != nil {
		c.log.Error("recording inspection", "node", n.UUID, "err", err)
	}
	// Out of inspect wait, no lookup can issue a token any more: what
	// the agent left is forgotten now, and so is a served abort.
	if err := c.durably(ctx, func() error {
		return ramdisk.RemoveKeys(ctx, c.db, n, append([]string{ramdisk.KeyLookupBMC, ramdisk.KeyInspectionReceived, abortRequestedField}, ramdisk.AgentKeys...)...)
	}); err != nil {
		c.log.Error("forgetting the inspection's agent", "node", n.UUID, "err", err)
	}
	_ = history.Record(ctx, c.db.Client, ev)
}

// startInspectWait forgets any earlier agent and inventory mark, keeps
// the BMC's addresses for the inventory's lookup, and moves the node to
// inspect wait before the machine boots: an agent that posts its
// inventory at once must find the node waiting.
func (c *Conductor) startInspectWait(ctx context.Context, n *ent.Node, how string) error {
	err := c.durably(ctx, func() error {
		return ramdisk.RemoveKeys(ctx, c.db, n, append([]string{ramdisk.KeyInspectionReceived}, ramdisk.AgentKeys...)...)
	})
	if err != nil {
		return err
	}
	// The inventory's callback URL carries the token: it exists before
	// the node waits.
	if err := c.pregenerateToken(ctx, n, how, true); err != nil {
		return err
	}
	info := cloneInfo(n.DriverInternalInfo)
	if addrs := bmcLookupAddresses(ctx, n); len(addrs) > 0 {
		info[ramdisk.KeyLookupBMC] = addrs
	} else {
		delete(info, ramdisk.KeyLookupBMC)
	}
	err = c.durably(ctx, func() error {
		return c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).SetDriverInternalInfo(info).
			SetProvisionState(StateInspectWait).SetProvisionUpdatedAt(time.Now()).Exec(ctx)
	})
	if err == nil {
		// The boot that follows reads the state: an ISO built for an
		// inspection tells the agent where to post its inventory.
		n.DriverInternalInfo, n.ProvisionState = info, StateInspectWait
	}
	return err
}

// awaitInventory waits for continue_inspection to store the agent's
// inventory, and returns it; it gives up at deadline or when an abort
// is asked for. Only the inventory ends the wait early: a heartbeat does
// not touch what it reads.
func (c *Conductor) awaitInventory(ctx context.Context, n *ent.Node, deadline time.Time) (map[string]any, error) {
	t := time.NewTicker(abortPoll * 5)
	defer t.Stop()
	for {
		cur, err := c.db.Node.Query().Where(node.ID(n.ID)).Select(node.FieldDriverInternalInfo).Only(ctx)
		if err != nil && !c.shuttingDown() && !store.Unreachable(err) {
			return nil, err
		}
		if cur != nil && cur.DriverInternalInfo[ramdisk.KeyInspectionReceived] != nil {
			inv, err := c.db.NodeInventory.Query().Where(nodeinventory.NodeID(n.ID)).Only(ctx)
			if err != nil {
				return nil, err
			}
			return inv.Inventory, nil
		}
		if cur != nil && cur.DriverInternalInfo[abortRequestedField] == true {
			return nil, errAborted
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: the ramdisk agent did not post its inventory to /v1/continue_inspection within %s of the start (--inspect-wait-timeout)",
				errAgentTimeout, c.cfg.Agent.InspectWaitTimeout)
		}
		select {
		case <-c.ctx.Done():
			return nil, errShutdown
		case <-t.C:
		}
	}
}

// inventoryOf reads what the properties and ports come from out of the
// agent's inventory, which has the same shape as Anvil's out-of-band one
// and more.
func inventoryOf(doc map[string]any) (*bmc.Inventory, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	inv := &bmc.Inventory{}
	if err := json.Unmarshal(raw, inv); err != nil {
		return nil, fmt.Errorf("the agent's inventory is malformed: %w", err)
	}
	return inv, nil
}

// setInspectedProperties merges what inspection found into the node's
// properties; the inventory itself is stored as the agent sent it.
func (c *Conductor) setInspectedProperties(ctx context.Context, n *ent.Node, inv *bmc.Inventory) error {
	return c.durably(ctx, func() error {
		return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
			cur, err := tx.Node.Get(ctx, n.ID)
			if err != nil {
				return err
			}
			return tx.Node.UpdateOneID(n.ID).SetProperties(inspectedProperties(cur.Properties, inv)).Exec(ctx)
		})
	})
}

// powerOffAfterAgent ends the agent's boot: the CD ejected, the machine
// off (unless disable_power_off), as Ironic powers a machine off after
// in-band inspection. A failure is a warning in the node's history: the
// inspection's outcome stands.
func (c *Conductor) powerOffAfterAgent(ctx context.Context, n *ent.Node, how string) {
	defer c.dropBootISO(n)
	cl, err := c.client(n)
	if err == nil {
		if how == bootVMedia {
			err = bmc.EjectISO(ctx, cl)
			c.noteBMC(ctx, n, err)
		}
		if !n.DisablePowerOff {
			final, perr := bmc.Power(ctx, cl, bmc.PowerOff, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
			c.noteBMC(ctx, n, perr)
			if perr == nil {
				n.PowerState = &final
			}
			err = errors.Join(err, perr)
		}
		cl.Close()
	}
	if err != nil {
		c.log.Warn("powering off after inspection", "node", n.UUID, "err", err)
		_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Warning, Type: "inspect", Conductor: c.cfg.Name,
			Message: "Could not power the machine off after its ramdisk agent: " + bmc.Summary(err)})
	}
}
