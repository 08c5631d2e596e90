package conductor

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/policies"
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
		return "", fieldRefusal(err)
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

// CheckNewBMC asks a BMC not yet enrolled for its power state, so the
// enrol form can say before saving whether Anvil reaches and logs in to
// it. Only a caller who may enrol a node owned by owner may ask (nobody
// else learns what answers where), and it dials as CheckBMC does, inside
// --bmc-networks with the same timeouts and CA rules; nothing is stored,
// so there is nothing to audit beyond a refusal.
func (o *Ops) CheckNewBMC(ctx context.Context, driver string, info map[string]any, owner string) (string, error) {
	id := uuid.NewString()
	if _, err := o.Nodes.AuthorizeCreate(ctx, id, owner, ""); err != nil {
		return "", err
	}
	system := true
	if p := policies.PrincipalFrom(ctx); p != nil {
		system = p.System
	}
	if err := bmc.CheckPaths(driver, info, nil, system); err != nil {
		return "", fieldRefusal(err)
	}
	cl, err := bmc.Open(driver, id, info, o.C.cfg.BMC)
	if err != nil {
		return "", fieldRefusal(err)
	}
	// A fake BMC keeps its state by node UUID; this one is never a node.
	defer bmc.ForgetFake(id)
	defer cl.Close()
	state, err := cl.PowerState(ctx)
	if err != nil {
		return "", bmcError(ctx, err)
	}
	return state, nil
}

// fieldRefusal turns a driver_info problem into the 400 naming its key.
func fieldRefusal(err error) error {
	var fe *bmc.FieldError
	if errors.As(err, &fe) {
		return errs.BadRequest(fe.Field, "%s", fe.Msg)
	}
	return errs.BadRequest("driver_info", "%v", err)
}
