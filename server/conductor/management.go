package conductor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Rules of the management endpoints, named as Ironic names them.
const (
	RuleSetBootMode   = "baremetal:node:set_boot_mode"
	RuleSetSecureBoot = "baremetal:node:set_secure_boot"
	RuleGetIndicator  = "baremetal:node:get_indicator_state"
	RuleSetIndicator  = "baremetal:node:set_indicator_state"
	RuleInjectNMI     = "baremetal:node:inject_nmi"
)

// BootModes are the targets of PUT states/boot_mode.
var BootModes = []string{"bios", "uefi"}

// unstable are the states in which Ironic refuses a boot mode change,
// which could disturb the work under way (its UNSTABLE_STATES).
var unstable = []string{StateDeploying, StateDeployWait, nodes.StateCleaning, nodes.StateCleanWait, nodes.StateVerifying,
	StateDeleting, StateInspecting, StateInspectWait, StateAdopting, nodes.StateServicing, nodes.StateServiceWait}

// SetBootMode starts a boot mode change (PUT states/boot_mode); the
// conductor then reads the mode back and records it in boot_mode.
func (o *Ops) SetBootMode(ctx context.Context, ident, target string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetBootMode)
	if err != nil {
		return err
	}
	defer func() { o.Guard.Done(ctx, RuleSetBootMode, "node", n.UUID, err, map[string]any{"target": target}) }()
	if !slices.Contains(BootModes, target) {
		return errs.BadRequest("target", "Invalid boot mode %q requested in target. Allowed boot modes are: %s", target, strings.Join(BootModes, ", "))
	}
	return o.changeBootMode(ctx, n, "Boot mode set to "+target, func(ctx context.Context, bm bmc.BootModes) error {
		if err := bm.SetBootMode(ctx, target); err != nil {
			return err
		}
		if mode, _, err := bm.BootMode(ctx); err != nil || mode != target {
			return readBackErr("boot mode", mode, target, err)
		}
		return nil
	})
}

// SetSecureBoot starts turning UEFI secure boot on or off (PUT
// states/secure_boot); secure_boot records what the BMC reports after.
func (o *Ops) SetSecureBoot(ctx context.Context, ident string, target bool) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetSecureBoot)
	if err != nil {
		return err
	}
	defer func() { o.Guard.Done(ctx, RuleSetSecureBoot, "node", n.UUID, err, map[string]any{"target": target}) }()
	return o.changeBootMode(ctx, n, fmt.Sprintf("Secure boot set to %t", target), func(ctx context.Context, bm bmc.BootModes) error {
		if err := bm.SetSecureBoot(ctx, target); err != nil {
			return err
		}
		if _, on, err := bm.BootMode(ctx); err != nil || on == nil || *on != target {
			got := "unknown"
			if on != nil {
				got = fmt.Sprint(*on)
			}
			return readBackErr("secure boot", got, fmt.Sprint(target), err)
		}
		return nil
	})
}

func readBackErr(what, got, want string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("the BMC accepted %s %s but reports %q after", what, want, got)
}

// changeBootMode refuses a node in transition (409) or whose driver has
// no boot modes (400), then locks it and runs change in the background.
// Success or failure, boot_mode and secure_boot take what the BMC
// reports at the end; a failure is the node's last_error.
func (o *Ops) changeBootMode(ctx context.Context, n *ent.Node, done string, change func(context.Context, bmc.BootModes) error) error {
	if slices.Contains(unstable, n.ProvisionState) {
		return errs.Conflict("Node %s is in %s state. Since node is transitioning, the boot mode will not be set as this may interfere with ongoing changes and result in erroneous modification. Try again later.", n.UUID, n.ProvisionState)
	}
	c := o.C
	cl, err := c.client(n)
	if err != nil {
		return errs.BadRequest("driver_info", "%v", err)
	}
	bm, ok := cl.(bmc.BootModes)
	if !ok {
		cl.Close()
		return errs.BadRequest("driver", "driver %s cannot set the boot mode or secure boot", n.Driver)
	}
	if err := c.lock(ctx, n.ID); err != nil {
		cl.Close()
		return err
	}
	who := actor(ctx)
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer c.unlock(n.ID)
		defer cl.Close()
		bctx := context.WithoutCancel(c.ctx)
		err := change(bctx, bm)
		c.noteBMC(bctx, n, err)
		upd := c.db.Node.UpdateOneID(n.ID)
		if mode, on, rerr := bm.BootMode(bctx); rerr == nil {
			if mode != "" {
				upd.SetBootMode(mode)
			}
			if on != nil {
				upd.SetSecureBoot(*on)
			}
		}
		ev := history.Event{NodeID: n.ID, Type: "management", User: who, Conductor: c.cfg.Name, Message: done}
		if err != nil {
			upd.SetLastError(done + " failed: " + bmc.Summary(err))
			ev.Failed(done+" failed: ", err)
		} else {
			upd.ClearLastError()
		}
		if err := c.durably(bctx, func() error { return upd.Exec(bctx) }); err != nil {
			c.log.Error("recording boot mode", "node", n.UUID, "err", err)
		}
		_ = c.durably(bctx, func() error { return history.Record(bctx, c.db.Client, ev) })
	}()
	return nil
}

// indicatorStates are the states a client may ask an indicator for.
var indicatorStates = []string{bmc.IndicatorOn, bmc.IndicatorOff, bmc.IndicatorBlinking}

// ParseIndicator splits Ironic's indicator name, "<id>@<component>".
func ParseIndicator(name string) (id, component string, err error) {
	i := strings.Index(name, "@")
	if i <= 0 || i == len(name)-1 {
		return "", "", errs.BadRequest("indicator", "Malformed indicator name %q: expected <indicator>@<component>", name)
	}
	return name[:i], name[i+1:], nil
}

// withManagement opens the node's BMC as the management interface want;
// a driver without it is a 400 naming the driver.
func withManagement[T any](o *Ops, n *ent.Node, what string) (T, bmc.Client, error) {
	var zero T
	cl, err := o.C.client(n)
	if err != nil {
		return zero, nil, errs.BadRequest("driver_info", "%v", err)
	}
	m, ok := cl.(T)
	if !ok {
		cl.Close()
		return zero, nil, errs.BadRequest("driver", "driver %s has no %s", n.Driver, what)
	}
	return m, cl, nil
}

// bmcFailure answers a BMC error: an operation the BMC lacks is the
// caller's 400, naming the driver; anything else a 503.
func bmcFailure(ctx context.Context, n *ent.Node, err error) error {
	if errors.Is(err, bmc.ErrUnsupported) {
		return errs.BadRequest("driver", "driver %s: %s", n.Driver, bmc.Summary(err))
	}
	return bmcError(ctx, err)
}

// Indicators lists the node's indicators with their states, read from
// its BMC.
func (o *Ops) Indicators(ctx context.Context, ident string) (*ent.Node, []bmc.Indicator, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetIndicator)
	if err != nil {
		return nil, nil, err
	}
	list, err := o.indicators(ctx, n)
	return n, list, err
}

func (o *Ops) indicators(ctx context.Context, n *ent.Node) ([]bmc.Indicator, error) {
	leds, cl, err := withManagement[bmc.Indicators](o, n, "indicators")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	list, err := leds.Indicators(ctx)
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return nil, bmcFailure(ctx, n, err)
	}
	// The read answers the caller whether or not it could be kept.
	if err := o.C.indicatorsRead(ctx, n.ID, n.DriverInternalInfo, list); err != nil {
		o.C.log.Error("recording indicator states", "node", n.UUID, "err", err)
	}
	return list, nil
}

// Indicator is one indicator by Ironic's name; one the BMC does not
// have is a 400 naming it, as in Ironic.
func (o *Ops) Indicator(ctx context.Context, ident, name string) (bmc.Indicator, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetIndicator)
	if err != nil {
		return bmc.Indicator{}, err
	}
	id, component, err := ParseIndicator(name)
	if err != nil {
		return bmc.Indicator{}, err
	}
	list, err := o.indicators(ctx, n)
	if err != nil {
		return bmc.Indicator{}, err
	}
	for _, l := range list {
		if l.ID == id && l.Component == component {
			return l, nil
		}
	}
	return bmc.Indicator{}, errs.BadRequest("indicator", "Unknown indicator %s for component %s of node %s", id, component, n.UUID)
}

// SetIndicator sets an indicator under the node's lock.
func (o *Ops) SetIndicator(ctx context.Context, ident, name, state string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetIndicator)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleSetIndicator, "node", n.UUID, err, map[string]any{"indicator": name, "state": state})
	}()
	id, component, err := ParseIndicator(name)
	if err != nil {
		return err
	}
	if !slices.Contains(indicatorStates, state) {
		return errs.BadRequest("state", "state %q is not one of %s", state, strings.Join(indicatorStates, ", "))
	}
	leds, cl, err := withManagement[bmc.Indicators](o, n, "indicators")
	if err != nil {
		return err
	}
	defer cl.Close()
	list, err := leds.Indicators(ctx)
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return bmcFailure(ctx, n, err)
	}
	i := slices.IndexFunc(list, func(l bmc.Indicator) bool { return l.ID == id && l.Component == component })
	switch {
	case i < 0:
		return errs.BadRequest("indicator", "Unknown indicator %s for component %s of node %s", id, component, n.UUID)
	case list[i].ReadOnly:
		return errs.BadRequest("indicator", "Indicator %s of node %s is read-only", name, n.UUID)
	case !slices.Contains(list[i].States, state):
		return errs.BadRequest("state", "state %q is not one of %s for indicator %s", state, strings.Join(list[i].States, ", "), name)
	}
	return o.locked(ctx, n, fmt.Sprintf("Indicator %s set to %s", name, state), func() error {
		return leds.SetIndicator(ctx, component, id, state)
	}, func(tx *ent.Client) error {
		return o.C.indicatorSet(ctx, tx, n.ID, name, state)
	})
}

// InjectNMI sends the node a non-maskable interrupt.
func (o *Ops) InjectNMI(ctx context.Context, ident string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleInjectNMI)
	if err != nil {
		return err
	}
	defer func() { o.Guard.Done(ctx, RuleInjectNMI, "node", n.UUID, err, nil) }()
	nmi, cl, err := withManagement[bmc.NMI](o, n, "NMI injection")
	if err != nil {
		return err
	}
	defer cl.Close()
	return o.locked(ctx, n, "NMI injected", func() error { return nmi.InjectNMI(ctx) }, nil)
}

// locked runs a BMC call under the node's lock and records it in the
// node's history, together with what record (when not nil) keeps of it.
func (o *Ops) locked(ctx context.Context, n *ent.Node, done string, call func() error, record func(tx *ent.Client) error) error {
	c := o.C
	if err := c.lock(ctx, n.ID); err != nil {
		return err
	}
	defer c.unlock(n.ID)
	err := call()
	c.noteBMC(ctx, n, err)
	if err != nil {
		return bmcFailure(ctx, n, err)
	}
	ev := history.Event{NodeID: n.ID, Type: "management", User: actor(ctx), Conductor: c.cfg.Name, Message: done}
	if record == nil {
		return history.Record(ctx, c.db.Client, ev)
	}
	return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		if err := record(tx); err != nil {
			return err
		}
		return history.Record(ctx, tx, ev)
	})
}
