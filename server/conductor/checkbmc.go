package conductor

import (
	"context"
	"errors"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
)

// CheckBMC asks a node's BMC for its power state, so an operator who has
// just enrolled a node or changed its credentials learns at once whether
// Anvil can reach and log in to it. It opens the BMC as every power
// action does (the same timeouts, --bmc-networks and CA rules) and is
// guarded by Ironic's validate rule, the check of a node's driver
// settings. It takes no lock: like power sync, it records the state it
// read only on a node no action holds (notePower), so a node enrolled a
// moment ago shows its power state at once rather than at the next sync.
func (o *Ops) CheckBMC(ctx context.Context, ident string) (string, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleValidate)
	if err != nil {
		return "", err
	}
	cl, err := o.C.client(n)
	if err != nil {
		var fe *bmc.FieldError
		if errors.As(err, &fe) {
			return "", errs.BadRequest(fe.Field, "%s", fe.Msg)
		}
		return "", errs.BadRequest("driver_info", "%v", err)
	}
	defer cl.Close()
	state, err := cl.PowerState(ctx)
	o.C.noteBMC(ctx, n, err)
	if err != nil {
		return "", bmcError(ctx, err)
	}
	o.C.notePower(ctx, n, state, "a connection test")
	return state, nil
}
