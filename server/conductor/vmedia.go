package conductor

import (
	"context"
	"fmt"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Virtual media rules, as Ironic names them.
const (
	RuleVMediaGet    = "baremetal:node:vmedia:get"
	RuleVMediaAttach = "baremetal:node:vmedia:attach"
	RuleVMediaDetach = "baremetal:node:vmedia:detach"
)

// vmediaClient opens the node's BMC when its driver has virtual media;
// a driver without it is Ironic's UnsupportedDriverExtension, a 400.
func (o *Ops) vmediaClient(n *ent.Node) (bmc.Client, bmc.VirtualMedia, error) {
	cl, err := o.C.client(n)
	if err != nil {
		return nil, nil, errs.BadRequest("driver_info", "%v", err)
	}
	vm, ok := cl.(bmc.VirtualMedia)
	if !ok {
		cl.Close()
		return nil, nil, errs.BadRequest("driver", "Driver %s does not support virtual media (disabled or not implemented).", n.Driver)
	}
	return cl, vm, nil
}

// VirtualMedia reads the node's virtual media devices from its BMC.
func (o *Ops) VirtualMedia(ctx context.Context, ident string) ([]bmc.VMedia, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleVMediaGet)
	if err != nil {
		return nil, err
	}
	cl, vm, err := o.vmediaClient(n)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	list, err := vm.VirtualMedia(ctx)
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return nil, bmcError(ctx, err)
	}
	// The read answers the caller whether or not it could be kept.
	if err := o.C.vmediaRead(ctx, n.ID, n.DriverInternalInfo, list); err != nil {
		o.C.log.Error("recording virtual media", "node", n.UUID, "err", err)
	}
	// The BMC reports an image's URL as it was inserted, credentials
	// and all: for system admins only.
	if !nodes.SeesURLs(policies.PrincipalFrom(ctx)) {
		for i := range list {
			list[i].Image = urlsafe.Strip(list[i].Image)
		}
	}
	return list, nil
}

// AttachVirtualMedia inserts url into the node's device as Ironic's
// conductor does (attach_virtual_media): what startVMedia checks answers
// the request, and the BMC's work runs after the answer, under the lock.
func (o *Ops) AttachVirtualMedia(ctx context.Context, ident, device, url string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleVMediaAttach)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleVMediaAttach, "node", n.UUID, err, map[string]any{"device_type": device, "image_url": urlsafe.Strip(url)})
	}()
	op := vmediaOp{
		what: "attach virtual media", extension: "attach_virtual_media",
		failed:  fmt.Sprintf("Could not attach device %s to node %s: ", device, n.UUID),
		devices: []string{device}, image: url,
		do: func(ctx context.Context, vm bmc.VirtualMedia) (string, error) {
			return fmt.Sprintf("Virtual media %s attached: %s", device, urlsafe.Strip(url)), vm.InsertMedia(ctx, device, url)
		},
	}
	return o.startVMedia(ctx, n, op)
}

// DetachVirtualMedia ejects the listed devices, or every inserted one, as
// Ironic's conductor does (detach_virtual_media): like an attach, the BMC's
// work runs after the answer.
func (o *Ops) DetachVirtualMedia(ctx context.Context, ident string, devices []string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleVMediaDetach)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleVMediaDetach, "node", n.UUID, err, map[string]any{"device_types": devices})
	}()
	which := "all"
	if len(devices) > 0 {
		which = strings.Join(devices, ", ")
	}
	op := vmediaOp{
		what: "detach virtual media", extension: "detach_virtual_media",
		failed:  fmt.Sprintf("Could not detach device(s) %s from node %s: ", which, n.UUID),
		devices: devices,
		do: func(ctx context.Context, vm bmc.VirtualMedia) (string, error) {
			if len(devices) == 0 {
				return "Virtual media detached", vm.EjectMedia(ctx, "")
			}
			for _, d := range devices {
				if err := vm.EjectMedia(ctx, d); err != nil {
					return "", err
				}
			}
			return "Virtual media detached: " + which, nil
		},
	}
	return o.startVMedia(ctx, n, op)
}

// vmediaOp is one virtual media change: image into devices, or out of
// them ("" image; no devices is every one).
type vmediaOp struct {
	// what names the operation in the power-failure refusal, extension
	// in the unsupported-driver one, as Ironic words them; failed starts
	// the message of a failure.
	what, extension, failed string
	devices                 []string
	image                   string
	do                      func(context.Context, bmc.VirtualMedia) (string, error)
}

// startVMedia answers a virtual media request as Ironic's conductor does:
// the node's lock (409 while another operation holds it), its management
// settings as validate checks them (400, without contacting the BMC) and a
// power failure (503) are checked at once, the last error is cleared, and
// the request is answered. The BMC's work then runs under the lock; a
// driver without virtual media or a BMC that fails becomes the node's
// last_error and an error in its history, where Ironic records it too.
func (o *Ops) startVMedia(ctx context.Context, n *ent.Node, op vmediaOp) error {
	c := o.C
	if err := c.lock(ctx, n.ID); err != nil {
		return err
	}
	started := false
	defer func() {
		if !started {
			c.unlock(n.ID)
		}
	}()
	// What the lock's holder may have changed is read again under it.
	n, err := c.db.Node.Get(ctx, n.ID)
	if err != nil {
		return err
	}
	cl, err := bmc.Open(n.Driver, n.UUID, n.DriverInfo, bmc.Options{})
	if err != nil {
		return errs.BadRequest("driver_info", "%v", err)
	}
	cl.Close()
	if n.Maintenance && n.Fault != nil && *n.Fault == FaultPower {
		return errs.Unavailable("Unable to %s for node %s due to power failure state", op.what, n.UUID)
	}
	if err := c.db.Node.UpdateOneID(n.ID).ClearLastError().Exec(ctx); err != nil {
		return err
	}
	who := actor(ctx)
	started = true
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer c.unlock(n.ID)
		// The change finishes even if the conductor is stopping, as a
		// power action does.
		bctx := context.WithoutCancel(c.ctx)
		ev := history.Event{NodeID: n.ID, Type: "management", User: who, Conductor: c.cfg.Name}
		err := o.runVMedia(bctx, n, op, &ev)
		if err == nil {
			return
		}
		ev.Failed(op.failed, err)
		record := func() error {
			return store.WithTx(bctx, c.db, func(tx *ent.Client) error {
				if err := tx.Node.UpdateOneID(n.ID).SetLastError(op.failed + bmc.Summary(err)).Exec(bctx); err != nil {
					return err
				}
				return history.Record(bctx, tx, ev)
			})
		}
		if err := c.durably(bctx, record); err != nil {
			c.log.Error("recording a virtual media failure", "node", n.UUID, "err", err)
		}
	}()
	return nil
}

// runVMedia does op on the BMC and records what it changed with ev; the
// error is the BMC's, or the driver's lack of virtual media.
func (o *Ops) runVMedia(ctx context.Context, n *ent.Node, op vmediaOp, ev *history.Event) error {
	c := o.C
	cl, err := c.client(n)
	if err != nil {
		return err
	}
	defer cl.Close()
	vm, ok := cl.(bmc.VirtualMedia)
	if !ok {
		return errs.BadRequest("driver", "Driver %s does not support %s (disabled or not implemented).", n.Driver, op.extension)
	}
	msg, err := op.do(ctx, vm)
	c.noteBMC(ctx, n, err)
	if err != nil {
		return err
	}
	devices := op.devices
	if len(devices) == 0 {
		devices = nil
	}
	ev.Message = msg
	return c.durably(ctx, func() error {
		return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
			if err := c.vmediaChanged(ctx, tx, n, devices, op.image); err != nil {
				return err
			}
			return history.Record(ctx, tx, *ev)
		})
	})
}
