package conductor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// States beyond those the node service knows.
const (
	StateAdopting    = "adopting"
	StateCleanHold   = "clean hold"
	StateServiceHold = "service hold"
)

// Rules this package enforces, named as Ironic names them.
const (
	RuleSetPower        = "baremetal:node:set_power_state"
	RuleGetBootDevice   = "baremetal:node:get_boot_device"
	RuleSetBootDevice   = "baremetal:node:set_boot_device"
	RuleGetStates       = "baremetal:node:get_states"
	RuleProvision       = "baremetal:node:set_provision_state"
	RuleCleanSteps      = "baremetal:node:set_provision_state:clean_steps"
	RuleServiceSteps    = "baremetal:node:set_provision_state:service_steps"
	RuleDeploySteps     = "baremetal:node:set_provision_state:deploy_steps"
	RuleConductorGet    = "baremetal:conductor:get"
	abortRequestedField = "abort_requested"
)

// Ops are the node operations the API and the portal call; each checks
// its rule for the principal in the context.
type Ops struct {
	C        *Conductor
	Nodes    *nodes.Service
	Guard    *guard.Guard
	Runbooks Resolver
	// Inbox, when set, carries a tenant's "Ask the owner to look" to the
	// owner as a thread (recover.go).
	Inbox *inbox.Service
}

// Resolver turns a runbook reference into the runbook the caller may run
// on a node (its owner decides which runbooks it takes) carrying the
// given traits.
type Resolver interface {
	Resolve(ctx context.Context, ident string, n *ent.Node, nodeTraits []string) (*Runbook, error)
}

// Runbook is a runbook as one run takes it: its name (for the node's
// history, which outlives a renamed or deleted runbook), steps and
// disable_ramdisk, and whether its publisher lets those who run it
// recover a failed run (Recover).
type Runbook struct {
	Name           string
	Steps          []Step
	DisableRamdisk bool
	Retryable      bool
}

// RuleProvisionRunbook lets a caller clean or service with a runbook
// without the general provision rule.
const RuleProvisionRunbook = "baremetal:node:set_provision_state:runbook"

// InternalLastRun is the driver_internal_info key recording the last
// clean or service run a node started: its target, the runbook's name
// ("" for explicit steps) and the steps, as {interface, step, args}.
const InternalLastRun = "last_run"

// claim moves a node out of one of the states from with one conditional
// UPDATE that also takes its lock when hold is set, so no other request can
// slip between the state check and the lock: the node's state is the one
// the transition was decided on, or the request is a 409. The writes in
// also (the audit row, history) commit with it, and the commit is grouped
// with other nodes' step writes (see committer): accepting a run costs a
// share of one commit, not two of its own.
func (c *Conductor) claim(ctx context.Context, n *ent.Node, verb string, from []string, hold bool, set func(u *ent.NodeUpdate), w write) error {
	upd := func(tx *ent.Client) error {
		u := tx.Node.Update().Where(node.ID(n.ID), node.ReservationIsNil(), node.ProvisionStateIn(from...))
		if hold {
			u.SetReservation(c.cfg.Name)
		}
		set(u)
		cnt, err := u.Save(ctx)
		if err == nil && cnt == 0 {
			return errClaimLost
		}
		return err
	}
	w.updates = append([]func(tx *ent.Client) error{upd}, w.updates...)
	return store.RetryLocked(ctx, func() error {
		err := c.commits.do(ctx, c.db, w)
		if !errors.Is(err, errClaimLost) {
			return err
		}
		cur, err := c.db.Node.Get(ctx, n.ID)
		if err != nil {
			return err
		}
		// Unlocked now and still in a state the claim takes: a lock
		// (a console being enabled, say) was held at the UPDATE and has
		// gone since, so the claim is tried again as for a held lock.
		if cur.Reservation != nil || slices.Contains(from, cur.ProvisionState) {
			return lockedErr(cur)
		}
		return errs.Conflict("The requested action %q can not be performed on node %s while it is in state %q.", verb, n.UUID, cur.ProvisionState)
	})
}

// errClaimLost rolls back a claim whose node moved or was locked first.
var errClaimLost = errors.New("claim lost")

func lockedErr(n *ent.Node) error {
	holder := "another operation"
	if n.Reservation != nil {
		holder = "host " + *n.Reservation
	}
	return errs.NodeLocked(n.UUID, holder)
}

func actor(ctx context.Context) string {
	if p := policies.PrincipalFrom(ctx); p != nil {
		return p.User
	}
	return ""
}

// SetPower starts a power change with the conductor's power timeout.
func (o *Ops) SetPower(ctx context.Context, ident, target string) error {
	return o.SetPowerWithin(ctx, ident, target, 0)
}

// SetPowerWithin starts a power change and returns once the node is
// locked and target_power_state set; the conductor then sends it and
// waits up to timeout (0: the configured power timeout) for the BMC to
// report the result. Only then is power_state written.
func (o *Ops) SetPowerWithin(ctx context.Context, ident, target string, timeout time.Duration) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetPower)
	if err != nil {
		return err
	}
	// "was" is the power state the node had when asked, so the audit log
	// can show the change as before and after.
	defer func() {
		o.Guard.Done(ctx, RuleSetPower, "node", n.UUID, err, map[string]any{"target": target, "was": n.PowerState})
	}()
	if !slices.Contains(bmc.PowerTargets, target) {
		return errs.BadRequest("target", "target %q is not one of %s", target, strings.Join(bmc.PowerTargets, ", "))
	}
	// Ironic's conductor refuses a state the power interface does not
	// list (InvalidParameterValue, a 400 before any action).
	if !slices.Contains(bmc.PowerTargetsOf(n.Driver, n.DriverInfo), target) {
		return errs.BadRequest("target", "The %s does not support the power state, %s.", bmc.DriverName(n.Driver, n.DriverInfo), target)
	}
	if slices.Contains([]string{nodes.StateCleaning, nodes.StateCleanWait, nodes.StateServicing, nodes.StateServiceWait, nodes.StateVerifying, StateAdopting}, n.ProvisionState) {
		return errs.Conflict("Node %s is %s; power actions wait until it finishes.", n.UUID, n.ProvisionState)
	}
	if err := powerOffAllowed(n, target); err != nil {
		return err
	}
	// Ironic validates the power interface before it acts: driver_info
	// stored without what the BMC needs (an ipmi node may be enrolled
	// without ipmi_address) is a 400 now, not a failed action.
	if err := bmc.Validate(n.Driver, n.DriverInfo); err != nil {
		field := "driver_info"
		if fe, ok := errors.AsType[*bmc.FieldError](err); ok {
			field = fe.Field
		}
		return errs.BadRequest(field, "%s", err.Error())
	}
	c := o.C
	if err := c.lock(ctx, n.ID); err != nil {
		return err
	}
	began := time.Now()
	// updated_at marks when the action began, as Ironic's save does: the
	// portal counts the node's busy time from it.
	if err := c.db.Node.UpdateOneID(n.ID).SetTargetPowerState(target).SetUpdatedAt(began).Exec(ctx); err != nil {
		c.unlock(n.ID)
		return err
	}
	who := actor(ctx)
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer c.unlock(n.ID)
		// The action finishes even if the conductor is stopping: a
		// half-done power action is worse than a late one. Only a cancel
		// request (CancelPower) cuts it short.
		bctx, cancel := context.WithCancelCause(context.WithoutCancel(c.ctx))
		defer cancel(nil)
		go c.watchPowerCancel(bctx, n.ID, began, cancel)
		// A BMC that does not answer is tried again; the node's page shows
		// the try under way from this record, as for a step's BMC call.
		record := func(r any) {
			if err := c.setInternal(context.WithoutCancel(bctx), c.db.Client, n.ID, c.cfg.Name, InternalBMCRetry, r); err != nil {
				c.log.Warn("record a BMC retry", "node", n.UUID, "err", err)
			}
		}
		retried := false
		final, err := c.power(bmc.OnRetry(bctx, func(try, of int, timeout time.Duration) {
			retried = true
			record(BMCRetry{Step: target, Try: try, Of: of, Timeout: timeout.Seconds(), At: time.Now().UTC()})
		}), n, target, timeout)
		// The records are written without the cancel, which has happened
		// by now if it is to.
		rctx := context.WithoutCancel(bctx)
		upd := c.db.Node.UpdateOneID(n.ID).ClearTargetPowerState().SetUpdatedAt(time.Now())
		ev := history.Event{NodeID: n.ID, Type: "power", User: who, Conductor: c.cfg.Name}
		cancelled, asked := c.powerCancelOf(rctx, n.ID)
		switch {
		case errors.Is(context.Cause(bctx), errPowerCancelled):
			upd.SetLastError(PowerCancelled(target, cancelled.By))
			ev.Message = PowerCancelled(target, cancelled.By)
		case err != nil:
			upd.SetLastError(powerFailed(target, bmc.Summary(err)))
			ev.Failed(powerFailed(target, ""), err)
		default:
			upd.SetPowerState(final).ClearLastError()
			ev.Message = strings.ToUpper(target[:1]) + target[1:] + " done; the BMC reports " + final
		}
		// The result waits out a database restart: target_power_state
		// left set would keep power sync away from the node for good.
		if err := c.durably(rctx, func() error { return upd.Exec(rctx) }); err != nil {
			c.log.Error("recording power result", "node", n.UUID, "err", err)
		}
		// Cleared once target_power_state is, so no new request lands
		// after; a request that came too late to stop the action goes too.
		if retried {
			record(nil)
		}
		if asked {
			if err := c.setInternal(rctx, c.db.Client, n.ID, c.cfg.Name, InternalPowerCancel, nil); err != nil {
				c.log.Warn("clear a power cancel request", "node", n.UUID, "err", err)
			}
		}
		_ = c.durably(rctx, func() error { return history.Record(rctx, c.db.Client, ev) })
	}()
	return nil
}

// powerFailed words a failed power action. last_error gets the kind of
// failure only (bmc.Summary), without the BMC's address or dial error,
// since any reader of the node may see it; history keeps the detail
// apart (history.Event.Failed).
func powerFailed(target, why string) string {
	return strings.ToUpper(target[:1]) + target[1:] + " failed: " + why
}

// power runs a power action to its end: the BMC reports the state, or an
// error says why not.
func (c *Conductor) power(ctx context.Context, n *ent.Node, target string, timeout time.Duration) (string, error) {
	if err := powerOffAllowed(n, target); err != nil {
		return "", err
	}
	if timeout <= 0 {
		timeout = c.cfg.PowerTimeout
	}
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	final, err := bmc.Power(ctx, cl, target, timeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	return final, err
}

// BootDevice reads the node's next boot device from its BMC.
func (o *Ops) BootDevice(ctx context.Context, ident string) (bmc.Boot, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetBootDevice)
	if err != nil {
		return bmc.Boot{}, err
	}
	cl, err := o.C.client(n)
	if err != nil {
		return bmc.Boot{}, errs.BadRequest("driver_info", "%v", err)
	}
	defer cl.Close()
	b, err := cl.BootDevice(ctx)
	o.C.noteBMC(ctx, n, err)
	if errors.Is(err, bmc.ErrUnsupported) {
		return bmc.Boot{}, errs.NotAcceptable("driver %s cannot read the boot device back", n.Driver)
	}
	if err != nil {
		return bmc.Boot{}, bmcError(ctx, err)
	}
	return b, nil
}

// bmcError is a 503 for a BMC failure: the whole story for system-scoped
// callers, only the kind of failure for project-scoped ones, who could
// otherwise probe the management network through dial errors.
func bmcError(ctx context.Context, err error) error {
	if p := policies.PrincipalFrom(ctx); p == nil || p.System {
		return errs.Unavailable("%v", err)
	}
	return errs.Unavailable("%s", bmc.Summary(err))
}

// SetBootDevice sets the next boot device under the node's lock. The
// device must be one the node's driver can set (a 400 before any BMC is
// contacted); the boot mode stays the machine's unless the node asks for
// one in its capabilities, as Ironic reads them.
func (o *Ops) SetBootDevice(ctx context.Context, ident, device string, persistent bool) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetBootDevice)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleSetBootDevice, "node", n.UUID, err, map[string]any{"boot_device": device, "persistent": persistent})
	}()
	if err := bootDeviceFits("boot_device", device, n); err != nil {
		return err
	}
	if err := o.C.lock(ctx, n.ID); err != nil {
		return err
	}
	defer o.C.unlock(n.ID)
	cl, err := o.C.client(n)
	if err != nil {
		return errs.BadRequest("driver_info", "%v", err)
	}
	defer cl.Close()
	err = cl.SetBootDevice(ctx, device, persistent, BootMode(n))
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return bmcFailure(ctx, n, err)
	}
	return history.Record(ctx, o.C.db.Client, history.Event{NodeID: n.ID, Type: "management", User: actor(ctx), Conductor: o.C.cfg.Name,
		Message: fmt.Sprintf("Boot device set to %s (persistent: %v)", device, persistent)})
}

// BootMode is the boot mode a node asks for, read as Ironic reads it:
// instance_info's capabilities first, then properties' capabilities
// ("boot_mode:uefi,secure_boot:true" or an object); "" keeps the
// machine's own.
func BootMode(n *ent.Node) string {
	for _, m := range []map[string]any{n.InstanceInfo, n.Properties} {
		switch caps := m["capabilities"].(type) {
		case map[string]any:
			if v, _ := caps["boot_mode"].(string); v == "uefi" || v == "bios" {
				return v
			}
		case string:
			for _, kv := range strings.Split(caps, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(kv), ":")
				if k == "boot_mode" && (v == "uefi" || v == "bios") {
					return v
				}
			}
		}
	}
	return ""
}

// ProvisionRequest is a PUT to states/provision.
type ProvisionRequest struct {
	Target         string
	Runbook        string
	CleanSteps     []Step
	ServiceSteps   []Step
	DisableRamdisk bool
	DeploySteps    []DeployStep
	ConfigDrive    any    // stored in instance_info on deploy and rebuild
	RescuePassword string // rescue only; stored hashed
	DeployAbort    bool   // the request's version lets abort end a deploy wait (1.110)
	InspectAbort   bool   // the request's version lets abort end an inspect wait (1.41)
}

// transition says which verbs apply in which states and where they lead.
type transition struct {
	from []string
	via  string // state while the conductor works; "" for an immediate change
	to   string
}

var transitions = map[string]transition{
	"manage":  {[]string{nodes.StateEnroll, nodes.StateAvailable, nodes.StateCleanFailed, StateInspectFailed}, nodes.StateVerifying, nodes.StateManageable},
	"inspect": {[]string{nodes.StateManageable, StateInspectFailed}, StateInspecting, nodes.StateManageable},
	"provide": {[]string{nodes.StateManageable}, "", nodes.StateAvailable},
	"adopt":   {[]string{nodes.StateManageable}, StateAdopting, nodes.StateActive},
	"clean":   {[]string{nodes.StateManageable}, nodes.StateCleaning, nodes.StateManageable},
	"service": {[]string{nodes.StateActive, nodes.StateServiceFailed}, nodes.StateServicing, nodes.StateActive},
	"abort":   {[]string{nodes.StateCleaning, nodes.StateCleanWait, StateCleanHold, nodes.StateServicing, nodes.StateServiceWait, StateServiceHold, nodes.StateServiceFailed, StateDeployWait, StateDeployHold, StateInspectWait}, "", ""},
	"unhold":  {[]string{StateCleanHold, StateServiceHold, StateDeployHold}, "", ""},
	// Deployment (deploy.go), as Ironic's state machine allows it.
	"active":   {[]string{nodes.StateAvailable, StateDeployFailed}, StateDeploying, nodes.StateActive},
	"deploy":   {[]string{nodes.StateAvailable, StateDeployFailed}, StateDeploying, nodes.StateActive},
	"rebuild":  {[]string{nodes.StateActive, StateDeployFailed, nodes.StateError}, StateDeploying, nodes.StateActive},
	"deleted":  {[]string{nodes.StateActive, StateDeployFailed, StateDeployWait, nodes.StateError, StateRescue, StateRescueFailed, StateUnrescueFailed}, StateDeleting, nodes.StateAvailable},
	"undeploy": {[]string{nodes.StateActive, StateDeployFailed, StateDeployWait, nodes.StateError, StateRescue, StateRescueFailed, StateUnrescueFailed}, StateDeleting, nodes.StateAvailable},
	// Rescue (rescue.go), as Ironic's state machine allows it.
	"rescue":   {[]string{nodes.StateActive, StateRescue, StateRescueFailed, StateUnrescueFailed}, StateRescuing, StateRescue},
	"unrescue": {[]string{StateRescue, StateRescueFailed, StateUnrescueFailed}, StateUnrescuing, nodes.StateActive},
}

// powerOffAllowed refuses to power off a node with disable_power_off
// (1.95: a machine whose BMC or workload must never lose power), in the
// API and in every step, as Ironic's API and conductor both refuse it.
func powerOffAllowed(n *ent.Node, target string) error {
	if n.DisablePowerOff && (target == bmc.PowerOff || target == bmc.SoftPowerOff) {
		return errs.Conflict("Failed to set node power state to %s: node %s has disable_power_off set.", target, n.UUID)
	}
	return nil
}

// Verbs lists the provision verbs, for error messages.
func Verbs() []string {
	out := make([]string, 0, len(transitions))
	for v := range transitions {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// ProvisionRules are the rules a provision request needs, decided from
// its shape alone so that they are checked before its content: a runbook
// needs the runbook rule, explicit steps the steps rule besides the
// provision rule, and deploy_steps (whatever the target: a request that
// carries them is refused or runs them) the deploy steps rule.
func ProvisionRules(target string, runbook, steps, deploySteps bool) []string {
	var out []string
	switch {
	case runbook:
		out = []string{RuleProvisionRunbook}
	case steps && target == "service":
		out = []string{RuleProvision, RuleServiceSteps}
	case steps:
		out = []string{RuleProvision, RuleCleanSteps}
	default:
		out = []string{RuleProvision}
	}
	if deploySteps {
		out = append(out, RuleDeploySteps)
	}
	return out
}

// Provision checks the caller may see the node (404) and make this kind of
// request (403), validates the request completely (400), then starts it.
// An impossible transition is a 409 naming the current state.
func (o *Ops) Provision(ctx context.Context, ident string, r ProvisionRequest) error {
	rules := ProvisionRules(r.Target, r.Runbook != "", len(r.CleanSteps) > 0 || len(r.ServiceSteps) > 0, len(r.DeploySteps) > 0)
	n, err := o.Nodes.Authorized(ctx, ident, rules...)
	if err != nil {
		return err
	}
	return o.provision(ctx, n, r, false)
}

// leaseSafe asks LeaseSafe about the steps the caller brought (a
// deployment's own steps are Anvil's), auditing a refusal.
func (o *Ops) leaseSafe(ctx context.Context, n *ent.Node, r ProvisionRequest, steps []Step) error {
	route := StepRoute(r.Target + "_steps")
	switch {
	case r.Runbook != "":
		route = RouteRunbook
	case slices.Contains(deployVerbs, r.Target):
		route, steps = RouteDeploySteps, make([]Step, len(r.DeploySteps))
		for i, d := range r.DeploySteps {
			steps[i] = d.Step
		}
	}
	err := LeaseSafe(ctx, route, steps)
	if err != nil {
		o.Guard.Done(ctx, RuleProvision, "node", n.UUID, err, map[string]any{"target": r.Target, "steps": stepsToAny(steps)})
	}
	return err
}

// inMaintenance names what Ironic refuses on a node in maintenance: manual
// cleaning, servicing, rescue and unrescue in its conductor, deploy and
// rebuild in its API, and ending failed servicing. Manage and provide
// stay allowed (allow_provisioning_in_maintenance), so an operator can
// move a failed node on before taking it out of maintenance.
func inMaintenance(n *ent.Node, target string) error {
	op := map[string]string{"clean": "cleaning", "service": "service", "rescue": "rescuing", "unrescue": "unrescuing",
		"active": "provisioning", "deploy": "provisioning", "rebuild": "provisioning"}[target]
	if target == "abort" && n.ProvisionState == nodes.StateServiceFailed {
		op = "abort"
	}
	if !n.Maintenance || op == "" {
		return nil
	}
	return errs.BadRequest("maintenance", "The %s operation can't be performed on node %s because it's in maintenance mode.", op, n.UUID)
}

// provision is Provision on an authorized node. recovering is a tenant's
// recovery of a failed run (Recover): it may act on a node its failure
// put into maintenance, which the claim takes out of maintenance, and a
// retried clean starts from clean failed.
func (o *Ops) provision(ctx context.Context, n *ent.Node, r ProvisionRequest, recovering bool) (err error) {
	switch {
	case n.Protected && slices.Contains([]string{"deleted", "undeploy", "rebuild"}, r.Target):
		return nodes.ErrProtected(n.UUID)
	case n.Retired && r.Target == "provide":
		return errs.BadRequest("retired", "The providing operation can't be performed on node %s because it is retired.", n.UUID)
	}
	tr, ok := transitions[r.Target]
	if !ok {
		return errs.BadRequest("target", "target %q is not one of %s", r.Target, strings.Join(Verbs(), ", "))
	}
	if recovering && r.Target == "clean" {
		// Back to manageable and cleaning again in one claim: nobody
		// can take the node in between.
		tr.from = []string{nodes.StateCleanFailed}
	}
	var steps []Step
	var runbook string
	switch {
	case r.Runbook != "":
		if r.Target != "clean" && r.Target != "service" {
			return errs.BadRequest("runbook", "a runbook goes with target clean or service")
		}
		if len(r.CleanSteps) > 0 || len(r.ServiceSteps) > 0 {
			return errs.BadRequest("runbook", "give a runbook or explicit steps, not both")
		}
		if o.Runbooks == nil {
			return errs.BadRequest("runbook", "runbooks are not available")
		}
	case r.Target == "clean":
		if len(r.ServiceSteps) > 0 {
			return errs.BadRequest("service_steps", "service_steps go with target service, not clean")
		}
		if err := ValidateSteps("clean_steps", r.CleanSteps); err != nil {
			return err
		}
		steps = r.CleanSteps
	case r.Target == "service":
		if len(r.CleanSteps) > 0 {
			return errs.BadRequest("clean_steps", "clean_steps go with target clean, not service")
		}
		if err := ValidateSteps("service_steps", r.ServiceSteps); err != nil {
			return err
		}
		steps = r.ServiceSteps
	case slices.Contains(deployVerbs, r.Target):
		if len(r.CleanSteps) > 0 || len(r.ServiceSteps) > 0 {
			return errs.BadRequest("clean_steps", "clean_steps and service_steps go only with target clean or service")
		}
		if steps, err = deployPlan(n, o.C.cfg.Agent.Media, r); err != nil {
			return err
		}
	default:
		if len(r.CleanSteps) > 0 || len(r.ServiceSteps) > 0 {
			return errs.BadRequest("clean_steps", "steps go only with target clean or service")
		}
	}
	if r.Runbook != "" {
		traits, err := o.Nodes.Traits(ctx, n.UUID)
		if err != nil {
			return err
		}
		rb, err := o.Runbooks.Resolve(ctx, r.Runbook, n, traits)
		if err != nil {
			return err
		}
		steps, r.DisableRamdisk, runbook = rb.Steps, rb.DisableRamdisk, rb.Name
	}
	if err := o.leaseSafe(ctx, n, r, steps); err != nil {
		return err
	}
	// In-band inspection boots the agent: a node that cannot is refused
	// now, not after a boot that cannot happen.
	// Ironic's no-inspect fails the inspect request's validation: a 400
	// before anything starts.
	if impl := (&nodes.View{Node: n}).Interface("inspect"); r.Target == "inspect" && strings.HasPrefix(impl, "no-") {
		return errs.BadRequest("inspect_interface", "Driver %s does not support inspect (disabled or not implemented).", n.Driver)
	}
	if r.Target == "inspect" && inspectsInBand(n) {
		if err := agentBootError(n, o.C.cfg.Agent.Media, "be inspected by the ramdisk agent (inspect_interface agent)"); err != nil {
			return err
		}
	}
	if err := stepsFitDriver(r.Target+"_steps", steps, n); err != nil {
		return err
	}
	if err := o.C.firmwareFits(r.Target+"_steps", steps, n); err != nil {
		return err
	}
	if err := checkRescue(n, o.C.cfg.Agent.Media, r.Target, r.RescuePassword); err != nil {
		return err
	}
	if name := firstInBand(n, steps); name != "" && r.DisableRamdisk {
		return errs.BadRequest("disable_ramdisk", "Step %s runs in the ramdisk agent, which disable_ramdisk turns off: remove the step or run without disable_ramdisk.", name)
	}
	// provide cleans between tenants: with an agent to boot, the
	// machine's disks are wiped before it is available (automated
	// cleaning, as Ironic's provide does).
	run := r.Target
	if r.Target == "provide" {
		if auto := o.C.automatedCleanSteps(n); len(auto) > 0 {
			steps, run = auto, "automated clean"
			tr = transition{tr.from, nodes.StateCleaning, nodes.StateAvailable}
		}
	}
	detail := map[string]any{"target": r.Target, "from": n.ProvisionState, "runbook": r.Runbook}
	if recovering {
		// Allowed under anvil:node:recover, not this rule.
		detail["via"] = RuleRecover
	}
	if len(steps) > 0 {
		detail["steps"] = stepsToAny(steps)
	}
	// A transition that is accepted writes its audit row in the claim's
	// commit; every other outcome is audited here.
	audited := false
	defer func() {
		if !audited {
			o.Guard.Done(ctx, RuleProvision, "node", n.UUID, err, detail)
		}
	}()
	if err := inMaintenance(n, r.Target); err != nil && !recovering {
		return err
	}
	if !slices.Contains(tr.from, n.ProvisionState) {
		return errs.Conflict("The requested action %q can not be performed on node %s while it is in state %q.", r.Target, n.UUID, n.ProvisionState)
	}
	c := o.C
	who := actor(ctx)
	// recovered takes a node out of the maintenance its failed run put it
	// in, with the change that recovers it.
	recovered := func(u *ent.NodeUpdate) {
		if recovering {
			u.SetMaintenance(false).ClearMaintenanceReason().ClearFault()
		}
	}
	switch {
	case r.Target == "abort" && n.ProvisionState == StateDeployWait && !r.DeployAbort:
		return errs.NotAcceptable("aborting a deployment in %s requires API version 1.110 or later", StateDeployWait)
	case r.Target == "abort" && n.ProvisionState == StateInspectWait && !r.InspectAbort:
		return errs.NotAcceptable("aborting an inspection in %s requires API version 1.41 or later", StateInspectWait)
	case r.Target == "abort":
		return c.abort(ctx, n, recovered)
	case r.Target == "unhold":
		return c.unhold(ctx, n, who)
	case slices.Contains(deployVerbs, r.Target):
		// Last of the checks, as the only one that goes over the network.
		if err := c.checkImageSource(ctx, n); err != nil {
			return err
		}
		return c.deploy(ctx, n, tr, r, steps, who)
	case slices.Contains(undeployVerbs, r.Target):
		return c.undeploy(ctx, n, tr, who)
	}
	w := write{audits: []*ent.AuditEventCreate{o.Guard.Audit.AllowedRow(ctx, RuleProvision, "node", n.UUID, detail)}}
	if tr.via == "" {
		w.events = []history.Event{{NodeID: n.ID, Type: "provision", User: who, Conductor: c.cfg.Name,
			Message: fmt.Sprintf("%s: %s -> %s", r.Target, n.ProvisionState, tr.to)}}
		if why := noWipe(n); r.Target == "provide" && why != "" {
			// Available without a wipe: the record says so, in the
			// same commit.
			nw := &wipeRun{started: time.Now(), owner: optional(n.Owner), lessee: optional(n.Lessee), disks: []map[string]any{}}
			w.updates = append(w.updates, func(tx *ent.Client) error {
				return c.recordWipe(ctx, tx, n, nw, WipeNone, WipeNotWiped, why)
			})
		}
		err := c.claim(ctx, n, r.Target, tr.from, false, func(u *ent.NodeUpdate) {
			u.SetProvisionState(tr.to).ClearTargetProvisionState().SetProvisionUpdatedAt(time.Now())
			recovered(u)
		}, w)
		audited = err == nil
		return err
	}
	if runbook != "" {
		// The run's own events name steps only; this one says which
		// runbook they came from and who ran it.
		w.events = []history.Event{{NodeID: n.ID, Type: r.Target, User: who, Conductor: c.cfg.Name,
			Message: fmt.Sprintf("Runbook %s, run by %s: %s with %d step(s)", runbook, who, r.Target, len(steps))}}
	}
	info := cloneInfo(n.DriverInternalInfo)
	delete(info, abortRequestedField)
	delete(info, "pending_steps")
	if (r.Target == "clean" || r.Target == "service") && len(steps) > 0 {
		// What ran, so that after a failure it can be run again as it was.
		info[InternalLastRun] = map[string]any{"target": r.Target, "runbook": runbook, "steps": stepsToAny(steps)}
	} else {
		// Any other run (provide's automated cleaning above all) is not
		// the last one run: its failure must not be recovered as that.
		delete(info, InternalLastRun)
	}
	info, setFirst, firstEvents, started := c.firstStep(n, run, steps, who, info)
	w.events = append(w.events, firstEvents...)
	inst := n.InstanceInfo
	if r.Target == "rescue" {
		hash, err := hashRescuePassword(r.RescuePassword)
		if err != nil {
			return err
		}
		inst = cloneInfo(inst)
		inst[hashedRescueKey] = hash
	}
	err = c.claim(ctx, n, r.Target, tr.from, true, func(u *ent.NodeUpdate) {
		u.SetProvisionState(tr.via).SetTargetProvisionState(tr.to).SetProvisionUpdatedAt(time.Now()).ClearLastError().SetDriverInternalInfo(info)
		if r.Target == "rescue" {
			u.SetInstanceInfo(inst)
		}
		if tr.via == StateInspecting {
			// As Ironic's node update on entering inspecting.
			u.SetInspectionStartedAt(time.Now()).ClearInspectionFinishedAt()
		}
		setFirst(u)
		recovered(u)
	}, w)
	if err != nil {
		return err
	}
	audited = true
	// The node as the claim left it, so the run needs no read of its own.
	claimed := *n
	claimed.ProvisionState, claimed.DriverInternalInfo, claimed.InstanceInfo, claimed.Reservation = tr.via, info, inst, &c.cfg.Name
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		switch r.Target {
		case "manage", "adopt":
			defer c.unlock(n.ID)
			c.verify(&claimed, tr, who)
		case "rescue":
			c.rescue(&claimed, who)
		case "unrescue":
			c.unrescue(&claimed, who)
		case "inspect":
			defer c.unlock(n.ID)
			if inspectsInBand(&claimed) {
				c.inspectInBand(&claimed, who)
			} else {
				c.inspect(&claimed, who)
			}
		default:
			c.runSteps(&claimed, run, steps, who, started)
		}
	}()
	return nil
}

func cloneInfo(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// verify reads the power state through the BMC: manage and adopt both
// prove the credentials work before the node moves on.
func (c *Conductor) verify(n *ent.Node, tr transition, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ev := history.Event{NodeID: n.ID, Type: "provision", User: who, Conductor: c.cfg.Name}
	cl, err := c.client(n)
	var st string
	if err == nil {
		st, err = cl.PowerState(ctx)
		c.noteBMC(ctx, n, err)
		if err == nil {
			// Ironic's verify fills the BIOS and firmware caches, so the
			// node's /bios and /firmware answer from the first manage; a
			// failure to read them is only logged, as there.
			if cerr := c.cacheHardware(ctx, n, cl); cerr != nil {
				c.log.Warn("caching BIOS settings and firmware at verify", "node", n.UUID, "err", cerr)
			}
		}
		cl.Close()
	}
	upd := c.db.Node.UpdateOneID(n.ID).ClearTargetProvisionState().SetProvisionUpdatedAt(time.Now())
	if err != nil {
		back := failedState[tr.via]
		upd.SetProvisionState(back).SetLastError("Failed to verify the BMC: " + bmc.Summary(err))
		ev.Failed(fmt.Sprintf("%s failed; back to %s: ", tr.via, back), err)
	} else {
		upd.SetProvisionState(tr.to).SetPowerState(st)
		ev.Message = fmt.Sprintf("BMC verified (power is %s); node is %s", st, tr.to)
	}
	if err := upd.Exec(ctx); err != nil {
		c.log.Error("recording verification", "node", n.UUID, "err", err)
	}
	_ = history.Record(ctx, c.db.Client, ev)
}

// abort asks running steps to stop (they check between steps and while
// waiting) or, for a node on hold or failed servicing, ends it at once.
// An inspection in inspect wait is asked the same way: its wait ends,
// and it tidies up as after a timeout (machine off, CD ejected, the
// agent's keys forgotten) before it ends in inspect failed.
func (c *Conductor) abort(ctx context.Context, n *ent.Node, set func(u *ent.NodeUpdate)) error {
	switch n.ProvisionState {
	case StateCleanHold, StateServiceHold, StateDeployHold, nodes.StateServiceFailed:
		if err := c.lock(ctx, n.ID); err != nil {
			return err
		}
		defer c.unlock(n.ID)
		to, msg := nodes.StateCleanFailed, "Aborted while on hold"
		switch n.ProvisionState {
		case StateServiceHold:
			to = nodes.StateServiceFailed
		case StateDeployHold:
			to = StateDeployFailed
		case nodes.StateServiceFailed:
			to, msg = nodes.StateActive, ""
		}
		upd := c.db.Node.Update().Where(node.ID(n.ID)).SetProvisionState(to).ClearTargetProvisionState().SetProvisionUpdatedAt(time.Now()).
			SetCleanStep(map[string]any{}).SetServiceStep(map[string]any{})
		if msg != "" {
			upd.SetLastError(msg)
		} else {
			upd.ClearLastError()
		}
		set(upd)
		if err := upd.Exec(ctx); err != nil {
			return err
		}
		return history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: "provision", User: actor(ctx), Conductor: c.cfg.Name,
			Message: fmt.Sprintf("abort: %s -> %s", n.ProvisionState, to)})
	}
	info := cloneInfo(n.DriverInternalInfo)
	info[abortRequestedField] = true
	cnt, err := c.db.Node.Update().Where(node.ID(n.ID), node.ProvisionStateIn(nodes.StateCleaning, nodes.StateCleanWait, nodes.StateServicing, nodes.StateServiceWait, StateDeployWait, StateInspectWait)).
		SetDriverInternalInfo(info).Save(ctx)
	if err != nil {
		return err
	}
	if cnt == 0 {
		return errs.Conflict("Node %s finished before the abort arrived.", n.UUID)
	}
	return nil
}

func (c *Conductor) unhold(ctx context.Context, n *ent.Node, who string) error {
	if err := c.lock(ctx, n.ID); err != nil {
		return err
	}
	kind, via := "clean", nodes.StateCleaning
	switch n.ProvisionState {
	case StateServiceHold:
		kind, via = "service", nodes.StateServicing
	case StateDeployHold:
		kind, via = "deploy", StateDeploying
	}
	pending := stepsFromAny(n.DriverInternalInfo["pending_steps"])
	if err := c.db.Node.UpdateOneID(n.ID).SetProvisionState(via).Exec(ctx); err != nil {
		c.unlock(n.ID)
		return err
	}
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		c.runSteps(n, kind, pending, who, false)
	}()
	return nil
}
