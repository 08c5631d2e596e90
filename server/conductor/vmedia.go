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

// AttachVirtualMedia inserts url into the node's device under the node's
// lock. Ironic refuses while the node is in maintenance for a power
// failure: its BMC is not answering.
func (o *Ops) AttachVirtualMedia(ctx context.Context, ident, device, url string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleVMediaAttach)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleVMediaAttach, "node", n.UUID, err, map[string]any{"device_type": device, "image_url": urlsafe.Strip(url)})
	}()
	return o.withVMedia(ctx, n, "attaching virtual media", []string{device}, url, func(vm bmc.VirtualMedia) (string, error) {
		return fmt.Sprintf("Virtual media %s attached: %s", device, urlsafe.Strip(url)), vm.InsertMedia(ctx, device, url)
	})
}

// DetachVirtualMedia ejects the listed devices, or every inserted one.
func (o *Ops) DetachVirtualMedia(ctx context.Context, ident string, devices []string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleVMediaDetach)
	if err != nil {
		return err
	}
	defer func() {
		o.Guard.Done(ctx, RuleVMediaDetach, "node", n.UUID, err, map[string]any{"device_types": devices})
	}()
	return o.withVMedia(ctx, n, "detaching virtual media", devices, "", func(vm bmc.VirtualMedia) (string, error) {
		if len(devices) == 0 {
			return "Virtual media detached", vm.EjectMedia(ctx, "")
		}
		for _, d := range devices {
			if err := vm.EjectMedia(ctx, d); err != nil {
				return "", err
			}
		}
		return "Virtual media detached: " + strings.Join(devices, ", "), nil
	})
}

// withVMedia runs do under the node's lock and records what it changed:
// image into devices, or out of them ("" image; no devices is every one).
func (o *Ops) withVMedia(ctx context.Context, n *ent.Node, what string, devices []string, image string, do func(bmc.VirtualMedia) (string, error)) error {
	if n.Maintenance && n.Fault != nil && *n.Fault == FaultPower {
		return errs.Unavailable("Unable to %s for node %s due to power failure state", what, n.UUID)
	}
	if err := o.C.lock(ctx, n.ID); err != nil {
		return err
	}
	defer o.C.unlock(n.ID)
	cl, vm, err := o.vmediaClient(n)
	if err != nil {
		return err
	}
	defer cl.Close()
	msg, err := do(vm)
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return bmcError(ctx, err)
	}
	if len(devices) == 0 {
		devices = nil
	}
	return store.WithTx(ctx, o.C.db, func(tx *ent.Client) error {
		if err := o.C.vmediaChanged(ctx, tx, n, devices, image); err != nil {
			return err
		}
		return history.Record(ctx, tx, history.Event{NodeID: n.ID, Type: "management", User: actor(ctx), Conductor: o.C.cfg.Name, Message: msg})
	})
}
