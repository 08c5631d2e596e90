package conductor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/store"
)

// Deployment states, spelled as Ironic spells them (ironic/common/states.py).
const (
	StateDeploying    = "deploying"
	StateDeployWait   = "wait call-back"
	StateDeployFailed = "deploy failed"
	StateDeployHold   = "deploy hold"
	StateDeleting     = "deleting"
)

// deployVerbs start a deployment; undeployVerbs tear one down. "deploy"
// and "undeploy" are Ironic's 1.73 aliases of "active" and "deleted".
var (
	deployVerbs   = []string{"active", "deploy", "rebuild"}
	undeployVerbs = []string{"deleted", "undeploy"}
)

// DeployStep is a deploy step as a request gives it: Ironic's deploy step
// schema requires a priority, which orders it among the driver's steps.
type DeployStep struct {
	Step
	Priority *int `json:"priority"`
}

// deployPriority is the priority of the driver's own deploy.deploy step,
// as Ironic's deploy interfaces give it.
const deployPriority = 100

// deployPlan validates a deploy request against the node and returns the
// steps to run: the driver's deploy.deploy among the requested steps in
// descending priority, priority 0 leaving a step out as Ironic does.
// Whatever the node's driver cannot do is a 400 here, before anything
// is changed.
func deployPlan(n *ent.Node, media ramdisk.Media, r ProvisionRequest) ([]Step, error) {
	if err := deployFits(n, media); err != nil {
		return nil, err
	}
	type ranked struct {
		s   Step
		pri int
	}
	plan := []ranked{{Step{Interface: "deploy", Step: "deploy"}, deployPriority}}
	for _, d := range agentDeployPlan[deployMode(n)] {
		plan = append(plan, ranked{d.Step, *d.Priority})
	}
	if len(r.DeploySteps) > 0 {
		user := make([]Step, len(r.DeploySteps))
		for i, d := range r.DeploySteps {
			if d.Priority == nil {
				return nil, errs.BadRequest(fmt.Sprintf("deploy_steps[%d].priority", i), "deploy_steps[%d]: priority is required", i)
			}
			if *d.Priority < 0 {
				return nil, errs.BadRequest(fmt.Sprintf("deploy_steps[%d].priority", i), "deploy_steps[%d]: priority must be 0 or more", i)
			}
			user[i] = d.Step
		}
		if err := ValidateSteps("deploy_steps", user); err != nil {
			return nil, err
		}
		if err := stepsFitDriver("deploy_steps", user, n); err != nil {
			return nil, err
		}
		// Ironic's conductor checks deploy steps against the driver before
		// it accepts the deployment, so this is a 400, not a failed run.
		if why := unsupported(n, user); why != "" {
			return nil, errs.BadRequest("deploy_steps", "%s", why)
		}
		// Only an agent deploy has the agent up around deploy.deploy;
		// booting one into a deployed ISO or fake machine would undo it.
		if m := deployMode(n); m != modeDirect && m != modeCustomAgent {
			if name := firstInBand(n, user); name != "" {
				return nil, errs.BadRequest("deploy_steps", "Step %s runs in the ramdisk agent, which the %s deploy of node %s does not boot: use deploy_interface direct (with instance_info.image_source) or custom-agent", name, m, n.UUID)
			}
		}
		for i, s := range user {
			if p := *r.DeploySteps[i].Priority; p > 0 {
				plan = append(plan, ranked{s, p})
			}
		}
	}
	slices.SortStableFunc(plan, func(a, b ranked) int { return cmp.Compare(b.pri, a.pri) })
	out := make([]Step, len(plan))
	for i, p := range plan {
		out[i] = p.s
	}
	return out, nil
}

// deployFits says, from the node alone, whether its driver has a way to
// put an instance on it: fake-hardware deploys at once; the ramdisk
// deploy boots an ISO from virtual media on redfish; the direct and
// custom-agent deploys boot the ramdisk agent, and direct has it write
// image_source to disk (checked before the agent, so a node without an
// image hears about the image first).
func deployFits(n *ent.Node, m ramdisk.Media) error {
	mode := deployMode(n)
	if mode == modeFake {
		return nil
	}
	if mode == modeDirect {
		if src, _ := n.InstanceInfo["image_source"].(string); src == "" {
			return errs.BadRequest("instance_info.image_source", "Cannot deploy node %s: the direct deploy has the ramdisk agent write instance_info.image_source to disk, and it is not set; to boot an ISO instead, use deploy_interface ramdisk with instance_info.boot_iso", n.UUID)
		}
	}
	if mode == modeDirect || mode == modeCustomAgent {
		if _, err := agentBoot(n, m); err != nil {
			field := "instance_info.image_source"
			if mode == modeCustomAgent {
				field = "deploy_interface"
			}
			if be, ok := errors.AsType[*bootSetupError](err); ok {
				// What the node lacks to boot the agent, such as a
				// bmclib provider that cannot set the boot device.
				field = be.field
			}
			return errs.BadRequest(field, "Cannot deploy node %s: the %s deploy boots the ramdisk agent, and %v", n.UUID, mode, err)
		}
		if _, err := bmc.Open(n.Driver, n.UUID, n.DriverInfo, bmc.Options{}); err != nil {
			return errs.BadRequest("driver_info", "Cannot deploy node %s: %v", n.UUID, err)
		}
		if mode == modeDirect {
			return imageFits(n)
		}
		return nil
	}
	// The ramdisk deploy of an ISO: Anvil boots it by virtual media only
	// (Ironic's ipxe and pxe would chain-load it over the network, which
	// Anvil does not serve), so the node must say so in its boot
	// interface.
	if bmc.Canonical(n.Driver) != "redfish" {
		return errs.BadRequest("deploy_interface", "Cannot deploy node %s: the ramdisk deploy boots instance_info.boot_iso by virtual media, which driver %s has not: use deploy_interface direct with instance_info.image_source for the ramdisk agent to write", n.UUID, n.Driver)
	}
	if impl := (&nodes.View{Node: n}).Interface("boot"); impl != "redfish-virtual-media" {
		return errs.BadRequest("boot_interface", "Cannot deploy node %s: the ramdisk deploy boots instance_info.boot_iso by virtual media, and boot_interface is %s: set boot_interface redfish-virtual-media", n.UUID, impl)
	}
	if iso, _ := n.InstanceInfo["boot_iso"].(string); iso == "" {
		return errs.BadRequest("instance_info.boot_iso", "Cannot deploy node %s: the ramdisk deploy boots an ISO by virtual media: set instance_info.boot_iso to the ISO's URL, or use deploy_interface direct with instance_info.image_source for the ramdisk agent to write", n.UUID)
	}
	if _, err := bmc.Open(n.Driver, n.UUID, n.DriverInfo, bmc.Options{}); err != nil {
		return errs.BadRequest("driver_info", "Cannot deploy node %s: %v", n.UUID, err)
	}
	return nil
}

// deploy moves the node to deploying under its lock, stores the config
// drive in instance_info as Ironic does, and runs the plan.
func (c *Conductor) deploy(ctx context.Context, n *ent.Node, tr transition, r ProvisionRequest, steps []Step, who string) error {
	info := cloneInfo(n.DriverInternalInfo)
	delete(info, abortRequestedField)
	delete(info, "pending_steps")
	inst := cloneInfo(n.InstanceInfo)
	if r.ConfigDrive != nil {
		inst["configdrive"] = r.ConfigDrive
	}
	info, setFirst, firstEvents, started := c.firstStep(n, "deploy", steps, who, info)
	err := c.claim(ctx, n, r.Target, tr.from, true, func(u *ent.NodeUpdate) {
		u.SetProvisionState(tr.via).SetTargetProvisionState(tr.to).SetProvisionUpdatedAt(time.Now()).ClearLastError().
			SetDriverInternalInfo(info).SetInstanceInfo(inst)
		setFirst(u)
	}, write{events: firstEvents})
	if err != nil {
		return err
	}
	// The node as the claim left it; the run's last write releases it.
	claimed := *n
	claimed.ProvisionState, claimed.DriverInternalInfo, claimed.InstanceInfo, claimed.Reservation = tr.via, info, inst, &c.cfg.Name
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		c.runSteps(&claimed, "deploy", steps, who, started)
	}()
	return nil
}

// deployImage is the driver's deploy.deploy step: it puts the instance
// in place and powers the node on into it.
func (c *Conductor) deployImage(ctx context.Context, n *ent.Node, ph phase) (string, error) {
	if m := deployMode(n); m == modeDirect || m == modeCustomAgent {
		return c.deployAgent(ctx, n, ph)
	}
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	if bmc.Canonical(n.Driver) == "redfish" {
		iso, _ := n.InstanceInfo["boot_iso"].(string)
		err := bmc.BootFromISO(ctx, cl, iso, BootMode(n))
		c.noteBMC(ctx, n, err)
		if err != nil {
			return "", err
		}
	}
	final, err := bmc.Power(ctx, cl, bmc.PowerOn, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	return final, err
}

// undeploy tears the instance down as Ironic's do_node_tear_down does:
// deleting (eject the ISO, power off, forget the instance), then
// cleaning, then available.
func (c *Conductor) undeploy(ctx context.Context, n *ent.Node, tr transition, who string) error {
	err := c.claim(ctx, n, "deleted", tr.from, true, func(u *ent.NodeUpdate) {
		u.SetProvisionState(StateDeleting).SetTargetProvisionState(tr.to).SetProvisionUpdatedAt(time.Now()).ClearLastError()
	}, write{})
	if err != nil {
		return err
	}
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		c.tearDown(n, who)
	}()
	return nil
}

func (c *Conductor) tearDown(n *ent.Node, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ev := history.Event{NodeID: n.ID, Type: "deploy", User: who, Conductor: c.cfg.Name}
	final, err := c.removeInstance(ctx, n)
	if err != nil {
		// Ironic's provisioning error handler: a tear down that fails
		// leaves the node in error, from which it may be undeployed again.
		ev.Failed("Tear down failed: ", err)
		upd := c.db.Node.UpdateOneID(n.ID).SetProvisionState(nodes.StateError).ClearTargetProvisionState().
			SetProvisionUpdatedAt(time.Now()).SetLastError("Tear down failed: " + bmc.Summary(err))
		if err := upd.Exec(ctx); err != nil {
			c.log.Error("recording tear down failure", "node", n.UUID, "err", err)
		}
		_ = history.Record(ctx, c.db.Client, ev)
		c.unlock(n.ID)
		return
	}
	info := cloneInfo(n.DriverInternalInfo)
	for k := range info {
		if strings.HasPrefix(k, "deploy_step") {
			delete(info, k)
		}
	}
	// The automated cleaning that follows is no tenant's run: a failure
	// of it must not be recovered as the last runbook someone ran.
	delete(info, InternalLastRun)
	ev.Message = "Instance torn down; the BMC reports " + final + "; cleaning"
	if n.ConsoleEnabled {
		// Ironic stops the console here and starts it again at the next
		// deploy; Anvil disables it, so a console one tenant enabled
		// never opens for the next (README, Console).
		c.closeConsole(n.ID)
		for _, k := range []string{internalConsolePort, internalConsoleURL, internalConsoleHost} {
			delete(info, k)
		}
		ev.Message += "; console disabled"
	}
	// The instance is gone, and with it the node's allocation, as
	// Ironic's do_node_tear_down destroys it: the cleaned node is free
	// for the next request.
	var released string
	var allocOwner *string
	err = store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		if err := tx.Node.UpdateOneID(n.ID).SetProvisionState(nodes.StateCleaning).SetTargetProvisionState(nodes.StateAvailable).
			SetProvisionUpdatedAt(time.Now()).SetPowerState(final).SetInstanceInfo(map[string]any{}).ClearInstanceUUID().
			SetDriverInternalInfo(info).SetConsoleEnabled(false).Exec(ctx); err != nil {
			return err
		}
		a, err := tx.Allocation.Query().Where(allocation.NodeID(n.ID)).Only(ctx)
		if ent.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		released, allocOwner = allocations.Label(a), a.Owner
		return tx.Allocation.DeleteOne(a).Exec(ctx)
	})
	if err != nil {
		c.log.Error("recording tear down", "node", n.UUID, "err", err)
		c.unlock(n.ID)
		return
	}
	if released != "" {
		ev.Message += "; allocation " + released + " released"
	}
	_ = history.Record(ctx, c.db.Client, ev)
	// The cleaning run's last write releases the node.
	cleaned := *n
	cleaned.ProvisionState, cleaned.DriverInternalInfo, cleaned.InstanceInfo, cleaned.PowerState, cleaned.Reservation =
		nodes.StateCleaning, info, map[string]any{}, &final, &c.cfg.Name
	// The wipe's record names the allocation torn down and its project,
	// which reads the record after it no longer sees the node.
	var alloc *string
	if released != "" {
		alloc = &released
	}
	c.wipes.begin(&cleaned, c.WipePolicy(n), alloc, allocOwner)
	c.runSteps(&cleaned, "automated clean", c.automatedCleanSteps(n), who, false)
}

// removeInstance ejects a virtual-media ISO and powers the node off,
// returning the power state the BMC reports.
func (c *Conductor) removeInstance(ctx context.Context, n *ent.Node) (string, error) {
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	if bmc.Canonical(n.Driver) == "redfish" {
		if iso, _ := n.InstanceInfo["boot_iso"].(string); iso != "" {
			err := bmc.EjectISO(ctx, cl)
			c.noteBMC(ctx, n, err)
			if err != nil {
				return "", err
			}
		}
	}
	final, err := bmc.Power(ctx, cl, bmc.PowerOff, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	return final, err
}
