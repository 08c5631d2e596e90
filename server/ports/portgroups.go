package ports

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// PortgroupInput is a new portgroup as a caller gives it.
type PortgroupInput struct {
	UUID                     string
	Node                     string
	Address                  *string
	Name                     *string
	Mode                     *string
	Properties               map[string]any
	StandalonePortsSupported *bool
	PhysicalNetwork          *string
	Category                 *string
	Extra                    map[string]any
}

// CreatePortgroup enrols a portgroup on a node.
func (s *Service) CreatePortgroup(ctx context.Context, in PortgroupInput) (*Portgroup, error) {
	n, err := s.nodeForCreate(ctx, in.Node, RulePGCreate, "portgroup")
	if err != nil {
		return nil, err
	}
	var out *Portgroup
	err = s.createPortgroup(ctx, n, &in, &out)
	s.guard.Done(ctx, RulePGCreate, "portgroup", in.UUID, err, map[string]any{"name": in.Name, "node": n.UUID})
	return out, err
}

func (s *Service) createPortgroup(ctx context.Context, n *ent.Node, in *PortgroupInput, out **Portgroup) error {
	if in.UUID == "" {
		in.UUID = uuid.NewString()
	} else if !nodes.IsUUID(in.UUID) {
		return errs.BadRequest("uuid", "Expected a UUID but received %s.", in.UUID)
	}
	in.UUID = strings.ToLower(in.UUID)
	if in.Address != nil {
		mac, err := NormalizeMAC("address", *in.Address)
		if err != nil {
			return err
		}
		in.Address = &mac
	}
	if in.Name != nil && nodes.ValidateName("name", *in.Name) != nil {
		return errs.BadRequest("name", "Cannot create portgroup with invalid name '%s'", *in.Name)
	}
	if in.Mode == nil || *in.Mode == "" {
		in.Mode = new(DefaultMode)
	}
	if err := validateStrings(map[string]*string{"physical_network": in.PhysicalNetwork, "category": in.Category, "mode": in.Mode}); err != nil {
		return err
	}
	for _, m := range []*map[string]any{&in.Properties, &in.Extra} {
		if *m == nil {
			*m = map[string]any{}
		}
	}
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if _, err := lockNode(ctx, tx, n.ID); err != nil {
			return err
		}
		g, err := tx.Portgroup.Create().SetUUID(in.UUID).SetNodeID(n.ID).SetNillableAddress(in.Address).
			SetNillableName(in.Name).SetMode(*in.Mode).SetProperties(in.Properties).
			SetNillableStandalonePortsSupported(in.StandalonePortsSupported).SetNillablePhysicalNetwork(in.PhysicalNetwork).
			SetNillableCategory(in.Category).SetExtra(in.Extra).SetInternalInfo(map[string]any{}).Save(ctx)
		if err != nil {
			addr := ""
			if in.Address != nil {
				addr = *in.Address
			}
			return constraintError(err, "portgroup", in.UUID, addr, in.Name)
		}
		*out = &Portgroup{Portgroup: g, NodeUUID: n.UUID}
		return nil
	})
}

// GetPortgroup returns one portgroup the caller may see.
func (s *Service) GetPortgroup(ctx context.Context, ident string) (*Portgroup, error) {
	g, n, err := s.authorizedPortgroup(ctx, ident, RulePGGet)
	if err != nil {
		return nil, err
	}
	return &Portgroup{Portgroup: g, NodeUUID: n.UUID}, nil
}

// DeletePortgroup removes an empty portgroup; one that still has ports is
// refused, as Ironic refuses it.
func (s *Service) DeletePortgroup(ctx context.Context, ident string) error {
	g, _, err := s.authorizedPortgroup(ctx, ident, RulePGDelete)
	if err != nil {
		return err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if _, err := lockNode(ctx, tx, g.NodeID); err != nil {
			return err
		}
		has, err := tx.Port.Query().Where(port.PortgroupID(g.ID)).Exist(ctx)
		if err != nil {
			return err
		}
		if has {
			return errs.BadRequest("portgroup", "Cannot complete the requested action because portgroup %s contains ports.", g.UUID)
		}
		err = tx.Portgroup.DeleteOneID(g.ID).Exec(ctx)
		if ent.IsNotFound(err) {
			return pgNotFound(ident)
		}
		return err
	})
	s.guard.Done(ctx, RulePGDelete, "portgroup", g.UUID, err, nil)
	return err
}
