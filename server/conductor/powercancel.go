package conductor

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
)

// InternalPowerCancel holds a PowerCancel while someone has asked to stop
// the power action under way; the conductor running it clears it when
// the action ends.
const InternalPowerCancel = "power_cancel"

// PowerCancel is who asked to cancel a power action, and when.
type PowerCancel struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// StoredPowerCancel decodes the cancel request of the power action under
// way; ok is false when none was asked for.
func StoredPowerCancel(info map[string]any) (PowerCancel, bool) {
	var r PowerCancel
	return r, decodeInternal(info, InternalPowerCancel, &r) && !r.At.IsZero()
}

// powerCancelPoll is how often a running power action looks for a cancel
// request. The request is a database write, not a signal, because the
// replica that took it need not be the conductor holding the node's lock.
const powerCancelPoll = abortPoll

// errPowerCancelled is the cause of a power action's context when someone
// cancelled it.
var errPowerCancelled = errors.New("power action cancelled")

// PowerCancelled words a cancelled power action for last_error and the
// node's history: the portal shows who stopped it.
func PowerCancelled(target, who string) string {
	if who == "" {
		who = "an unnamed caller"
	}
	return strings.ToUpper(target[:1]) + target[1:] + " cancelled by " + who + "; the BMC had not confirmed it, so the node's power is as the BMC last reported."
}

// CancelPower stops the power action under way on a node: no further
// BMC call or try is made, target_power_state is cleared and the lock
// released, and the node's history says who cancelled it. It is
// authorised by the power rule itself (whoever may start a power action
// may stop one) and audited like it. Ironic has no such call, so only
// the portal offers it.
func (o *Ops) CancelPower(ctx context.Context, ident string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetPower)
	if err != nil {
		return err
	}
	target := ""
	if n.TargetPowerState != nil {
		target = *n.TargetPowerState
	}
	defer func() {
		o.Guard.Done(ctx, RuleSetPower, "node", n.UUID, err, map[string]any{"cancel": target})
	}()
	if target == "" || n.Reservation == nil {
		return errs.Conflict("Node %s has no power action under way to cancel.", n.UUID)
	}
	return o.C.requestPowerCancel(ctx, n, PowerCancel{By: actor(ctx), At: time.Now().UTC()})
}

// requestPowerCancel records the request where the conductor running the
// action looks for it, only while that action holds the node: one that
// ended meanwhile is a 409, as there is nothing left to cancel.
func (c *Conductor) requestPowerCancel(ctx context.Context, n *ent.Node, r PowerCancel) error {
	cnt, err := c.setInternalIf(ctx, c.db.Client, n.ID, *n.Reservation, InternalPowerCancel, r, "target_power_state IS NOT NULL")
	if err != nil {
		return err
	}
	if cnt == 0 {
		return errs.Conflict("The power action on node %s ended before it could be cancelled.", n.UUID)
	}
	return nil
}

// watchPowerCancel cancels ctx with errPowerCancelled once a cancel
// request made since began appears on node id, and returns when ctx
// ends. A request from before began is a leftover of an action whose
// conductor stopped before clearing it.
func (c *Conductor) watchPowerCancel(ctx context.Context, id int, began time.Time, cancel context.CancelCauseFunc) {
	t := time.NewTicker(powerCancelPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := c.db.Node.Get(ctx, id)
		if err != nil {
			continue
		}
		if r, ok := StoredPowerCancel(n.DriverInternalInfo); ok && !r.At.Before(began) {
			cancel(errPowerCancelled)
			return
		}
	}
}

// powerCancelOf reads the cancel request on node id, if any: asked says
// one is recorded, to be cleared when the action ends.
func (c *Conductor) powerCancelOf(ctx context.Context, id int) (r PowerCancel, asked bool) {
	n, err := c.db.Node.Get(ctx, id)
	if err != nil {
		return r, false
	}
	r, asked = StoredPowerCancel(n.DriverInternalInfo)
	return r, asked
}
