// Package runbooks is curated maintenance: named, ordered steps owned by
// a project or the system, public or private, that owners and lessees run
// on their nodes instead of arbitrary steps.
package runbooks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/ent/runbook"
	"github.com/anvilproject/anvil/ent/runbookstep"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, named as Ironic names them; publishing and setting an owner are
// rules of their own so an operator can tune them apart.
const (
	RuleGet       = "baremetal:runbook:get"
	RuleList      = "baremetal:runbook:list"
	RuleListAll   = "baremetal:runbook:list_all"
	RuleCreate    = "baremetal:runbook:create"
	RuleUpdate    = "baremetal:runbook:update"
	RuleDelete    = "baremetal:runbook:delete"
	RulePublish   = "baremetal:runbook:update:public"
	RuleSetOwner  = "baremetal:runbook:update:owner"
	RuleUse       = "baremetal:runbook:use"
	StepRulePrefx = "baremetal:step:execute:"
)

// Masked replaces secret-looking step arguments on read.
const Masked = "******"

// Step is a runbook step with its explicit order.
type Step struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Order     int            `json:"order"`
}

// Runbook is a runbook as the API shows it.
type Runbook struct {
	*ent.Runbook
	Steps []Step // nil when not loaded
}

// Service serves runbook operations for the principal in the context.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the runbook service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

// Target is the policy target for a runbook.
func Target(r *ent.Runbook) policies.Target {
	t := policies.Target{RunbookPublic: r.Public}
	if r.Owner != nil {
		t.RunbookOwner = *r.Owner
	}
	return t
}

func notFound(ident string) error { return errs.NotFound("Runbook %s could not be found.", ident) }

func (s *Service) lookup(ctx context.Context, ident string) (*ent.Runbook, error) {
	q := s.db.Runbook.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(runbook.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(runbook.Name(ident))
	}
	r, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	return r, err
}

// authorized finds a runbook the caller may see and checks rules on it;
// one the caller may not see is a 404, never a 403.
func (s *Service) authorized(ctx context.Context, ident string, rules ...string) (*ent.Runbook, error) {
	r, err := s.lookup(ctx, ident)
	if err != nil {
		return nil, err
	}
	t := Target(r)
	if !s.guard.Allowed(ctx, RuleGet, t) {
		_ = s.guard.Authorize(ctx, RuleGet, "runbook", r.UUID, t) // audits the denial
		return nil, notFound(ident)
	}
	for _, rule := range rules {
		if err := s.guard.Authorize(ctx, rule, "runbook", r.UUID, t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (s *Service) steps(ctx context.Context, r *ent.Runbook) ([]Step, error) {
	rs, err := r.QuerySteps().Order(ent.Asc(runbookstep.FieldOrder)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Step, len(rs))
	for i, x := range rs {
		out[i] = Step{Interface: x.Interface, Step: x.Step, Args: x.Args, Order: x.Order}
		if out[i].Args == nil {
			out[i].Args = map[string]any{}
		}
	}
	return out, nil
}

// Get returns a runbook with its steps, secret arguments masked.
func (s *Service) Get(ctx context.Context, ident string) (*Runbook, error) {
	r, err := s.authorized(ctx, ident)
	if err != nil {
		return nil, err
	}
	st, err := s.steps(ctx, r)
	if err != nil {
		return nil, err
	}
	return &Runbook{Runbook: r, Steps: MaskSteps(st)}, nil
}

// ListOptions filter a list.
type ListOptions struct {
	Owner  *string
	Public *bool
	Limit  int
	Marker string
	Detail bool // load steps
}

// List returns the runbooks the caller may see: all of them for
// list_all, else public ones and its project's. The filter is SQL.
func (s *Service) List(ctx context.Context, o ListOptions) ([]*Runbook, bool, error) {
	if err := s.guard.Authorize(ctx, RuleList, "runbook", "", policies.Target{}); err != nil {
		return nil, false, err
	}
	q := s.db.Runbook.Query()
	if !s.guard.Allowed(ctx, RuleListAll, policies.Target{}) {
		p := policies.PrincipalFrom(ctx)
		visible := []predicate.Runbook{runbook.Public(true)}
		if p != nil && p.Project != "" {
			visible = append(visible, runbook.Owner(p.Project))
		}
		q = q.Where(runbook.Or(visible...))
	}
	if o.Owner != nil {
		q = q.Where(runbook.Owner(*o.Owner))
	}
	if o.Public != nil {
		q = q.Where(runbook.Public(*o.Public))
	}
	if o.Marker != "" {
		m, err := s.lookup(ctx, o.Marker)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name a runbook", o.Marker)
		}
		q = q.Where(runbook.IDGT(m.ID))
	}
	if o.Limit <= 0 || o.Limit > 1000 {
		o.Limit = 1000
	}
	q = q.Order(ent.Asc(runbook.FieldID)).Limit(o.Limit + 1)
	if o.Detail {
		q = q.WithSteps(func(sq *ent.RunbookStepQuery) { sq.Order(ent.Asc(runbookstep.FieldOrder)) })
	}
	rs, err := q.All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(rs) > o.Limit
	if more {
		rs = rs[:o.Limit]
	}
	out := make([]*Runbook, len(rs))
	for i, r := range rs {
		out[i] = &Runbook{Runbook: r}
		if o.Detail {
			st := make([]Step, len(r.Edges.Steps))
			for j, x := range r.Edges.Steps {
				st[j] = Step{Interface: x.Interface, Step: x.Step, Args: x.Args, Order: x.Order}
			}
			out[i].Steps = MaskSteps(st)
		}
	}
	return out, more, nil
}

// MaskSteps hides argument values whose names look secret.
func MaskSteps(st []Step) []Step {
	out := make([]Step, len(st))
	for i, s := range st {
		out[i] = s
		args := map[string]any{}
		for k, v := range s.Args {
			if isSecret(k) {
				v = Masked
			}
			args[k] = v
		}
		out[i].Args = args
	}
	return out
}

func isSecret(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || strings.Contains(k, "token") || strings.Contains(k, "key") || strings.Contains(k, "secret")
}

// Input is a runbook to create, or the document a patch produces.
type Input struct {
	Name           string         `json:"name"`
	Public         bool           `json:"public"`
	Owner          *string        `json:"owner"`
	DisableRamdisk bool           `json:"disable_ramdisk"`
	Extra          map[string]any `json:"extra"`
	Traits         []string       `json:"traits"`
	Steps          []Step         `json:"steps"`
}

// validate checks everything but policy.
func validate(in *Input) error {
	if err := nodes.ValidateTrait(in.Name); err != nil {
		return errs.BadRequest("name", "name %q must be a trait name (CUSTOM_* or a standard trait): %v", in.Name, err)
	}
	if in.Owner != nil {
		if *in.Owner == "" {
			in.Owner = nil
		} else if err := nodes.ValidateProject("owner", *in.Owner); err != nil {
			return err
		}
	}
	if in.Public && in.Owner != nil {
		return errs.BadRequest("owner", "a public runbook has no owner; clear owner or public")
	}
	if len(in.Traits) > 50 {
		return errs.BadRequest("traits", "at most 50 traits")
	}
	for _, t := range in.Traits {
		if err := nodes.ValidateTrait(t); err != nil {
			return errs.BadRequest("traits", "%v", err)
		}
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	sort.SliceStable(in.Steps, func(i, j int) bool { return in.Steps[i].Order < in.Steps[j].Order })
	seen := map[int]bool{}
	cs := make([]conductor.Step, len(in.Steps))
	for i, st := range in.Steps {
		if st.Order < 0 || seen[st.Order] {
			return errs.BadRequest(fmt.Sprintf("steps[%d].order", i), "step orders must be distinct non-negative numbers; %d repeats or is negative", st.Order)
		}
		seen[st.Order] = true
		cs[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	return conductor.ValidateSteps("steps", cs)
}

// stepRules refuses steps an operator restricted with a per-step rule
// (baremetal:step:execute:<interface>.<step>); no rule means no limit.
func (s *Service) stepRules(ctx context.Context, steps []Step, t policies.Target, id string) error {
	for _, st := range steps {
		rule := StepRulePrefx + st.Interface + "." + st.Step
		if !s.guard.Enforcer.Has(rule) {
			continue
		}
		if err := s.guard.Authorize(ctx, rule, "runbook", id, t); err != nil {
			return err
		}
	}
	return nil
}

// Create makes a runbook. A project caller's runbook belongs to its
// project and is private; only the system publishes or picks owners.
func (s *Service) Create(ctx context.Context, in Input) (out *Runbook, err error) {
	p := policies.PrincipalFrom(ctx)
	id := uuid.NewString()
	defer func() { s.guard.Done(ctx, RuleCreate, "runbook", id, err, map[string]any{"name": in.Name}) }()
	if err := validate(&in); err != nil {
		return nil, err
	}
	if p != nil && !p.System {
		if in.Owner != nil && *in.Owner != p.Project {
			return nil, errs.Forbidden("a project may only create runbooks it owns")
		}
		if in.Public {
			return nil, errs.Forbidden("only the system may publish a runbook")
		}
		in.Owner = &p.Project
	}
	t := policies.Target{RunbookPublic: in.Public}
	if in.Owner != nil {
		t.RunbookOwner = *in.Owner
	}
	if err := s.guard.Authorize(ctx, RuleCreate, "runbook", id, t); err != nil {
		return nil, err
	}
	if in.Public {
		if err := s.guard.Authorize(ctx, RulePublish, "runbook", id, t); err != nil {
			return nil, err
		}
	}
	if p != nil && p.System && in.Owner != nil {
		if err := s.guard.Authorize(ctx, RuleSetOwner, "runbook", id, t); err != nil {
			return nil, err
		}
	}
	if err := s.stepRules(ctx, in.Steps, t, id); err != nil {
		return nil, err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		r, err := tx.Runbook.Create().SetUUID(id).SetName(in.Name).SetPublic(in.Public).SetNillableOwner(in.Owner).
			SetDisableRamdisk(in.DisableRamdisk).SetExtra(in.Extra).SetTraits(in.Traits).Save(ctx)
		if err != nil {
			return err
		}
		return createSteps(ctx, tx, r.ID, in.Steps)
	})
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("A runbook named %s already exists.", in.Name)
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

func createSteps(ctx context.Context, tx *ent.Client, id int, steps []Step) error {
	bulk := make([]*ent.RunbookStepCreate, len(steps))
	for i, st := range steps {
		args := st.Args
		if args == nil {
			args = map[string]any{}
		}
		bulk[i] = tx.RunbookStep.Create().SetRunbookID(id).SetInterface(st.Interface).SetStep(st.Step).SetArgs(args).SetOrder(st.Order)
	}
	return tx.RunbookStep.CreateBulk(bulk...).Exec(ctx)
}

// Delete removes a runbook.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	r, err := s.authorized(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "runbook", r.UUID, err, nil) }()
	return s.db.Runbook.DeleteOneID(r.ID).Exec(ctx)
}

// Patch applies an RFC 6902 patch. Publishing clears the owner; owner
// and public are the system's to change.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte) (out *Runbook, err error) {
	r, err := s.authorized(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	defer func() { s.guard.Done(ctx, RuleUpdate, "runbook", r.UUID, err, nil) }()
	steps, err := s.steps(ctx, r)
	if err != nil {
		return nil, err
	}
	before := Input{Name: r.Name, Public: r.Public, Owner: r.Owner, DisableRamdisk: r.DisableRamdisk, Extra: r.Extra, Traits: r.Traits, Steps: steps}
	if before.Traits == nil {
		before.Traits = []string{}
	}
	doc, _ := json.Marshal(before)
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, errs.BadRequest("patch", "not a JSON patch: %v", err)
	}
	for _, op := range patch {
		path, _ := op.Path()
		field := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0]
		if !slices.Contains([]string{"name", "public", "owner", "disable_ramdisk", "extra", "traits", "steps"}, field) {
			return nil, errs.BadRequest(field, "%s cannot be changed", path)
		}
	}
	newDoc, err := patch.Apply(doc)
	if err != nil {
		return nil, errs.BadRequest("patch", "the patch does not apply: %v", err)
	}
	var after Input
	dec := json.NewDecoder(strings.NewReader(string(newDoc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&after); err != nil {
		return nil, errs.BadRequest("patch", "the patched runbook is not valid: %v", err)
	}
	// Publishing clears the owner, as the spec says.
	if after.Public && !before.Public && after.Owner != nil && before.Owner != nil && *after.Owner == *before.Owner {
		after.Owner = nil
	}
	if err := validate(&after); err != nil {
		return nil, err
	}
	p := policies.PrincipalFrom(ctx)
	t := Target(r)
	ownerChanged := !equalOwner(before.Owner, after.Owner)
	if after.Public != before.Public || ownerChanged {
		if p == nil || !p.System {
			return nil, errs.Forbidden("a project cannot change a runbook's owner or public flag")
		}
		if after.Public != before.Public {
			if err := s.guard.Authorize(ctx, RulePublish, "runbook", r.UUID, t); err != nil {
				return nil, err
			}
		}
		if ownerChanged && after.Owner != nil {
			if err := s.guard.Authorize(ctx, RuleSetOwner, "runbook", r.UUID, t); err != nil {
				return nil, err
			}
		}
	}
	if err := s.stepRules(ctx, after.Steps, t, r.UUID); err != nil {
		return nil, err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		u := tx.Runbook.UpdateOneID(r.ID).SetName(after.Name).SetPublic(after.Public).SetDisableRamdisk(after.DisableRamdisk).
			SetExtra(after.Extra).SetTraits(after.Traits)
		if after.Owner != nil {
			u.SetOwner(*after.Owner)
		} else {
			u.ClearOwner()
		}
		if err := u.Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.RunbookStep.Delete().Where(runbookstep.RunbookID(r.ID)).Exec(ctx); err != nil {
			return err
		}
		return createSteps(ctx, tx, r.ID, after.Steps)
	})
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("A runbook named %s already exists.", after.Name)
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, r.UUID)
}

func equalOwner(a, b *string) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// Resolve returns the steps of a runbook the caller may use on a node
// with the given traits: the use rule, the trait gate and the per-step
// rules, all checked here.
func (s *Service) Resolve(ctx context.Context, ident string, nodeTraits []string) ([]conductor.Step, bool, error) {
	r, err := s.authorized(ctx, ident, RuleUse)
	if err != nil {
		return nil, false, err
	}
	if len(r.Traits) == 0 {
		if !slices.Contains(nodeTraits, r.Name) {
			return nil, false, errs.BadRequest("runbook", "the node lacks trait %s, which runbook %s requires", r.Name, r.Name)
		}
	} else if !slices.ContainsFunc(r.Traits, func(t string) bool { return slices.Contains(nodeTraits, t) }) {
		return nil, false, errs.BadRequest("runbook", "the node has none of runbook %s's traits (%s)", r.Name, strings.Join(r.Traits, ", "))
	}
	steps, err := s.steps(ctx, r)
	if err != nil {
		return nil, false, err
	}
	if r.Owner != nil {
		if err := s.stepRules(ctx, steps, Target(r), r.UUID); err != nil {
			return nil, false, err
		}
	}
	out := make([]conductor.Step, len(steps))
	for i, st := range steps {
		out[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	return out, r.DisableRamdisk, nil
}

// Traits lists a runbook's traits.
func (s *Service) Traits(ctx context.Context, ident string) ([]string, error) {
	r, err := s.authorized(ctx, ident)
	if err != nil {
		return nil, err
	}
	if r.Traits == nil {
		return []string{}, nil
	}
	return r.Traits, nil
}

// SetTraits replaces a runbook's traits (the update rule applies).
func (s *Service) SetTraits(ctx context.Context, ident string, traits []string) (err error) {
	r, err := s.authorized(ctx, ident, RuleUpdate)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleUpdate, "runbook", r.UUID, err, map[string]any{"traits": traits}) }()
	if len(traits) > 50 {
		return errs.BadRequest("traits", "at most 50 traits")
	}
	var clean []string
	for _, t := range traits {
		if err := nodes.ValidateTrait(t); err != nil {
			return errs.BadRequest("traits", "%v", err)
		}
		if !slices.Contains(clean, t) {
			clean = append(clean, t)
		}
	}
	if clean == nil {
		clean = []string{}
	}
	return s.db.Runbook.UpdateOneID(r.ID).SetTraits(clean).Exec(ctx)
}
