// Package runbooks is curated maintenance: named, ordered steps owned by
// a project or the system, public or private, that owners and lessees run
// on their nodes instead of arbitrary steps.
package runbooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

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

// find returns the runbook ident names for the caller, or a 404 when it
// names none the caller may see: a hidden runbook and a missing one look
// the same. A UUID names one runbook; a name is unique per owner, so it
// resolves in order to the caller's own (its project's, or the system's
// for a system caller), then the system's public one, then any other the
// caller may see, and when that last step finds several, to a 409 asking
// for the UUID. audit records a denial when only hidden runbooks matched.
func (s *Service) find(ctx context.Context, ident string, audit bool) (*ent.Runbook, error) {
	q := s.db.Runbook.Query()
	if nodes.IsUUID(ident) {
		q = q.Where(runbook.UUID(strings.ToLower(ident)))
	} else {
		q = q.Where(runbook.Name(ident))
	}
	all, err := q.Order(ent.Asc(runbook.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	var visible []*ent.Runbook
	for _, r := range all {
		if s.guard.Allowed(ctx, RuleGet, Target(r)) {
			visible = append(visible, r)
		}
	}
	if len(visible) == 0 {
		if audit && len(all) > 0 {
			_ = s.guard.Authorize(ctx, RuleGet, "runbook", all[0].UUID, Target(all[0])) // audits the denial
		}
		return nil, notFound(ident)
	}
	if len(visible) == 1 {
		return visible[0], nil
	}
	p := policies.PrincipalFrom(ctx)
	mine := ""
	if p != nil && !p.System {
		mine = p.Project
	}
	for _, pick := range []func(r *ent.Runbook) bool{
		func(r *ent.Runbook) bool { return ownerOf(r) == mine },
		func(r *ent.Runbook) bool { return r.Owner == nil && r.Public },
	} {
		if i := slices.IndexFunc(visible, pick); i >= 0 {
			return visible[i], nil
		}
	}
	return nil, errs.Conflict("Several runbooks named %s are visible to you; name one by its UUID.", ident)
}

// ownerOf is a runbook's owner, "" for the system.
func ownerOf(r *ent.Runbook) string {
	if r.Owner == nil {
		return ""
	}
	return *r.Owner
}

// authorized finds a runbook the caller may see and checks rules on it;
// one the caller may not see is a 404, never a 403.
func (s *Service) authorized(ctx context.Context, ident string, rules ...string) (*ent.Runbook, error) {
	r, err := s.find(ctx, ident, true)
	if err != nil {
		return nil, err
	}
	for _, rule := range rules {
		if err := s.guard.Authorize(ctx, rule, "runbook", r.UUID, Target(r)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Authorize finds a runbook (404) and checks rules on it (403), so a
// handler can refuse a caller before it reads the request body.
func (s *Service) Authorize(ctx context.Context, ident string, rules ...string) error {
	_, err := s.authorized(ctx, ident, rules...)
	return err
}

// AuthorizeCreate checks that the caller may create a runbook of its own
// (its project's, or the system's), before the body is read; Create
// checks the body's owner and public flag again.
func (s *Service) AuthorizeCreate(ctx context.Context) error {
	t := policies.Target{}
	if p := policies.PrincipalFrom(ctx); p != nil && !p.System {
		t.RunbookOwner = p.Project
	}
	return s.guard.Authorize(ctx, RuleCreate, "runbook", "", t)
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
		// Only runbooks the caller may see can be markers, so a hidden
		// one answers exactly as a missing one does.
		m, err := s.find(ctx, o.Marker, false)
		if err != nil {
			if errs.Status(err) >= 500 {
				return nil, false, err
			}
			return nil, false, errs.BadRequest("marker", "marker does not name a runbook")
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
			if IsSecret(k) {
				v = Masked
			}
			args[k] = v
		}
		out[i].Args = args
	}
	return out
}

// IsSecret reports whether an argument or property name looks secret
// (password, token, key, secret), as oslo's mask_dict_password decides.
func IsSecret(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || strings.Contains(k, "token") || strings.Contains(k, "key") || strings.Contains(k, "secret")
}

// Input is a runbook to create, or the document a patch produces.
type Input struct {
	// UUID is the client's choice on create, as Ironic takes one; a
	// patch cannot change it.
	UUID           *string        `json:"uuid,omitempty"`
	Name           string         `json:"name"`
	Description    *string        `json:"description"`
	Public         bool           `json:"public"`
	Owner          *string        `json:"owner"`
	DisableRamdisk bool           `json:"disable_ramdisk"`
	Extra          map[string]any `json:"extra"`
	Traits         []string       `json:"traits"`
	Steps          []Step         `json:"steps"`
	// TraitName asks for the name rule before Ironic's 1.112, which
	// creates runbooks named as traits only; from 1.112, and in every
	// patch, a name is any RFC 3986 unreserved string.
	TraitName bool `json:"-"`
}

// nameRE is Ironic's 1.112 runbook name pattern: characters a URL path
// carries unescaped, so the name finds the runbook.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,255}$`)

// validate checks everything but policy, after filling what a caller may
// leave out and putting the steps in order; the error is the first of
// Problems.
func validate(in *Input) error {
	if in.Owner != nil && *in.Owner == "" {
		in.Owner = nil
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	sort.SliceStable(in.Steps, func(i, j int) bool { return in.Steps[i].Order < in.Steps[j].Order })
	if p := Problems(*in); len(p) > 0 {
		return p[0]
	}
	return nil
}

// Problems lists everything wrong with a runbook but policy (and its
// steps' arguments, which a run checks), not only the first problem, so
// the portal's editor can show each next to its field.
// A step's problem names it by its index in order, as the API does: field
// steps[i].<part> (interface, step, order; ArgProblems: args.<name>), message
// "steps[i]: …".
func Problems(in Input) []*errs.Error {
	var out []*errs.Error
	add := func(field string, err error) {
		var e *errs.Error
		if !errors.As(err, &e) {
			e = errs.BadRequest(field, "%v", err)
		}
		out = append(out, e)
	}
	if in.TraitName {
		if err := nodes.ValidateTrait(in.Name); err != nil {
			out = append(out, errs.BadRequest("name", "name %q must be a trait name (CUSTOM_* or a standard trait) before API version 1.112: %v", in.Name, err))
		}
	} else if !nameRE.MatchString(in.Name) {
		out = append(out, errs.BadRequest("name", "name %q must be 1 to 255 letters, digits, '-', '.', '_' or '~'", in.Name))
	}
	if in.Description != nil && utf8.RuneCountInString(*in.Description) > 255 {
		out = append(out, errs.BadRequest("description", "description is longer than 255 characters"))
	}
	if in.Owner != nil && *in.Owner != "" {
		if err := nodes.ValidateProject("owner", *in.Owner); err != nil {
			add("owner", err)
		}
		if in.Public {
			out = append(out, errs.BadRequest("owner", "a public runbook has no owner; clear owner or public"))
		}
	}
	if len(in.Traits) > 50 {
		out = append(out, errs.BadRequest("traits", "at most 50 traits"))
	}
	for _, t := range in.Traits {
		if err := nodes.ValidateTrait(t); err != nil {
			out = append(out, errs.BadRequest("traits", "%v", err))
		}
	}
	steps := slices.Clone(in.Steps)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Order < steps[j].Order })
	seen := map[int]bool{}
	cs := make([]conductor.Step, len(steps))
	for i, st := range steps {
		if st.Order < 0 || seen[st.Order] {
			where := fmt.Sprintf("steps[%d]", i)
			out = append(out, errs.BadRequest(where+".order", "%s: step orders must be distinct non-negative numbers; %d repeats or is negative", where, st.Order))
		}
		seen[st.Order] = true
		cs[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	if len(cs) == 0 || len(cs) > conductor.MaxSteps {
		add("steps", conductor.ValidateStepShape("steps", cs))
	}
	// Only the steps' shape, as Ironic's runbook schema: each step checks
	// its arguments when a run starts (ArgProblems).
	for _, p := range conductor.ShapeProblems(cs) {
		add("steps", p.Err("steps"))
	}
	return out
}

// ArgProblems lists what a run of the runbook would refuse in its steps'
// arguments, named as Problems names a step's problem; the runbook saves
// with them, as in Ironic, and the portal's editor warns of them.
func ArgProblems(in Input) []*errs.Error {
	steps := slices.Clone(in.Steps)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Order < steps[j].Order })
	cs := make([]conductor.Step, len(steps))
	for i, st := range steps {
		cs[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	var out []*errs.Error
	for _, p := range conductor.ArgProblems(cs) {
		var e *errs.Error
		if errors.As(p.Err("steps"), &e) {
			out = append(out, e)
		}
	}
	return out
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
	if in.UUID != nil && *in.UUID != "" {
		id = strings.ToLower(*in.UUID)
	}
	defer func() { s.guard.Done(ctx, RuleCreate, "runbook", id, err, map[string]any{"name": in.Name}) }()
	// Policy first, then the body: a caller who may not create learns
	// nothing from a 400 about its input. A project's runbook is its
	// own, so the create rule is checked on that; an owner or a public
	// flag it may not give is then a 400, as Ironic answers it (the
	// request is refused for what it says, not for who sent it).
	if in.Owner != nil && *in.Owner == "" {
		in.Owner = nil
	}
	t := policies.Target{RunbookPublic: in.Public}
	if in.Owner != nil {
		t.RunbookOwner = *in.Owner
	}
	project := p != nil && !p.System
	if project {
		t = policies.Target{RunbookOwner: p.Project}
	}
	if err := s.guard.Authorize(ctx, RuleCreate, "runbook", id, t); err != nil {
		return nil, err
	}
	// Publishing and choosing an owner are the system's: its callers
	// need the rules that govern changing them later, so what a caller
	// could not patch it cannot create either.
	if !project && in.Public {
		if err := s.guard.Authorize(ctx, RulePublish, "runbook", id, t); err != nil {
			return nil, err
		}
	}
	if !project && in.Owner != nil {
		if err := s.guard.Authorize(ctx, RuleSetOwner, "runbook", id, t); err != nil {
			return nil, err
		}
	}
	if err := s.stepRules(ctx, in.Steps, t, id); err != nil {
		return nil, err
	}
	if project {
		if in.Owner != nil && *in.Owner != p.Project {
			return nil, errs.BadRequest("owner", "Cannot create a runbook as a project scoped admin with an owner other than your own project.")
		}
		if in.Public {
			return nil, errs.BadRequest("public", "Cannot create a public runbook as a project scoped admin.")
		}
		in.Owner = &p.Project
	}
	if !nodes.IsUUID(id) {
		return nil, errs.BadRequest("uuid", "uuid %q is not a valid UUID", id)
	}
	if err := validate(&in); err != nil {
		return nil, err
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		r, err := tx.Runbook.Create().SetUUID(id).SetName(in.Name).SetPublic(in.Public).SetNillableOwner(in.Owner).
			SetDisableRamdisk(in.DisableRamdisk).SetExtra(in.Extra).SetTraits(in.Traits).SetNillableDescription(in.Description).Save(ctx)
		if err != nil {
			return err
		}
		return createSteps(ctx, tx, r.ID, in.Steps)
	})
	if ent.IsConstraintError(err) {
		// The UUID is the client's, so it may be the one taken, by a
		// runbook the caller may not see: Ironic answers 409 then too.
		if taken, _ := s.db.Runbook.Query().Where(runbook.UUID(id)).Exist(ctx); taken {
			return nil, errs.Conflict("A runbook with UUID %s already exists.", id)
		}
		return nil, nameTaken(in.Owner, in.Name)
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// nameTaken is the 409 for a name its owner already uses; names are
// unique per owner, so other owners' runbooks never collide.
func nameTaken(owner *string, name string) error {
	if owner == nil {
		return errs.Conflict("A system runbook named %s already exists.", name)
	}
	return errs.Conflict("Project %s already has a runbook named %s.", *owner, name)
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
// and public are the system's to change. The read, the patch and the write
// happen in one transaction that holds the runbook's row, so concurrent
// patches serialise instead of overwriting each other. withDescription
// lets the patch touch description, which Ironic makes patchable at 1.112.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte, withDescription bool) (out *Runbook, err error) {
	r, err := s.authorized(ctx, ident, RuleUpdate)
	if err != nil {
		return nil, err
	}
	defer func() { s.guard.Done(ctx, RuleUpdate, "runbook", r.UUID, err, nil) }()
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, errs.BadRequest("patch", "not a JSON patch: %v", err)
	}
	for _, op := range patch {
		path, _ := op.Path()
		field := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0]
		if !slices.Contains([]string{"name", "public", "owner", "disable_ramdisk", "extra", "traits", "steps"}, field) &&
			(field != "description" || !withDescription) {
			return nil, errs.BadRequest(field, "%s cannot be changed", path)
		}
	}
	var after Input
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		// The UPDATE takes the row (PostgreSQL) or the writer lock (SQLite)
		// before anything is read.
		if err := tx.Runbook.UpdateOneID(r.ID).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return err
		}
		cur, err := tx.Runbook.Get(ctx, r.ID)
		if err != nil {
			return err
		}
		if after, err = s.patched(ctx, cur, patch); err != nil {
			return err
		}
		u := tx.Runbook.UpdateOneID(r.ID).SetName(after.Name).SetPublic(after.Public).SetDisableRamdisk(after.DisableRamdisk).
			SetExtra(after.Extra).SetTraits(after.Traits)
		if after.Description != nil {
			u.SetDescription(*after.Description)
		} else {
			u.ClearDescription()
		}
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
	switch {
	case ent.IsNotFound(err):
		return nil, notFound(ident)
	case ent.IsConstraintError(err):
		return nil, nameTaken(after.Owner, after.Name)
	case err != nil:
		return nil, err
	}
	return s.Get(ctx, r.UUID)
}

// patched applies patch to r as stored now and checks the result: the
// rules for publishing, owners and steps first, then validity.
func (s *Service) patched(ctx context.Context, r *ent.Runbook, patch jsonpatch.Patch) (Input, error) {
	var after Input
	steps, err := s.steps(ctx, r)
	if err != nil {
		return after, err
	}
	before := Input{Name: r.Name, Description: r.Description, Public: r.Public, Owner: r.Owner, DisableRamdisk: r.DisableRamdisk, Extra: r.Extra, Traits: r.Traits, Steps: steps}
	if before.Traits == nil {
		before.Traits = []string{}
	}
	for i, op := range patch {
		kind := op.Kind()
		if kind != "copy" && kind != "move" && kind != "test" {
			continue
		}
		src, _ := op.From()
		if kind == "test" {
			src, _ = op.Path()
		}
		if ReadsSecret(before, src) {
			return after, errs.BadRequest("patch", "operation %d: %s holds a secret, which can be replaced but not copied, moved or tested", i, src)
		}
	}
	doc, _ := json.Marshal(before)
	newDoc, err := patch.Apply(doc)
	if err != nil {
		return after, errs.BadRequest("patch", "the patch does not apply: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(newDoc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&after); err != nil {
		return after, errs.BadRequest("patch", "the patched runbook is not valid: %v", err)
	}
	// Publishing clears the owner, as the spec says.
	if after.Public && !before.Public && after.Owner != nil && before.Owner != nil && *after.Owner == *before.Owner {
		after.Owner = nil
	}
	if after.Owner != nil && *after.Owner == "" {
		after.Owner = nil
	}
	p := policies.PrincipalFrom(ctx)
	t := Target(r)
	ownerChanged := !equalOwner(before.Owner, after.Owner)
	if after.Public != before.Public || ownerChanged {
		if p == nil || !p.System {
			return after, errs.Forbidden("a project cannot change a runbook's owner or public flag")
		}
		if after.Public != before.Public {
			if err := s.guard.Authorize(ctx, RulePublish, "runbook", r.UUID, t); err != nil {
				return after, err
			}
		}
		if ownerChanged && after.Owner != nil {
			if err := s.guard.Authorize(ctx, RuleSetOwner, "runbook", r.UUID, t); err != nil {
				return after, err
			}
		}
	}
	if err := s.stepRules(ctx, after.Steps, t, r.UUID); err != nil {
		return after, err
	}
	return after, validate(&after)
}

func equalOwner(a, b *string) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// Resolve returns the steps of a runbook the caller may use on a node:
// visibility (404), the use rule (403), whether the node accepts the
// runbook (403), the trait gate (400) and the per-step rules, in that
// order.
func (s *Service) Resolve(ctx context.Context, ident string, n *ent.Node, nodeTraits []string) (*conductor.Runbook, error) {
	r, err := s.authorized(ctx, ident, RuleUse)
	if err != nil {
		return nil, err
	}
	if err := Accepts(r, n, nodeTraits); err != nil {
		if errs.Status(err) == 403 {
			s.guard.Done(ctx, RuleUse, "runbook", r.UUID, err, map[string]any{"node": n.UUID})
		}
		return nil, err
	}
	steps, err := s.steps(ctx, r)
	if err != nil {
		return nil, err
	}
	if r.Owner != nil {
		if err := s.stepRules(ctx, steps, Target(r), r.UUID); err != nil {
			return nil, err
		}
	}
	out := make([]conductor.Step, len(steps))
	for i, st := range steps {
		out[i] = conductor.Step{Interface: st.Interface, Step: st.Step, Args: st.Args}
	}
	return &conductor.Runbook{Name: r.Name, Steps: out, DisableRamdisk: r.DisableRamdisk, Retryable: Retryable(r)}, nil
}

// RetryableKey is the key in a runbook's extra by which its publisher
// opts out of letting those who may run it retry a failed run or return
// the node (anvil:node:recover). Ironic's runbook has no such field; in
// extra, every Ironic client can set it (`baremetal runbook set --extra
// anvil_retryable=false`), so the CLI's string "false" counts too.
const RetryableKey = "anvil_retryable"

// Retryable says whether r may be retried by those who run it: yes
// unless its publisher set anvil_retryable to false. A curated runbook
// is meant to be run by members without an operator at hand, so a failed
// run they cannot retry or return would strand the node until its owner
// looks; a publisher whose steps must not run twice says so.
func Retryable(r *ent.Runbook) bool {
	switch v := r.Extra[RetryableKey].(type) {
	case bool:
		return v
	case string:
		return !strings.EqualFold(v, "false")
	}
	return true
}

// Accepts says whether node n, carrying traits, takes runbook r. Only the
// node's owner side or the system decides what runs on a node: a system
// runbook may run on any node (visibility and the use rule keep private
// ones to system callers), a project's runbook only on nodes that project
// owns, so a lessee's runbook never reaches the nodes it leases, whatever
// traits its author lists. Then the trait gate: the node carries the
// runbook's name as a trait, or one of its traits.
func Accepts(r *ent.Runbook, n *ent.Node, traits []string) error {
	if r.Owner != nil && n.Owner != *r.Owner {
		return errs.Forbidden("runbook %s belongs to project %s, which does not own node %s; a node runs only its owner's and the system's runbooks", r.Name, *r.Owner, n.UUID)
	}
	switch {
	case MatchesTraits(r, traits):
		return nil
	case len(r.Traits) == 0:
		return errs.BadRequest("runbook", "the node lacks trait %s, which runbook %s requires", r.Name, r.Name)
	}
	return errs.BadRequest("runbook", "the node has none of runbook %s's traits (%s)", r.Name, strings.Join(r.Traits, ", "))
}

// MatchesTraits is Accepts's trait gate alone: a node with these traits
// carries the runbook's name or one of its traits.
func MatchesTraits(r *ent.Runbook, traits []string) bool {
	if len(r.Traits) == 0 {
		return slices.Contains(traits, r.Name)
	}
	return slices.ContainsFunc(r.Traits, func(t string) bool { return slices.Contains(traits, t) })
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
