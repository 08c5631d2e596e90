package conductor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/GehirnInc/crypt"
	_ "github.com/GehirnInc/crypt/sha512_crypt" // registers SHA512 for crypt.New

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// Rescue's states, spelled as Ironic spells them.
const (
	StateRescuing       = "rescuing"
	StateRescueWait     = "rescue wait"
	StateRescue         = "rescue"
	StateRescueFailed   = "rescue failed"
	StateUnrescuing     = "unrescuing"
	StateUnrescueFailed = "unrescue failed"
)

// hashedRescueKey is where instance_info keeps the rescue password, only
// ever hashed (and masked like every *password key).
const hashedRescueKey = "hashed_rescue_password"

// maxRescuePassword bounds the password a tenant sets.
const maxRescuePassword = 255

// rescuePhase names the states an agent boot for rescue moves through.
var rescuePhase = phase{kind: "rescue", running: StateRescuing, wait: StateRescueWait, failed: StateRescueFailed, done: StateRescue}

// checkRescue validates a rescue or unrescue request against the node:
// rescue needs a password, nothing else takes one, and the node's rescue
// interface must be able to rescue (fake, or agent with a ramdisk to
// boot).
func checkRescue(n *ent.Node, m ramdisk.Media, target, password string) error {
	if target != "rescue" {
		if password != "" {
			return errs.BadRequest("rescue_password", "'rescue_password' is only permitted when setting the node's provision state to rescue.")
		}
		if target != "unrescue" {
			return nil
		}
	} else if strings.TrimSpace(password) == "" || len(password) > maxRescuePassword {
		return errs.BadRequest("rescue_password", "A non-empty 'rescue_password' of at most %d characters is required when setting target provision state to rescue.", maxRescuePassword)
	}
	switch iface := (&nodes.View{Node: n}).Interface("rescue"); iface {
	case "fake":
		return nil
	case "agent":
		if _, err := agentBoot(rescueMedia(n, m), m); err != nil {
			return errs.BadRequest("driver_info", "Cannot rescue node %s: the agent rescue boots the ramdisk, and %v", n.UUID, err)
		}
		return nil
	default:
		return errs.BadRequest("rescue_interface", "Cannot rescue node %s: its rescue interface %s does not rescue; set rescue_interface agent", n.UUID, iface)
	}
}

// rescueMedia is the node as its rescue boots: the rescue ramdisk where
// driver_info names one (rescue_iso, or rescue_kernel and
// rescue_ramdisk) or the server has a default rescue kernel and ramdisk
// (m), else the deploy ramdisk, since ironic-python-agent serves both.
func rescueMedia(n *ent.Node, m ramdisk.Media) *ent.Node {
	di := cloneInfo(n.DriverInfo)
	if iso, _ := di["rescue_iso"].(string); iso != "" {
		di["deploy_iso"] = iso
	}
	k, _ := m.Get(n, "rescue_kernel")
	r, _ := m.Get(n, "rescue_ramdisk")
	if k != "" && r != "" {
		di["deploy_kernel"], di["deploy_ramdisk"] = k, r
	}
	out := *n
	out.DriverInfo = di
	return &out
}

// hashRescuePassword hashes as crypt(3) SHA-512 ($6$), which the agent
// writes for the rescue user as is (Ironic's rescue_password_hash_algorithm
// sha512): the password itself never leaves Anvil.
func hashRescuePassword(pw string) (string, error) {
	return crypt.SHA512.New().Generate([]byte(pw), nil)
}

// rescue boots the agent and hands it the hashed password; the machine
// then runs the rescue ramdisk, reachable by the tenant, until unrescue.
// fake-hardware rescues at once.
func (c *Conductor) rescue(n *ent.Node, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ev := history.Event{NodeID: n.ID, Type: "rescue", User: who, Conductor: c.cfg.Name}
	err := c.rescueMachine(ctx, n)
	upd := c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).ClearTargetProvisionState().
		SetProvisionUpdatedAt(time.Now()).ClearReservation()
	if err != nil {
		c.endAgent(ctx, n, rescuePhase, "rescue failed")
		msg := "Rescue failed: " + bmc.Summary(err)
		ev.Failed("Rescue failed: ", err)
		upd.SetProvisionState(StateRescueFailed).SetLastError(msg)
		if n.PowerState != nil {
			upd.SetPowerState(*n.PowerState)
		}
	} else {
		ev.Message = "Rescued: the machine runs the rescue ramdisk"
		upd.SetProvisionState(StateRescue).ClearLastError()
	}
	if err := c.durably(ctx, func() error { return upd.Exec(ctx) }); err != nil {
		c.log.Error("recording rescue", "node", n.UUID, "err", err)
		c.unlock(n.ID)
	}
	_ = history.Record(ctx, c.db.Client, ev)
}

func (c *Conductor) rescueMachine(ctx context.Context, n *ent.Node) error {
	if (&nodes.View{Node: n}).Interface("rescue") == "fake" {
		return nil
	}
	hash, _ := n.InstanceInfo[hashedRescueKey].(string)
	rn := rescueMedia(n, c.cfg.Agent.Media)
	r, err := c.agentFor(ctx, rn, rescuePhase)
	n.DriverInternalInfo = rn.DriverInternalInfo
	if err != nil {
		return err
	}
	if _, err := r.cl.FinalizeRescue(ctx, hash); err != nil {
		return err
	}
	// The agent stops serving its API once the password is written, as
	// Ironic's agent does so a tenant network never reaches it: forget
	// it, and eject its CD (the ramdisk runs from memory).
	c.agents.take(n.ID)
	if r.how == bootVMedia {
		if cl, err := c.client(n); err == nil {
			err = bmc.EjectISO(ctx, cl)
			c.noteBMC(ctx, n, err)
			cl.Close()
		}
	}
	return c.durably(ctx, func() error { return ramdisk.Wipe(ctx, c.db, n) })
}

// unrescue boots the instance again: power off, the disk as persistent
// boot device, power on; the hashed password is forgotten.
func (c *Conductor) unrescue(n *ent.Node, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ev := history.Event{NodeID: n.ID, Type: "rescue", User: who, Conductor: c.cfg.Name}
	final, err := c.bootInstanceAgain(ctx, n)
	inst := cloneInfo(n.InstanceInfo)
	delete(inst, hashedRescueKey)
	upd := c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).ClearTargetProvisionState().
		SetProvisionUpdatedAt(time.Now()).ClearReservation().SetInstanceInfo(inst)
	if err != nil {
		ev.Failed("Unrescue failed: ", err)
		upd.SetProvisionState(StateUnrescueFailed).SetLastError("Unrescue failed: " + bmc.Summary(err))
	} else {
		ev.Message = fmt.Sprintf("Unrescued: the instance boots again; the BMC reports %s", final)
		upd.SetProvisionState(nodes.StateActive).ClearLastError()
		if final != "" {
			upd.SetPowerState(final)
		}
	}
	if err := c.durably(ctx, func() error { return upd.Exec(ctx) }); err != nil {
		c.log.Error("recording unrescue", "node", n.UUID, "err", err)
		c.unlock(n.ID)
	}
	_ = history.Record(ctx, c.db.Client, ev)
}

func (c *Conductor) bootInstanceAgain(ctx context.Context, n *ent.Node) (string, error) {
	if (&nodes.View{Node: n}).Interface("rescue") == "fake" {
		return "", nil
	}
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	if _, err := bmc.Power(ctx, cl, bmc.PowerOff, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll); err != nil {
		c.noteBMC(ctx, n, err)
		return "", err
	}
	if how, _ := agentBoot(rescueMedia(n, c.cfg.Agent.Media), c.cfg.Agent.Media); how == bootVMedia {
		if err := bmc.EjectISO(ctx, cl); err != nil {
			c.noteBMC(ctx, n, err)
			return "", err
		}
	}
	if err := cl.SetBootDevice(ctx, "disk", true, BootMode(n)); err != nil {
		c.noteBMC(ctx, n, err)
		return "", err
	}
	final, err := bmc.Power(ctx, cl, bmc.PowerOn, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	return final, err
}
