package ports

import (
	"context"
	"sort"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/ent/portgroup"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// VIFs lists the VIF ids attached to a node's ports, then portgroups, as
// Ironic's VIFPortIDMixin.vif_list.
func (s *Service) VIFs(ctx context.Context, nodeIdent string) ([]string, error) {
	n, err := s.nodes.Authorized(ctx, nodeIdent, RuleVIFList)
	if err != nil {
		return nil, err
	}
	if s.noop(n) {
		return []string{}, nil
	}
	ps, err := s.db.Port.Query().Where(port.NodeID(n.ID)).Order(ent.Asc(port.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	gs, err := s.db.Portgroup.Query().Where(portgroup.NodeID(n.ID)).Order(ent.Asc(portgroup.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, p := range ps {
		if v, ok := p.InternalInfo[VIFKey].(string); ok {
			out = append(out, v)
		}
	}
	for _, g := range gs {
		if v, ok := g.InternalInfo[VIFKey].(string); ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// VIFRequest is a VIF to attach; Port or Portgroup (a UUID each) pin it.
type VIFRequest struct {
	ID        string
	Port      string
	Portgroup string
}

// AttachVIF records a VIF on a free port or portgroup of the node, as
// Ironic's flat network interface chooses it: portgroups with member
// ports first, then PXE-enabled ports, then the rest; a port whose
// portgroup already carries a VIF is used on its own. The VIF already on
// the node is a 409; no free port is a 400, Ironic's NoFreePhysicalPorts.
func (s *Service) AttachVIF(ctx context.Context, nodeIdent string, in VIFRequest) error {
	n, err := s.nodes.Authorized(ctx, nodeIdent, RuleVIFAdd)
	if err != nil {
		return err
	}
	var target string
	err = s.attach(ctx, n, in, &target)
	s.guard.Done(ctx, RuleVIFAdd, "node", n.UUID, err, map[string]any{"vif": in.ID, "attached_to": target})
	return err
}

func (s *Service) attach(ctx context.Context, n *ent.Node, in VIFRequest, target *string) error {
	if in.ID == "" {
		return errs.BadRequest("id", "id is required: the VIF's UUID or name")
	}
	if !nodes.IsUUID(in.ID) && nodes.ValidateName("id", in.ID) != nil {
		return errs.BadRequest("id", "Expected a UUID or logical name but received %s.", in.ID)
	}
	if in.Port != "" && in.Portgroup != "" {
		return errs.BadRequest("port_uuid", "Cannot specify both port_uuid and portgroup_uuid")
	}
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := lockNode(ctx, tx, n.ID)
		if err != nil || s.noop(n) {
			return err
		}
		ps, err := tx.Port.Query().Where(port.NodeID(n.ID)).Order(ent.Asc(port.FieldID)).All(ctx)
		if err != nil {
			return err
		}
		gs, err := tx.Portgroup.Query().Where(portgroup.NodeID(n.ID)).Order(ent.Asc(portgroup.FieldID)).All(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.InternalInfo[VIFKey] == in.ID {
				return errs.Conflict("Unable to attach VIF because VIF %s is already attached to Ironic Port %s", in.ID, p.UUID)
			}
		}
		for _, g := range gs {
			if g.InternalInfo[VIFKey] == in.ID {
				return errs.Conflict("Unable to attach VIF because VIF %s is already attached to Ironic Portgroup %s", in.ID, g.UUID)
			}
		}
		type cand struct {
			p       *ent.Port
			g       *ent.Portgroup
			pxe, pg bool
		}
		var cands []cand
		members := map[int][]*ent.Port{}
		busy := map[int]bool{}
		for _, p := range ps {
			if in.Port != "" && p.UUID != in.Port {
				continue
			}
			if _, ok := p.InternalInfo[VIFKey]; ok {
				if p.PortgroupID != nil {
					busy[*p.PortgroupID] = true
				}
				continue
			}
			if p.PortgroupID == nil && in.Portgroup == "" {
				cands = append(cands, cand{p: p, pxe: p.PxeEnabled})
			} else if p.PortgroupID != nil {
				members[*p.PortgroupID] = append(members[*p.PortgroupID], p)
			}
		}
		if in.Port == "" {
			for _, g := range gs {
				if in.Portgroup != "" && g.UUID != in.Portgroup {
					continue
				}
				if _, ok := g.InternalInfo[VIFKey]; ok {
					continue
				}
				if busy[g.ID] {
					if in.Portgroup == "" {
						for _, p := range members[g.ID] {
							cands = append(cands, cand{p: p, pxe: p.PxeEnabled})
						}
					}
				} else if len(members[g.ID]) > 0 {
					cands = append(cands, cand{g: g, pg: true, pxe: true})
				}
			}
		}
		if len(cands) == 0 {
			return errs.BadRequest("id", "Unable to attach VIF %s, not enough free physical ports.", in.ID)
		}
		// Ironic's sort key (physnet match, is portgroup, pxe_enabled),
		// highest first; without a network service no physnet matches.
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].pg != cands[j].pg {
				return cands[i].pg
			}
			return cands[i].pxe && !cands[j].pxe
		})
		c := cands[0]
		if c.g != nil {
			*target = c.g.UUID
			return tx.Portgroup.UpdateOneID(c.g.ID).SetInternalInfo(withVIF(c.g.InternalInfo, in.ID)).Exec(ctx)
		}
		*target = c.p.UUID
		return tx.Port.UpdateOneID(c.p.ID).SetInternalInfo(withVIF(c.p.InternalInfo, in.ID)).Exec(ctx)
	})
}

func withVIF(info map[string]any, vif string) map[string]any {
	out := make(map[string]any, len(info)+1)
	for k, v := range info {
		out[k] = v
	}
	out[VIFKey] = vif
	return out
}

// DetachVIF removes a VIF from the port or portgroup that carries it, and
// the legacy extra.vif_port_id with it, as Ironic does.
func (s *Service) DetachVIF(ctx context.Context, nodeIdent, vif string) error {
	n, err := s.nodes.Authorized(ctx, nodeIdent, RuleVIFDel)
	if err != nil {
		return err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		n, err := lockNode(ctx, tx, n.ID)
		if err != nil || s.noop(n) {
			return err
		}
		gs, err := tx.Portgroup.Query().Where(portgroup.NodeID(n.ID)).All(ctx)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.InternalInfo[VIFKey] == vif {
				return tx.Portgroup.UpdateOneID(g.ID).SetInternalInfo(without(g.InternalInfo, VIFKey)).
					SetExtra(without(g.Extra, "vif_port_id")).Exec(ctx)
			}
		}
		ps, err := tx.Port.Query().Where(port.NodeID(n.ID)).All(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.InternalInfo[VIFKey] == vif {
				return tx.Port.UpdateOneID(p.ID).SetInternalInfo(without(p.InternalInfo, VIFKey)).
					SetExtra(without(p.Extra, "vif_port_id")).Exec(ctx)
			}
		}
		return errs.BadRequest("vif", "Unable to detach VIF %s from node %s because it is not attached to it.", vif, n.UUID)
	})
	s.guard.Done(ctx, RuleVIFDel, "node", n.UUID, err, map[string]any{"vif": vif})
	return err
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
