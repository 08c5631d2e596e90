// Package inspectionrules serves Ironic's inspection rules (1.96):
// conditions on what an inspection found and actions on the node, run
// after each successful inspection in priority order.
package inspectionrules

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/inspectionrule"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as Ironic names them.
const (
	RuleGet    = "baremetal:inspection_rule:get"
	RuleCreate = "baremetal:inspection_rule:create"
	RuleUpdate = "baremetal:inspection_rule:update"
	RuleDelete = "baremetal:inspection_rule:delete"
)

// Rule is an inspection rule as stored.
type Rule = ent.InspectionRule

// Service serves inspection rules.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns the inspection rule service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

func notFound(ident string) error {
	return errs.NotFound("Inspection rule %s could not be found.", ident)
}

func (s *Service) authorize(ctx context.Context, rule, id string) error {
	return s.guard.Authorize(ctx, rule, "inspection rule", id, policies.Target{})
}

// sig is an operator's or action's arguments, required then optional, as
// Ironic reads them from its plugins' signatures.
type sig struct{ req, opt []string }

var operators = map[string]sig{
	"eq":       {[]string{"values"}, []string{"force_strings"}},
	"lt":       {[]string{"values"}, []string{"force_strings"}},
	"gt":       {[]string{"values"}, []string{"force_strings"}},
	"is-empty": {[]string{"value"}, nil},
	"in-net":   {[]string{"address", "subnet"}, nil},
	"matches":  {[]string{"value", "regex"}, nil},
	"contains": {[]string{"value", "regex"}, nil},
	"one-of":   {[]string{"value"}, []string{"values"}},
	"is-none":  {[]string{"value"}, nil},
	"is-true":  {[]string{"value"}, nil},
	"is-false": {[]string{"value"}, nil},
}

var actions = map[string]sig{
	"fail":               {[]string{"msg"}, nil},
	"log":                {[]string{"msg"}, []string{"level"}},
	"set-attribute":      {[]string{"path", "value"}, nil},
	"extend-attribute":   {[]string{"path", "value"}, []string{"unique"}},
	"del-attribute":      {[]string{"path"}, nil},
	"set-capability":     {[]string{"name", "value"}, nil},
	"unset-capability":   {[]string{"name"}, nil},
	"add-trait":          {[]string{"name"}, nil},
	"remove-trait":       {[]string{"name"}, nil},
	"set-plugin-data":    {[]string{"path", "value"}, nil},
	"extend-plugin-data": {[]string{"path", "value"}, []string{"unique"}},
	"unset-plugin-data":  {[]string{"path"}, nil},
}

// unsupported are Ironic actions Anvil refuses: ports are not written by
// inspection here, and api-call would make the conductor call out.
var unsupported = []string{"set-port-attribute", "extend-port-attribute", "del-port-attribute", "api-call"}

// nodeAttrs are the node fields actions may write.
var nodeAttrs = []string{"properties", "extra", "instance_info", "driver_info", "resource_class", "description"}

// Input is a rule to create, or the document a patch produces.
type Input struct {
	UUID        *string `json:"uuid"`
	Description *string `json:"description"`
	Priority    any     `json:"priority"`
	Sensitive   any     `json:"sensitive"`
	Phase       any     `json:"phase"`
	Conditions  any     `json:"conditions"`
	Actions     any     `json:"actions"`
}

type parsed struct {
	description *string
	priority    int
	sensitive   bool
	phase       string
	conditions  []map[string]any
	actions     []map[string]any
}

// parse checks a rule as Ironic's schema and validate_rule do; every
// error names its field.
func parse(in Input) (*parsed, error) {
	p := &parsed{phase: "main", description: in.Description}
	if in.Description != nil && len(*in.Description) > 255 {
		return nil, errs.BadRequest("description", "description is longer than 255 characters")
	}
	switch v := in.Priority.(type) {
	case nil:
	case float64:
		if v != float64(int(v)) || v < 0 || v > 9999 {
			return nil, errs.BadRequest("priority", "Priority must be between 0 and 9999 for user-defined rules.")
		}
		p.priority = int(v)
	default:
		return nil, errs.BadRequest("priority", "priority must be an integer, not %v", v)
	}
	switch v := in.Sensitive.(type) {
	case nil:
	case bool:
		p.sensitive = v
	default:
		return nil, errs.BadRequest("sensitive", "sensitive must be true or false, not %v", v)
	}
	switch v := in.Phase.(type) {
	case nil:
	case string:
		if v != "main" {
			return nil, errs.BadRequest("phase", "Invalid phase: %s. Valid phases are: main", v)
		}
	default:
		return nil, errs.BadRequest("phase", "phase must be a string")
	}
	var err error
	if in.Conditions != nil {
		if p.conditions, err = ops("conditions", in.Conditions, operators, true); err != nil {
			return nil, err
		}
	}
	if in.Actions == nil {
		return nil, errs.BadRequest("actions", "actions is required: a list of {op, args}")
	}
	if p.actions, err = ops("actions", in.Actions, actions, false); err != nil {
		return nil, err
	}
	if len(p.actions) == 0 {
		return nil, errs.BadRequest("actions", "actions must list at least one action")
	}
	return p, nil
}

func ops(field string, v any, known map[string]sig, cond bool) ([]map[string]any, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errs.BadRequest(field, "%s must be a list of {op, args}", field)
	}
	out := make([]map[string]any, len(list))
	for i, x := range list {
		where := fmt.Sprintf("%s[%d]", field, i)
		m, ok := x.(map[string]any)
		if !ok {
			return nil, errs.BadRequest(where, "%s must be an object", where)
		}
		allowed := []string{"op", "args", "loop"}
		if cond {
			allowed = append(allowed, "multiple")
		}
		for k := range m {
			if !slices.Contains(allowed, k) {
				return nil, errs.BadRequest(where+"."+k, "%s: unknown attribute %q", where, k)
			}
		}
		op, _ := m["op"].(string)
		name := strings.TrimSpace(op)
		if cond {
			name = strings.TrimPrefix(name, "!")
			if strings.HasPrefix(name, "!") {
				return nil, errs.BadRequest(where+".op", "%s: only one '!' may invert an operator: %s", where, op)
			}
		}
		s, ok := known[name]
		switch {
		case !cond && slices.Contains(unsupported, name):
			return nil, errs.BadRequest(where+".op", "%s.op: Unsupported action operator: %s: Anvil does not implement this action", where, name)
		case !ok && cond:
			return nil, errs.BadRequest(where+".op", "%s.op: Unsupported condition operator: %s", where, op)
		case !ok:
			return nil, errs.BadRequest(where+".op", "%s.op: Unsupported action operator: %s", where, op)
		}
		args, err := normalArgs(s, m["args"])
		if err != nil {
			return nil, errs.BadRequest(where+".args", "%s.args: Invalid parameters for %s %s: %v", where, map[bool]string{true: "condition operator", false: "action operator"}[cond], name, err)
		}
		if err := checkArgs(name, args, m["loop"] != nil); err != nil {
			return nil, errs.BadRequest(where+".args", "%s.args: Invalid parameters for %s: %v", where, name, err)
		}
		if l, ok := m["loop"]; ok {
			switch l.(type) {
			case []any, map[string]any:
			default:
				return nil, errs.BadRequest(where+".loop", "%s: loop must be a list or an object", where)
			}
		}
		if mu, ok := m["multiple"]; ok && !slices.Contains([]any{"any", "all", "first", "last"}, mu) {
			return nil, errs.BadRequest(where+".multiple", "%s: multiple must be any, all, first or last", where)
		}
		c := map[string]any{"op": op, "args": args}
		if list, ok := m["args"].([]any); ok {
			// Kept as sent, as Ironic keeps and returns it; the engine
			// names the arguments (namedArgs) when it runs the rule.
			c["args"] = list
		}
		for _, k := range []string{"loop", "multiple"} {
			if v, ok := m[k]; ok {
				c[k] = v
			}
		}
		out[i] = c
	}
	return out, nil
}

// normalArgs takes args as an object, or as the list Ironic still accepts
// (deprecated there), in signature order.
func normalArgs(s sig, v any) (map[string]any, error) {
	out := map[string]any{}
	switch a := v.(type) {
	case nil:
	case map[string]any:
		out = a
	case []any:
		if len(a) > len(s.req)+len(s.opt) {
			return nil, fmt.Errorf("too many arguments: at most %d", len(s.req)+len(s.opt))
		}
		out = positional(s, a)
	default:
		return nil, fmt.Errorf("args must be either a list or dictionary")
	}
	var missing, unexpected []string
	for _, r := range s.req {
		if _, ok := out[r]; !ok {
			missing = append(missing, r)
		}
	}
	for k := range out {
		if !slices.Contains(s.req, k) && !slices.Contains(s.opt, k) {
			unexpected = append(unexpected, k)
		}
	}
	slices.Sort(unexpected)
	var msg []string
	if len(missing) > 0 {
		msg = append(msg, "missing required argument(s): "+strings.Join(missing, ", "))
	}
	if len(unexpected) > 0 {
		msg = append(msg, "unexpected argument(s): "+strings.Join(unexpected, ", "))
	}
	if msg != nil {
		return nil, fmt.Errorf("%s", strings.Join(msg, "; "))
	}
	return out, nil
}

// positional names a list of arguments in signature order.
func positional(s sig, a []any) map[string]any {
	names := append(slices.Clone(s.req), s.opt...)
	out := make(map[string]any, len(a))
	for i, x := range a {
		if i < len(names) {
			out[names[i]] = x
		}
	}
	return out
}

// namedArgs are a stored operator's or action's arguments by name: an
// object as it is, a list (kept as sent) in its signature's order.
func namedArgs(name string, v any) map[string]any {
	switch a := v.(type) {
	case map[string]any:
		return a
	case []any:
		s, ok := operators[name]
		if !ok {
			s = actions[name]
		}
		return positional(s, a)
	}
	return nil
}

// checkArgs refuses at create what would only fail at the next
// inspection: a bad regular expression or subnet, a trait that is no
// trait, a path outside the node fields actions may write. Values with
// variables are checked when they are known.
func checkArgs(op string, args map[string]any, loop bool) error {
	literal := func(k string) (string, bool) {
		s, ok := args[k].(string)
		return s, ok && !loop && !strings.Contains(s, "{")
	}
	switch op {
	case "matches", "contains":
		if r, ok := literal("regex"); ok {
			if _, err := regexp.Compile(r); err != nil {
				return fmt.Errorf("invalid regular expression: %v", err)
			}
		}
	case "in-net":
		if n, ok := literal("subnet"); ok {
			if _, err := netip.ParsePrefix(n); err != nil {
				return fmt.Errorf("invalid subnet %q", n)
			}
		}
	case "add-trait", "remove-trait":
		if n, ok := literal("name"); ok {
			if err := nodes.ValidateTrait(n); err != nil {
				return err
			}
		}
	case "set-attribute", "extend-attribute", "del-attribute":
		if p, ok := literal("path"); ok {
			if top := splitPath(p)[0]; !slices.Contains(nodeAttrs, top) {
				return fmt.Errorf("path %s: rules may write only %s", p, strings.Join(nodeAttrs, ", "))
			}
		}
	case "log":
		if l, ok := args["level"].(string); ok && !slices.Contains([]string{"debug", "info", "warning", "error", "critical"}, strings.ToLower(l)) {
			return fmt.Errorf("invalid log level: %s", l)
		}
	}
	return nil
}

// Create makes a rule.
func (s *Service) Create(ctx context.Context, in Input) (out *Rule, err error) {
	id := uuid.NewString()
	if in.UUID != nil && *in.UUID != "" {
		id = strings.ToLower(*in.UUID)
	}
	if err := s.authorize(ctx, RuleCreate, id); err != nil {
		return nil, err
	}
	defer func() { s.guard.Done(ctx, RuleCreate, "inspection rule", id, err, nil) }()
	if !nodes.IsUUID(id) {
		return nil, errs.BadRequest("uuid", "uuid %q is not a valid UUID", id)
	}
	p, err := parse(in)
	if err != nil {
		return nil, err
	}
	_, err = s.db.InspectionRule.Create().SetUUID(id).SetNillableDescription(p.description).SetPriority(p.priority).
		SetSensitive(p.sensitive).SetPhase(p.phase).SetConditions(p.conditions).SetActions(p.actions).Save(ctx)
	if ent.IsConstraintError(err) {
		return nil, errs.Conflict("An inspection rule with UUID %s already exists.", id)
	}
	if err != nil {
		return nil, err
	}
	return s.db.InspectionRule.Query().Where(inspectionrule.UUID(id)).Only(ctx)
}

func find(ctx context.Context, c *ent.Client, ident string) (*Rule, error) {
	if !nodes.IsUUID(ident) {
		return nil, notFound(ident)
	}
	r, err := c.InspectionRule.Query().Where(inspectionrule.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	return r, err
}

// Get shows one rule.
func (s *Service) Get(ctx context.Context, ident string) (*Rule, error) {
	if err := s.authorize(ctx, RuleGet, ident); err != nil {
		return nil, err
	}
	return find(ctx, s.db.Client, ident)
}

var sortKeys = map[string]listing.Key{
	"id": {Col: inspectionrule.FieldID}, "uuid": {Col: inspectionrule.FieldUUID},
	"priority": {Col: inspectionrule.FieldPriority}, "created_at": {Col: inspectionrule.FieldCreatedAt},
}

func sortValue(r *Rule, col string) any {
	switch col {
	case inspectionrule.FieldUUID:
		return r.UUID
	case inspectionrule.FieldPriority:
		return r.Priority
	case inspectionrule.FieldCreatedAt:
		return r.CreatedAt
	}
	return r.ID
}

// List pages through the rules, of one phase when phase is set.
func (s *Service) List(ctx context.Context, o listing.Options, phase string) ([]*Rule, bool, error) {
	if err := s.authorize(ctx, RuleGet, ""); err != nil {
		return nil, false, err
	}
	plan, err := listing.Check(o, sortKeys)
	if err != nil {
		return nil, false, err
	}
	q := s.db.InspectionRule.Query()
	if phase != "" {
		q = q.Where(inspectionrule.Phase(phase))
	}
	if o.Marker != "" {
		m, err := find(ctx, s.db.Client, o.Marker)
		if err != nil {
			return nil, false, errs.BadRequest("marker", "marker %s does not name an inspection rule", o.Marker)
		}
		q = q.Where(plan.After(sortValue(m, plan.Key.Col), m.ID))
	}
	rs, err := q.Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(rs) > plan.Limit
	if more {
		rs = rs[:plan.Limit]
	}
	return rs, more, nil
}

var patchable = []string{"description", "priority", "sensitive", "phase", "conditions", "actions"}

// Patch applies an RFC 6902 patch. The read, the patch and the write
// happen in one transaction holding the rule's row, as a node's patch
// holds the node's.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte) (out *Rule, err error) {
	if err := s.authorize(ctx, RuleUpdate, ident); err != nil {
		return nil, err
	}
	r, err := find(ctx, s.db.Client, ident)
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
	// A sensitive rule's conditions and actions are never shown, so a
	// patch may replace them but not copy, move or test them out.
	for i, op := range ops {
		src := op.From
		if op.Op == "test" {
			src = op.Path
		}
		if r.Sensitive && (strings.HasPrefix(src, "/actions") || strings.HasPrefix(src, "/conditions")) {
			return nil, errs.BadRequest("patch", "operation %d: %s belongs to a sensitive rule, which can be replaced but not copied, moved or tested", i, src)
		}
	}
	var changed []string
	defer func() {
		if len(changed) > 0 || err != nil {
			s.guard.Done(ctx, RuleUpdate, "inspection rule", r.UUID, err, map[string]any{"changed": changed})
		}
	}()
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		// The UPDATE takes the row for the rest of the transaction.
		n, err := tx.InspectionRule.Update().Where(inspectionrule.ID(r.ID)).SetUpdatedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return notFound(ident)
		}
		cur, err := tx.InspectionRule.Get(ctx, r.ID)
		if err != nil {
			return err
		}
		before := map[string]any{"priority": cur.Priority, "sensitive": cur.Sensitive, "phase": cur.Phase,
			"actions": cur.Actions, "conditions": cur.Conditions}
		if cur.Description != nil {
			before["description"] = *cur.Description
		}
		if cur.Conditions == nil {
			before["conditions"] = []any{}
		}
		after, err := patchdoc.Apply(before, raw, "inspection rule")
		if err != nil {
			return err
		}
		for _, f := range patchable {
			if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
				changed = append(changed, f)
			}
		}
		if cur.Sensitive && after["sensitive"] != true {
			return errs.BadRequest("sensitive", "Inspection rules cannot have the sensitive flag unset.")
		}
		in := Input{Priority: after["priority"], Sensitive: after["sensitive"], Phase: after["phase"],
			Conditions: after["conditions"], Actions: after["actions"]}
		switch d := after["description"].(type) {
		case nil:
		case string:
			in.Description = &d
		default:
			return errs.BadRequest("description", "description must be a string")
		}
		p, err := parse(in)
		if err != nil {
			return err
		}
		u := tx.InspectionRule.UpdateOneID(r.ID).SetPriority(p.priority).SetSensitive(p.sensitive).SetPhase(p.phase).
			SetConditions(p.conditions).SetActions(p.actions)
		if p.description == nil {
			u.ClearDescription()
		} else {
			u.SetDescription(*p.description)
		}
		return u.Exec(ctx)
	})
	if err != nil {
		return nil, err
	}
	return find(ctx, s.db.Client, r.UUID)
}

// Delete removes a rule.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	if err := s.authorize(ctx, RuleDelete, ident); err != nil {
		return err
	}
	r, err := find(ctx, s.db.Client, ident)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "inspection rule", r.UUID, err, nil) }()
	return s.db.InspectionRule.DeleteOneID(r.ID).Exec(ctx)
}
