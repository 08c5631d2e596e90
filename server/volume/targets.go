package volume

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/volumetarget"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
)

// Target is a volume target with its node's UUID, its properties as the
// caller may see them.
type Target struct {
	*ent.VolumeTarget
	NodeUUID string
}

// TargetInput is a target to create.
type TargetInput struct {
	UUID       *string        `json:"uuid"`
	NodeUUID   string         `json:"node_uuid"`
	VolumeType string         `json:"volume_type"`
	VolumeID   string         `json:"volume_id"`
	BootIndex  *int           `json:"boot_index"`
	Properties map[string]any `json:"properties"`
	Extra      map[string]any `json:"extra"`
}

func targetNotFound(ident string) error {
	return errs.NotFound("Volume target %s could not be found.", ident)
}

// validateTarget checks what Ironic's schema checks: volume_type and
// volume_id are strings (volume_id fits Ironic's column), boot_index an
// integer. Ironic leaves volume_type to the storage interface, so any
// name is accepted.
func validateTarget(volumeType, volumeID string, bootIndex int, extra map[string]any) error {
	switch {
	case volumeType == "" || len(volumeType) > 64:
		return errs.BadRequest("volume_type", "volume_type is required (at most 64 characters)")
	case volumeID == "" || len(volumeID) > 36:
		return errs.BadRequest("volume_id", "volume_id is required (at most 36 characters)")
	case bootIndex < 0:
		return errs.BadRequest("boot_index", "boot_index must be 0 or more, not %d", bootIndex)
	}
	return checkExtra(extra)
}

func bootIndexTaken(i int) error {
	return errs.Conflict("A volume target with boot index '%d' for the same node already exists.", i)
}

// view shows properties only to callers with view_target_properties, and
// masks secrets even then, as Ironic does.
func (s *Service) view(vt *ent.VolumeTarget, nodeUUID string, mayView bool) *Target {
	cp := *vt
	if mayView {
		cp.Properties = maskProperties(vt.Properties)
	} else {
		cp.Properties = map[string]any{"redacted_contents": RedactedProperties}
	}
	return &Target{VolumeTarget: &cp, NodeUUID: nodeUUID}
}

func (s *Service) mayViewProperties(ctx context.Context) bool {
	return s.guard.Allowed(ctx, RuleViewProperties, policies.Target{})
}

// CreateTarget adds a target to a node.
func (s *Service) CreateTarget(ctx context.Context, in TargetInput) (out *Target, err error) {
	id, err := newUUID(in.UUID)
	if err != nil {
		return nil, err
	}
	n, err := s.createNode(ctx, "volume target", in.NodeUUID)
	if err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleCreate, "volume target", id, err, map[string]any{"node": n.UUID, "volume_type": in.VolumeType, "volume_id": in.VolumeID})
	}()
	if in.BootIndex == nil {
		return nil, errs.BadRequest("boot_index", "boot_index is required")
	}
	if err := validateTarget(in.VolumeType, in.VolumeID, *in.BootIndex, in.Extra); err != nil {
		return nil, err
	}
	for _, m := range []*map[string]any{&in.Extra, &in.Properties} {
		if *m == nil {
			*m = map[string]any{}
		}
	}
	vt, err := s.db.VolumeTarget.Create().SetUUID(id).SetNodeID(n.ID).SetVolumeType(in.VolumeType).SetVolumeID(in.VolumeID).
		SetBootIndex(*in.BootIndex).SetProperties(in.Properties).SetExtra(in.Extra).Save(ctx)
	if ent.IsConstraintError(err) {
		if strings.Contains(err.Error(), "uuid") {
			return nil, errs.Conflict("A volume target with UUID %s already exists.", id)
		}
		return nil, bootIndexTaken(*in.BootIndex)
	}
	if err != nil {
		return nil, err
	}
	return s.view(vt, n.UUID, s.mayViewProperties(ctx)), nil
}

func (s *Service) target(ctx context.Context, ident, rule string) (*ent.VolumeTarget, *ent.Node, error) {
	if !nodes.IsUUID(ident) {
		return nil, nil, errs.BadRequest("target_uuid", "Expected a UUID for target_uuid, but received %s.", ident)
	}
	vt, err := s.db.VolumeTarget.Query().Where(volumetarget.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil, targetNotFound(ident)
	}
	if err != nil {
		return nil, nil, err
	}
	n, err := s.nodeOf(ctx, vt.NodeID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.authorizeOn(ctx, n, rule, "volume target", vt.UUID, targetNotFound(ident)); err != nil {
		return nil, nil, err
	}
	return vt, n, nil
}

// GetTarget shows one target.
func (s *Service) GetTarget(ctx context.Context, ident string) (*Target, error) {
	vt, n, err := s.target(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	return s.view(vt, n.UUID, s.mayViewProperties(ctx)), nil
}

var targetSortKeys = map[string]listing.Key{
	"id": {Col: volumetarget.FieldID}, "uuid": {Col: volumetarget.FieldUUID},
	"volume_type": {Col: volumetarget.FieldVolumeType}, "volume_id": {Col: volumetarget.FieldVolumeID},
	"boot_index": {Col: volumetarget.FieldBootIndex}, "node_id": {Col: volumetarget.FieldNodeID},
	"created_at": {Col: volumetarget.FieldCreatedAt},
}

func targetSortValue(vt *ent.VolumeTarget, col string) any {
	switch col {
	case volumetarget.FieldUUID:
		return vt.UUID
	case volumetarget.FieldVolumeType:
		return vt.VolumeType
	case volumetarget.FieldVolumeID:
		return vt.VolumeID
	case volumetarget.FieldBootIndex:
		return vt.BootIndex
	case volumetarget.FieldNodeID:
		return vt.NodeID
	case volumetarget.FieldCreatedAt:
		return vt.CreatedAt
	}
	return vt.ID
}

// ListTargets lists the targets the caller may see, as ListConnectors.
func (s *Service) ListTargets(ctx context.Context, o ListOptions) ([]*Target, bool, error) {
	q := s.db.VolumeTarget.Query()
	if o.Node != "" {
		n, err := s.listNode(ctx, o.Node)
		if err != nil {
			return nil, false, err
		}
		q = q.Where(volumetarget.NodeID(n.ID))
	}
	project, err := s.listScope(ctx, "volume target")
	if err != nil {
		return nil, false, err
	}
	if project != nil {
		q = q.Where(volumetarget.HasNodeWith(node.Or(node.Owner(*project), node.Lessee(*project))))
	}
	plan, err := listing.Check(o.Options, targetSortKeys)
	if err != nil {
		return nil, false, err
	}
	if o.Marker != "" {
		m, _, err := s.target(ctx, o.Marker, RuleGet)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a volume target", o.Marker)
		}
		q = q.Where(plan.After(targetSortValue(m, plan.Key.Col), m.ID))
	}
	vts, err := q.WithNode(func(nq *ent.NodeQuery) { nq.Select(node.FieldID, node.FieldUUID) }).Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(vts) > plan.Limit
	if more {
		vts = vts[:plan.Limit]
	}
	may := s.mayViewProperties(ctx)
	out := make([]*Target, len(vts))
	for i, vt := range vts {
		out[i] = s.view(vt, vt.Edges.Node.UUID, may)
	}
	return out, more, nil
}

var targetPatchable = []string{"boot_index", "extra", "node_uuid", "properties", "volume_id", "volume_type"}

// PatchTarget applies an RFC 6902 patch, holding the node's and the
// target's rows; the node must be powered off, as Ironic requires.
// Properties a caller may not read it may not patch either: the patch
// would work on what it cannot see.
func (s *Service) PatchTarget(ctx context.Context, ident string, raw []byte) (out *Target, err error) {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	vt, n, err := s.target(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	if err := chassis.CheckPaths(ops, targetPatchable); err != nil {
		return nil, err
	}
	may := s.mayViewProperties(ctx)
	for i, op := range ops {
		if !may && (strings.HasPrefix(op.Path, "/properties") || strings.HasPrefix(op.From, "/properties")) {
			return nil, s.guard.Authorize(ctx, RuleViewProperties, "volume target", vt.UUID, policies.Target{})
		}
		// The patch works on the stored properties, secrets included, so
		// it may not read one out: no copy, move or test from its path.
		src := op.From
		if op.Op == "test" {
			src = op.Path
		}
		if strings.HasPrefix(src, "/properties/") && runbooks.IsSecret(strings.TrimPrefix(src, "/properties/")) {
			return nil, errs.BadRequest("patch", "operation %d: %s holds a secret, which can be replaced but not copied, moved or tested", i, src)
		}
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "volume target", vt.UUID, err, map[string]any{"changed": changed})
		}
	}()
	target := n
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cnt, err := tx.VolumeTarget.Update().Where(volumetarget.ID(vt.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if cnt == 0 {
			return targetNotFound(ident)
		}
		cur, err := tx.VolumeTarget.Get(ctx, vt.ID)
		if err != nil {
			return err
		}
		before := map[string]any{"boot_index": cur.BootIndex, "extra": cur.Extra, "node_uuid": n.UUID,
			"properties": cur.Properties, "volume_id": cur.VolumeID, "volume_type": cur.VolumeType}
		after, err := patchdoc.Apply(before, raw, "volume target")
		if err != nil {
			return err
		}
		for _, f := range targetPatchable {
			if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
				changed = append(changed, f)
			}
		}
		vtype, ok1 := after["volume_type"].(string)
		vid, ok2 := after["volume_id"].(string)
		nodeUUID, ok3 := after["node_uuid"].(string)
		for f, ok := range map[string]bool{"volume_type": ok1, "volume_id": ok2, "node_uuid": ok3} {
			if !ok {
				return errs.BadRequest(f, "%s is required and must be a string", f)
			}
		}
		bi, ok := after["boot_index"].(float64)
		if !ok || bi != float64(int(bi)) {
			return errs.BadRequest("boot_index", "boot_index is required and must be an integer")
		}
		extra, err := chassis.Extra(after["extra"])
		if err != nil {
			return err
		}
		props, err := chassis.Extra(after["properties"])
		if err != nil {
			return errs.BadRequest("properties", "properties must be an object, not %v", after["properties"])
		}
		if err := validateTarget(vtype, vid, int(bi), extra); err != nil {
			return err
		}
		if nodeUUID != n.UUID {
			if target, err = s.relink(ctx, n, nodeUUID); err != nil {
				return err
			}
		}
		if err := lockNode(ctx, tx, target, "volume target update", false); err != nil {
			return err
		}
		err = tx.VolumeTarget.UpdateOneID(vt.ID).SetVolumeType(vtype).SetVolumeID(vid).SetBootIndex(int(bi)).
			SetProperties(props).SetExtra(extra).SetNodeID(target.ID).Exec(ctx)
		if ent.IsConstraintError(err) {
			return bootIndexTaken(int(bi))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	vt, err = s.db.VolumeTarget.Get(ctx, vt.ID)
	if err != nil {
		return nil, err
	}
	return s.view(vt, target.UUID, may), nil
}

// DeleteTarget removes a target while its node allows it.
func (s *Service) DeleteTarget(ctx context.Context, ident string) (err error) {
	vt, n, err := s.target(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "volume target", vt.UUID, err, map[string]any{"node": n.UUID}) }()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := lockNode(ctx, tx, n, "volume target deletion", true); err != nil {
			return err
		}
		return tx.VolumeTarget.DeleteOneID(vt.ID).Exec(ctx)
	})
}
