// Package chassis serves Ironic's chassis: a description and extra data
// grouping nodes. The rules are system rules, as Ironic's: a project sees
// no chassis, only its nodes' chassis_uuid.
package chassis

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/chassis"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as Ironic names them.
const (
	RuleGet    = "baremetal:chassis:get"
	RuleCreate = "baremetal:chassis:create"
	RuleUpdate = "baremetal:chassis:update"
	RuleDelete = "baremetal:chassis:delete"
)

// Service serves chassis.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the chassis service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

// NotFound is Ironic's 404 for a chassis.
func NotFound(ident string) error { return errs.NotFound("Chassis %s could not be found.", ident) }

// Input is a chassis to create.
type Input struct {
	UUID        *string        `json:"uuid"`
	Description *string        `json:"description"`
	Extra       map[string]any `json:"extra"`
}

func validate(description *string, extra map[string]any) error {
	if description != nil && len(*description) > 255 {
		return errs.BadRequest("description", "description is longer than 255 characters")
	}
	if len(extra) > 100 {
		return errs.BadRequest("extra", "extra has more than 100 keys")
	}
	return nil
}

func (s *Service) authorize(ctx context.Context, rule, id string) error {
	return s.guard.Authorize(ctx, rule, "chassis", id, policies.Target{})
}

// find looks a chassis up by UUID; anything else is a 400 naming the
// parameter, as Ironic validates chassis_uuid.
func find(ctx context.Context, c *ent.Client, ident string) (*ent.Chassis, error) {
	if !nodes.IsUUID(ident) {
		return nil, errs.BadRequest("chassis_uuid", "Expected a UUID for chassis_uuid but received %s.", ident)
	}
	ch, err := c.Chassis.Query().Where(chassis.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, NotFound(ident)
	}
	return ch, err
}

// Create makes a chassis.
func (s *Service) Create(ctx context.Context, in Input) (out *ent.Chassis, err error) {
	id := uuid.NewString()
	if in.UUID != nil && *in.UUID != "" {
		id = strings.ToLower(*in.UUID)
	}
	if err := s.authorize(ctx, RuleCreate, id); err != nil {
		return nil, err
	}
	defer func() {
		s.guard.Done(ctx, RuleCreate, "chassis", id, err, map[string]any{"description": in.Description})
	}()
	if !nodes.IsUUID(id) {
		return nil, errs.BadRequest("uuid", "uuid %q is not a valid UUID", id)
	}
	if err := validate(in.Description, in.Extra); err != nil {
		return nil, err
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	ch, err := s.db.Chassis.Create().SetUUID(id).SetNillableDescription(in.Description).SetExtra(in.Extra).Save(ctx)
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("A chassis with UUID %s already exists.", id)
	}
	return ch, err
}

// Get shows one chassis.
func (s *Service) Get(ctx context.Context, ident string) (*ent.Chassis, error) {
	if err := s.authorize(ctx, RuleGet, ident); err != nil {
		return nil, err
	}
	return find(ctx, s.db.Client, ident)
}

// sortKeys are the columns a list sorts by; extra is refused, as Ironic.
var sortKeys = map[string]listing.Key{
	"id": {Col: chassis.FieldID}, "uuid": {Col: chassis.FieldUUID},
	"description": {Col: chassis.FieldDescription, Nullable: true},
	"created_at":  {Col: chassis.FieldCreatedAt}, "updated_at": {Col: chassis.FieldUpdatedAt, Nullable: true},
}

func sortValue(ch *ent.Chassis, col string) any {
	switch col {
	case chassis.FieldUUID:
		return ch.UUID
	case chassis.FieldDescription:
		if ch.Description == nil {
			return ""
		}
		return *ch.Description
	case chassis.FieldCreatedAt:
		return ch.CreatedAt
	case chassis.FieldUpdatedAt:
		if ch.UpdatedAt == nil {
			return ""
		}
		return *ch.UpdatedAt
	}
	return ch.ID
}

// List pages through the chassis; it reports whether more follow.
func (s *Service) List(ctx context.Context, o listing.Options) ([]*ent.Chassis, bool, error) {
	if err := s.authorize(ctx, RuleGet, ""); err != nil {
		return nil, false, err
	}
	plan, err := listing.Check(o, sortKeys)
	if err != nil {
		return nil, false, err
	}
	q := s.db.Chassis.Query()
	if o.Marker != "" {
		m, err := find(ctx, s.db.Client, o.Marker)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a chassis", o.Marker)
		}
		q = q.Where(plan.After(sortValue(m, plan.Key.Col), m.ID))
	}
	cs, err := q.Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	if len(cs) > plan.Limit {
		return cs[:plan.Limit], true, nil
	}
	return cs, false, nil
}

// patchable are the fields a chassis patch may change.
var patchable = []string{"description", "extra"}

// Patch applies an RFC 6902 patch to description and extra. The read, the
// patch and the write happen in one transaction that holds the row, so
// concurrent patches serialise instead of overwriting each other.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte) (out *ent.Chassis, err error) {
	if err := s.authorize(ctx, RuleUpdate, ident); err != nil {
		return nil, err
	}
	ch, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return nil, err
	}
	if err := checkPaths(raw, patchable); err != nil {
		return nil, err
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "chassis", ch.UUID, err, map[string]any{"changed": changed})
		}
	}()
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		// The UPDATE takes the row for the rest of the transaction.
		n, err := tx.Chassis.Update().Where(chassis.ID(ch.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return NotFound(ident)
		}
		cur, err := tx.Chassis.Get(ctx, ch.ID)
		if err != nil {
			return err
		}
		before := map[string]any{"description": nil, "extra": cur.Extra}
		if cur.Description != nil {
			before["description"] = *cur.Description
		}
		after, err := patchdoc.Apply(before, raw, "chassis")
		if err != nil {
			return err
		}
		upd := tx.Chassis.UpdateOneID(ch.ID)
		switch d := after["description"].(type) {
		case nil:
			upd.ClearDescription()
		case string:
			if err := validate(&d, nil); err != nil {
				return err
			}
			upd.SetDescription(d)
		default:
			return errs.BadRequest("description", "description must be a string or null, not %v", d)
		}
		extra, err := Extra(after["extra"])
		if err != nil {
			return err
		}
		if err := validate(nil, extra); err != nil {
			return err
		}
		for _, f := range patchable {
			if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
				changed = append(changed, f)
			}
		}
		return upd.SetExtra(extra).Exec(ctx)
	})
	if err != nil {
		return nil, err
	}
	return s.db.Chassis.Get(ctx, ch.ID)
}

// Extra reads a patched extra: an object, or null for an empty one.
func Extra(v any) (map[string]any, error) {
	switch e := v.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return e, nil
	}
	return nil, errs.BadRequest("extra", "extra must be an object, not %v", v)
}

// checkPaths refuses a patch touching anything but the allowed fields, in
// Ironic's words.
func checkPaths(raw []byte, allowed []string) error {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return err
	}
	return CheckPaths(ops, allowed)
}

// CheckPaths refuses operations on fields outside allowed, naming the
// field, as Ironic's patch_validate_allowed_fields words it.
func CheckPaths(ops []nodes.PatchOp, allowed []string) error {
	for i, op := range ops {
		paths := []string{op.Path}
		if op.From != "" {
			paths = append(paths, op.From)
		}
		for _, path := range paths {
			top, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
			if !strings.HasPrefix(path, "/") || !slices.Contains(allowed, top) {
				field := top
				if field == "" {
					field = "patch"
				}
				return errs.BadRequest(field, "Cannot patch %s. Only the following can be updated: %s (operation %d)", path, strings.Join(allowed, ", "), i)
			}
		}
	}
	return nil
}

// Delete removes a chassis that holds no nodes; one that does is a 400,
// as Ironic's ChassisNotEmpty. The foreign key refuses a node added in
// between.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	if err := s.authorize(ctx, RuleDelete, ident); err != nil {
		return err
	}
	ch, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "chassis", ch.UUID, err, nil) }()
	notEmpty := errs.BadRequest("chassis_uuid", "Cannot complete the requested action because chassis %s contains nodes.", ch.UUID)
	n, err := s.db.Node.Query().Where(node.ChassisID(ch.ID)).Count(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		return notEmpty
	}
	err = s.db.Chassis.DeleteOneID(ch.ID).Exec(ctx)
	switch {
	case ent.IsConstraintError(err):
		return notEmpty
	case ent.IsNotFound(err):
		return NotFound(ident)
	}
	return err
}
