package conductor

import (
	"context"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/biossetting"
	"github.com/anvilproject/anvil/server/errs"
)

// RuleBIOSGet guards GET /v1/nodes/{node}/bios and /bios/{setting}.
const RuleBIOSGet = "baremetal:node:bios:get"

// BIOS lists a node's cached BIOS settings by name, as a BIOS step or
// inspection last read them from the BMC.
func (o *Ops) BIOS(ctx context.Context, ident string) ([]*ent.BiosSetting, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleBIOSGet)
	if err != nil {
		return nil, err
	}
	return o.C.db.BiosSetting.Query().Where(biossetting.NodeID(n.ID)).Order(ent.Asc(biossetting.FieldName)).All(ctx)
}

// BIOSSetting is one cached setting; a name the node does not have is a
// 404 in Ironic's words.
func (o *Ops) BIOSSetting(ctx context.Context, ident, name string) (*ent.BiosSetting, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleBIOSGet)
	if err != nil {
		return nil, err
	}
	s, err := o.C.db.BiosSetting.Query().Where(biossetting.NodeID(n.ID), biossetting.Name(name)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("Node %s doesn't have a BIOS setting '%s'", n.UUID, name)
	}
	return s, err
}
