// Package deploytemplates serves Ironic's deploy templates: a trait name
// and the deploy steps a deploy would add for a node carrying that trait.
// Anvil does not deploy, so it stores and serves them; the steps share
// the runbooks' step model and validation.
package deploytemplates

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/deploytemplate"
	"github.com/anvilproject/anvil/ent/deploytemplatestep"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as Ironic names them.
const (
	RuleGet    = "baremetal:deploy_template:get"
	RuleCreate = "baremetal:deploy_template:create"
	RuleUpdate = "baremetal:deploy_template:update"
	RuleDelete = "baremetal:deploy_template:delete"
)

// Step is a deploy step: a runbook step with a priority in place of an
// order.
type Step struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Priority  int            `json:"priority"`
}

// Template is a deploy template with its steps.
type Template struct {
	*ent.DeployTemplate
	Steps []Step
}

// Service serves deploy templates.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the deploy template service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

func notFound(ident string) error {
	return errs.NotFound("Deploy template %s could not be found.", ident)
}

func (s *Service) authorize(ctx context.Context, rule, id string) error {
	return s.guard.Authorize(ctx, rule, "deploy template", id, policies.Target{})
}

// Input is a template to create: the decoded body, checked field by field
// so each error names its field.
type Input struct {
	UUID  *string        `json:"uuid"`
	Name  string         `json:"name"`
	Steps any            `json:"steps"`
	Extra map[string]any `json:"extra"`
}

// ParseSteps checks steps as Ironic's deploy step schema does (a
// non-empty list of {interface, step, args, priority}, nothing else,
// priority a non-negative integer or a string of digits, each interface
// and step at most once) and then as runbook steps are: their shape only,
// for Ironic checks a deploy step's arguments when a deployment uses it.
func ParseSteps(v any) ([]Step, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errs.BadRequest("steps", "steps is required: a list of {interface, step, args, priority}")
	}
	out := make([]Step, len(list))
	cs := make([]conductor.Step, len(list))
	seen := map[string]bool{}
	for i, x := range list {
		where := fmt.Sprintf("steps[%d]", i)
		m, ok := x.(map[string]any)
		if !ok {
			return nil, errs.BadRequest(where, "%s must be an object", where)
		}
		for k := range m {
			if !slices.Contains([]string{"interface", "step", "args", "priority"}, k) {
				return nil, errs.BadRequest(where+"."+k, "%s: unknown attribute %q", where, k)
			}
		}
		st := &out[i]
		st.Interface, _ = m["interface"].(string)
		st.Step, _ = m["step"].(string)
		if st.Args, ok = m["args"].(map[string]any); !ok {
			return nil, errs.BadRequest(where+".args", "%s: args is required and must be an object", where)
		}
		p, err := priority(m["priority"])
		if err != nil {
			return nil, errs.BadRequest(where+".priority", "%s: priority %v", where, err)
		}
		st.Priority = p
		if key := st.Interface + "." + st.Step; seen[key] {
			return nil, errs.BadRequest("steps", "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: %s, step: %s.", st.Interface, st.Step)
		} else {
			seen[key] = true
		}
		cs[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	return out, conductor.ValidateStepShape("steps", cs)
}

// leaseSafe holds a template's steps to the rule every route to a step
// obeys (conductor.LeaseSafe): a project scope the policy lets write
// templates still may not store a step that outlives a lease, since a
// template's steps run on whichever node asks for its trait.
func leaseSafe(ctx context.Context, steps []Step) error {
	cs := make([]conductor.Step, len(steps))
	for i, st := range steps {
		cs[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	return conductor.LeaseSafe(ctx, conductor.RouteDeployTemplate, cs)
}

func priority(v any) (int, error) {
	switch p := v.(type) {
	case float64:
		if p >= 0 && p == float64(int(p)) && p <= 1<<31-1 {
			return int(p), nil
		}
	case string:
		if n, err := strconv.Atoi(p); err == nil && n >= 0 && strings.Trim(p, "0123456789") == "" {
			return n, nil
		}
	case nil:
		return 0, fmt.Errorf("is required")
	}
	return 0, fmt.Errorf("must be a non-negative integer, not %v", v)
}

func validate(name string, extra map[string]any) error {
	if err := nodes.ValidateTrait(name); err != nil {
		return errs.BadRequest("name", "name %q must be a trait name (CUSTOM_* or a standard trait): %v", name, err)
	}
	if len(extra) > 100 {
		return errs.BadRequest("extra", "extra has more than 100 keys")
	}
	return nil
}

func nameTaken(name string) error {
	return errs.Conflict("A deploy template with name %s already exists.", name)
}

func writeSteps(ctx context.Context, tx *ent.Client, id int, steps []Step) error {
	bulk := make([]*ent.DeployTemplateStepCreate, len(steps))
	for i, st := range steps {
		bulk[i] = tx.DeployTemplateStep.Create().SetDeployTemplateID(id).SetInterface(st.Interface).SetStep(st.Step).
			SetArgs(st.Args).SetPriority(st.Priority).SetPosition(i)
	}
	return tx.DeployTemplateStep.CreateBulk(bulk...).Exec(ctx)
}

// Create makes a template.
func (s *Service) Create(ctx context.Context, in Input) (out *Template, err error) {
	id := uuid.NewString()
	if in.UUID != nil && *in.UUID != "" {
		id = strings.ToLower(*in.UUID)
	}
	if err := s.authorize(ctx, RuleCreate, id); err != nil {
		return nil, err
	}
	defer func() { s.guard.Done(ctx, RuleCreate, "deploy template", id, err, map[string]any{"name": in.Name}) }()
	if !nodes.IsUUID(id) {
		return nil, errs.BadRequest("uuid", "uuid %q is not a valid UUID", id)
	}
	if err := validate(in.Name, in.Extra); err != nil {
		return nil, err
	}
	steps, err := ParseSteps(in.Steps)
	if err != nil {
		return nil, err
	}
	if err := leaseSafe(ctx, steps); err != nil {
		return nil, err
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		t, err := tx.DeployTemplate.Create().SetUUID(id).SetName(in.Name).SetExtra(in.Extra).Save(ctx)
		if err != nil {
			return err
		}
		return writeSteps(ctx, tx, t.ID, steps)
	})
	if ent.IsConstraintError(err) {
		if taken, _ := s.db.DeployTemplate.Query().Where(deploytemplate.UUID(id)).Exist(ctx); taken {
			return nil, errs.Conflict("A deploy template with UUID %s already exists.", id)
		}
		return nil, nameTaken(in.Name)
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

func find(ctx context.Context, c *ent.Client, ident string) (*ent.DeployTemplate, error) {
	q := c.DeployTemplate.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(deploytemplate.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(deploytemplate.Name(ident))
	}
	t, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	return t, err
}

func stepsOf(rows []*ent.DeployTemplateStep) []Step {
	out := make([]Step, len(rows))
	for i, r := range rows {
		out[i] = Step{Interface: r.Interface, Step: r.Step, Args: r.Args, Priority: r.Priority}
	}
	return out
}

// masked hides secret-looking step arguments, as Ironic's step_sanitize.
func masked(steps []Step) []Step {
	out := make([]Step, len(steps))
	for i, st := range steps {
		out[i] = st
		out[i].Args = map[string]any{}
		for k, v := range st.Args {
			if runbooks.IsSecret(k) {
				v = runbooks.Masked
			}
			out[i].Args[k] = v
		}
	}
	return out
}

// Get shows one template by UUID or name, its secret arguments masked.
func (s *Service) Get(ctx context.Context, ident string) (*Template, error) {
	if err := s.authorize(ctx, RuleGet, ident); err != nil {
		return nil, err
	}
	t, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return nil, err
	}
	rows, err := t.QuerySteps().Order(ent.Asc(deploytemplatestep.FieldPosition)).All(ctx)
	if err != nil {
		return nil, err
	}
	return &Template{DeployTemplate: t, Steps: masked(stepsOf(rows))}, nil
}

var sortKeys = map[string]listing.Key{
	"id": {Col: deploytemplate.FieldID}, "uuid": {Col: deploytemplate.FieldUUID}, "name": {Col: deploytemplate.FieldName},
	"created_at": {Col: deploytemplate.FieldCreatedAt},
}

func sortValue(t *ent.DeployTemplate, col string) any {
	switch col {
	case deploytemplate.FieldUUID:
		return t.UUID
	case deploytemplate.FieldName:
		return t.Name
	case deploytemplate.FieldCreatedAt:
		return t.CreatedAt
	}
	return t.ID
}

// List pages through the templates; withSteps loads their steps.
func (s *Service) List(ctx context.Context, o listing.Options, withSteps bool) ([]*Template, bool, error) {
	if err := s.authorize(ctx, RuleGet, ""); err != nil {
		return nil, false, err
	}
	plan, err := listing.Check(o, sortKeys)
	if err != nil {
		return nil, false, err
	}
	q := s.db.DeployTemplate.Query()
	if o.Marker != "" {
		m, err := find(ctx, s.db.Client, o.Marker)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a deploy template", o.Marker)
		}
		q = q.Where(plan.After(sortValue(m, plan.Key.Col), m.ID))
	}
	if withSteps {
		q = q.WithSteps(func(sq *ent.DeployTemplateStepQuery) { sq.Order(ent.Asc(deploytemplatestep.FieldPosition)) })
	}
	ts, err := q.Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(ts) > plan.Limit
	if more {
		ts = ts[:plan.Limit]
	}
	out := make([]*Template, len(ts))
	for i, t := range ts {
		out[i] = &Template{DeployTemplate: t, Steps: masked(stepsOf(t.Edges.Steps))}
	}
	return out, more, nil
}

var patchable = []string{"extra", "name", "steps"}

// Patch applies an RFC 6902 patch to name, extra and steps. The read, the
// patch and the write happen in one transaction that holds the template's
// row, so two patches appending a step both land, which Ironic's own
// controller notes it cannot promise.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte) (out *Template, err error) {
	if err := s.authorize(ctx, RuleUpdate, ident); err != nil {
		return nil, err
	}
	t, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return nil, err
	}
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	if err := chassis.CheckPaths(ops, patchable); err != nil {
		return nil, err
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "deploy template", t.UUID, err, map[string]any{"changed": changed})
		}
	}()
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		// The UPDATE takes the row for the rest of the transaction.
		n, err := tx.DeployTemplate.Update().Where(deploytemplate.ID(t.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return notFound(ident)
		}
		cur, err := tx.DeployTemplate.Get(ctx, t.ID)
		if err != nil {
			return err
		}
		rows, err := cur.QuerySteps().Order(ent.Asc(deploytemplatestep.FieldPosition)).All(ctx)
		if err != nil {
			return err
		}
		before := map[string]any{"name": cur.Name, "extra": cur.Extra, "steps": stepsOf(rows)}
		// The patch works on the stored arguments, secrets included, so it
		// may not read one out: no copy, move or test from a secret or
		// from anything holding one.
		for i, op := range ops {
			src := op.From
			if op.Op == "test" {
				src = op.Path
			}
			if (op.Op == "copy" || op.Op == "move" || op.Op == "test") && runbooks.ReadsSecret(before, src) {
				return errs.BadRequest("patch", "operation %d: %s holds a secret, which can be replaced but not copied, moved or tested", i, src)
			}
		}
		after, err := patchdoc.Apply(before, raw, "deploy template")
		if err != nil {
			return err
		}
		for _, f := range patchable {
			if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
				changed = append(changed, f)
			}
		}
		name, _ := after["name"].(string)
		extra, err := chassis.Extra(after["extra"])
		if err != nil {
			return err
		}
		if err := validate(name, extra); err != nil {
			return err
		}
		steps, err := ParseSteps(after["steps"])
		if err != nil {
			return err
		}
		if err := leaseSafe(ctx, steps); err != nil {
			return err
		}
		err = tx.DeployTemplate.UpdateOneID(t.ID).SetName(name).SetExtra(extra).Exec(ctx)
		if ent.IsConstraintError(err) {
			return nameTaken(name)
		}
		if err != nil || !slices.Contains(changed, "steps") {
			return err
		}
		if _, err := tx.DeployTemplateStep.Delete().Where(deploytemplatestep.DeployTemplateID(t.ID)).Exec(ctx); err != nil {
			return err
		}
		return writeSteps(ctx, tx, t.ID, steps)
	})
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, t.UUID)
}

// Delete removes a template and its steps.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	if err := s.authorize(ctx, RuleDelete, ident); err != nil {
		return err
	}
	t, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "deploy template", t.UUID, err, nil) }()
	return s.db.DeployTemplate.DeleteOneID(t.ID).Exec(ctx)
}
