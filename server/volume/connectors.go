package volume

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/volumeconnector"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/store"
)

// Connector is a volume connector with its node's UUID.
type Connector struct {
	*ent.VolumeConnector
	NodeUUID string
}

// ConnectorInput is a connector to create.
type ConnectorInput struct {
	UUID        *string        `json:"uuid"`
	NodeUUID    string         `json:"node_uuid"`
	Type        string         `json:"type"`
	ConnectorID string         `json:"connector_id"`
	Extra       map[string]any `json:"extra"`
}

func connectorNotFound(ident string) error {
	return errs.NotFound("Volume connector %s could not be found.", ident)
}

func validateConnector(typ, id string, extra map[string]any) error {
	if !slices.Contains(ConnectorTypes, typ) {
		return errs.BadRequest("type", "type %q is not a volume connector type; use one of %s", typ, strings.Join(ConnectorTypes, ", "))
	}
	if id == "" || len(id) > 255 {
		return errs.BadRequest("connector_id", "connector_id is required (at most 255 characters)")
	}
	return checkExtra(extra)
}

func connectorTaken(typ, id string) error {
	return errs.Conflict("A volume connector with type %s and connector ID %s already exists.", typ, id)
}

// CreateConnector adds a connector to a node.
func (s *Service) CreateConnector(ctx context.Context, in ConnectorInput) (out *Connector, err error) {
	id, err := newUUID(in.UUID)
	if err != nil {
		return nil, err
	}
	n, err := s.createNode(ctx, "volume connector", in.NodeUUID)
	if err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleCreate, "volume connector", id, err, map[string]any{"node": n.UUID, "type": in.Type, "connector_id": in.ConnectorID})
	}()
	if err := validateConnector(in.Type, in.ConnectorID, in.Extra); err != nil {
		return nil, err
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	vc, err := s.db.VolumeConnector.Create().SetUUID(id).SetNodeID(n.ID).SetType(in.Type).SetConnectorID(in.ConnectorID).SetExtra(in.Extra).Save(ctx)
	if ent.IsConstraintError(err) {
		if strings.Contains(err.Error(), "uuid") {
			return nil, errs.Conflict("A volume connector with UUID %s already exists.", id)
		}
		return nil, connectorTaken(in.Type, in.ConnectorID)
	}
	if err != nil {
		return nil, err
	}
	return &Connector{VolumeConnector: vc, NodeUUID: n.UUID}, nil
}

// connector finds a connector by UUID and checks rule on its node.
func (s *Service) connector(ctx context.Context, ident, rule string) (*ent.VolumeConnector, *ent.Node, error) {
	if !nodes.IsUUID(ident) {
		return nil, nil, errs.BadRequest("connector_uuid", "Expected a UUID for connector_uuid, but received %s.", ident)
	}
	vc, err := s.db.VolumeConnector.Query().Where(volumeconnector.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil, connectorNotFound(ident)
	}
	if err != nil {
		return nil, nil, err
	}
	n, err := s.nodeOf(ctx, vc.NodeID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.authorizeOn(ctx, n, rule, "volume connector", vc.UUID, connectorNotFound(ident)); err != nil {
		return nil, nil, err
	}
	return vc, n, nil
}

// GetConnector shows one connector.
func (s *Service) GetConnector(ctx context.Context, ident string) (*Connector, error) {
	vc, n, err := s.connector(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	return &Connector{VolumeConnector: vc, NodeUUID: n.UUID}, nil
}

// ListOptions filter and page a list; Node is a node UUID or name.
type ListOptions struct {
	listing.Options
	Node string
}

var connectorSortKeys = map[string]listing.Key{
	"id": {Col: volumeconnector.FieldID}, "uuid": {Col: volumeconnector.FieldUUID},
	"type": {Col: volumeconnector.FieldType}, "connector_id": {Col: volumeconnector.FieldConnectorID},
	"node_id": {Col: volumeconnector.FieldNodeID}, "created_at": {Col: volumeconnector.FieldCreatedAt},
}

func connectorSortValue(vc *ent.VolumeConnector, col string) any {
	switch col {
	case volumeconnector.FieldUUID:
		return vc.UUID
	case volumeconnector.FieldType:
		return vc.Type
	case volumeconnector.FieldConnectorID:
		return vc.ConnectorID
	case volumeconnector.FieldNodeID:
		return vc.NodeID
	case volumeconnector.FieldCreatedAt:
		return vc.CreatedAt
	}
	return vc.ID
}

// ListConnectors lists the connectors the caller may see: every one for
// list_all, else those of nodes its project owns or leases; the filter is
// SQL.
func (s *Service) ListConnectors(ctx context.Context, o ListOptions) ([]*Connector, bool, error) {
	q := s.db.VolumeConnector.Query()
	if o.Node != "" {
		n, err := s.listNode(ctx, o.Node)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(volumeconnector.NodeID(n.ID))
	}
	project, err := s.listScope(ctx, "volume connector")
	if err != nil {
		return nil, false, err
	}
	if project != nil {
		q = q.Where(volumeconnector.HasNodeWith(node.Or(node.Owner(*project), node.Lessee(*project))))
	}
	plan, err := listing.Check(o.Options, connectorSortKeys)
	if err != nil {
		return nil, false, err
	}
	if o.Marker != "" {
		m, _, err := s.connector(ctx, o.Marker, RuleGet)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a volume connector", o.Marker)
		}
		q = q.Where(plan.After(connectorSortValue(m, plan.Key.Col), m.ID))
	}
	vcs, err := q.WithNode(func(nq *ent.NodeQuery) { nq.Select(node.FieldID, node.FieldUUID) }).Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(vcs) > plan.Limit
	if more {
		vcs = vcs[:plan.Limit]
	}
	out := make([]*Connector, len(vcs))
	for i, vc := range vcs {
		out[i] = &Connector{VolumeConnector: vc, NodeUUID: vc.Edges.Node.UUID}
	}
	return out, more, nil
}

var connectorPatchable = []string{"connector_id", "extra", "node_uuid", "type"}

// PatchConnector applies an RFC 6902 patch. The node's row and the
// connector's are held from the read to the write, and the node must be
// powered off, as Ironic's conductor requires.
func (s *Service) PatchConnector(ctx context.Context, ident string, raw []byte) (out *Connector, err error) {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	vc, n, err := s.connector(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	if err := chassis.CheckPaths(ops, connectorPatchable); err != nil {
		return nil, err
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "volume connector", vc.UUID, err, map[string]any{"changed": changed})
		}
	}()
	target := n
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cnt, err := tx.VolumeConnector.Update().Where(volumeconnector.ID(vc.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if cnt == 0 {
			return connectorNotFound(ident)
		}
		cur, err := tx.VolumeConnector.Get(ctx, vc.ID)
		if err != nil {
			return err
		}
		before := map[string]any{"connector_id": cur.ConnectorID, "extra": cur.Extra, "node_uuid": n.UUID, "type": cur.Type}
		after, err := patchdoc.Apply(before, raw, "volume connector")
		if err != nil {
			return err
		}
		for _, f := range connectorPatchable {
			if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
				changed = append(changed, f)
			}
		}
		typ, ok1 := after["type"].(string)
		cid, ok2 := after["connector_id"].(string)
		nodeUUID, ok3 := after["node_uuid"].(string)
		for f, ok := range map[string]bool{"type": ok1, "connector_id": ok2, "node_uuid": ok3} {
			if !ok {
				return errs.BadRequest(f, "%s is required and must be a string", f)
			}
		}
		extra, err := chassis.Extra(after["extra"])
		if err != nil {
			return err
		}
		if err := validateConnector(typ, cid, extra); err != nil {
			return err
		}
		if nodeUUID != n.UUID {
			if target, err = s.relink(ctx, n, nodeUUID); err != nil {
				return err
			}
		}
		if err := lockNode(ctx, tx, target, "volume connector update", false); err != nil {
			return err
		}
		err = tx.VolumeConnector.UpdateOneID(vc.ID).SetType(typ).SetConnectorID(cid).SetExtra(extra).SetNodeID(target.ID).Exec(ctx)
		if ent.IsConstraintError(err) {
			return connectorTaken(typ, cid)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	vc, err = s.db.VolumeConnector.Get(ctx, vc.ID)
	if err != nil {
		return nil, err
	}
	return &Connector{VolumeConnector: vc, NodeUUID: target.UUID}, nil
}

// DeleteConnector removes a connector while its node allows it.
func (s *Service) DeleteConnector(ctx context.Context, ident string) (err error) {
	vc, n, err := s.connector(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	defer func() {
		s.guard.Done(ctx, RuleDelete, "volume connector", vc.UUID, err, map[string]any{"node": n.UUID})
	}()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := lockNode(ctx, tx, n, "volume connector deletion", true); err != nil {
			return err
		}
		return tx.VolumeConnector.DeleteOneID(vc.ID).Exec(ctx)
	})
}
