package policies

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/casbin/casbin/v2"
	"github.com/casbin/casbin/v2/model"
)

// ErrDenied is matched (errors.Is) by every refusal.
var ErrDenied = errors.New("policy does not allow this action")

// DeniedError names the rule that refused.
type DeniedError struct{ Rule string }

func (d *DeniedError) Error() string {
	return fmt.Sprintf("policy %s does not allow this action", d.Rule)
}

// Is makes errors.Is(err, ErrDenied) true.
func (d *DeniedError) Is(target error) bool { return target == ErrDenied }

// The casbin model: one policy line per rule, and a matcher that hands
// the request to the rule's check string compiled once. Casbin's own
// expression evaluator re-parses eval() arguments on every call (tens of
// microseconds); a registered function keeps a decision to a map lookup
// plus a walk of a small tree.
const casbinModel = `
[request_definition]
r = sub, obj, act

[policy_definition]
p = act

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = r.act == p.act && oslo(r.act, r.sub, r.obj)
`

// maxCached bounds the decision cache; past it the cache starts over
// rather than grow with the number of distinct callers and targets. A
// decision is some 220 bytes (measured with 500 projects' members), so
// the cache holds at most about 3.5 MiB; 65,536 were 14 MiB, a quarter of
// an idle replica, for a decision that costs microseconds to make again.
const maxCached = 1 << 14

// state is one immutable, complete policy. Reload swaps it whole, so a
// request never sees half of an old policy and half of a new one.
type state struct {
	effective map[string]string
	rules     map[string]*compiled
	casbin    *casbin.Enforcer
	cache     sync.Map
	cached    atomic.Int64
}

// Enforcer decides whether a principal may act on a target.
type Enforcer struct {
	defaults       []Rule
	serviceProject string
	cur            atomic.Pointer[state]
	mu             sync.Mutex // serializes Reload
}

// DefaultServiceProject is Ironic's default service_project_name.
const DefaultServiceProject = "service"

// Option adjusts an enforcer as New builds it.
type Option func(*Enforcer)

// ServiceProject names the elevated service project: a service-role user
// scoped to it passes rule:service_role, which Ironic folds into
// system_member and system_reader. Empty keeps the default, "service".
func ServiceProject(name string) Option {
	return func(e *Enforcer) {
		if name != "" {
			e.serviceProject = name
		}
	}
}

// New builds an enforcer from the default rules and optional overrides
// (rule name → check string), refusing the whole set when any part is bad.
func New(defaults []Rule, overrides map[string]string, opts ...Option) (*Enforcer, error) {
	e := &Enforcer{defaults: defaults, serviceProject: DefaultServiceProject}
	for _, o := range opts {
		o(e)
	}
	if err := e.Reload(overrides); err != nil {
		return nil, err
	}
	return e, nil
}

// Reload replaces the overrides. On error the policy in force stays.
func (e *Enforcer) Reload(overrides map[string]string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	st, err := build(e.defaults, overrides)
	if err != nil {
		return err
	}
	e.cur.Store(st)
	return nil
}

// Validate checks overrides against defaults without changing anything:
// every name known (or a new helper or step rule), none protected, every
// check string parsed and linked.
func Validate(defaults []Rule, overrides map[string]string) error {
	_, err := build(defaults, overrides)
	return err
}

// IsStepRule reports whether name is a per-step rule an operator may add.
func IsStepRule(name string) bool { return strings.HasPrefix(name, "baremetal:step:execute:") }

func build(defaults []Rule, overrides map[string]string) (*state, error) {
	eff := make(map[string]string, len(defaults)+len(overrides))
	for _, r := range defaults {
		eff[r.Name] = r.Check
	}
	for _, name := range sortedKeys(overrides) {
		switch {
		case slices.Contains(Protected, name):
			return nil, fmt.Errorf("rule %q is protected and cannot be overridden", name)
		case IsBaseRule(name):
			return nil, fmt.Errorf("rule %q is a base rule other rules are built on and cannot be overridden; override the rules that use it instead", name)
		case eff[name] == "" && !strings.Contains(name, ":") && name != "":
			// A helper rule of the operator's own, as oslo.policy allows.
		case IsStepRule(name):
		default:
			if _, ok := eff[name]; !ok {
				return nil, fmt.Errorf("unknown rule %q", name)
			}
		}
		eff[name] = overrides[name]
	}
	rules, err := compileSet(eff)
	if err != nil {
		return nil, err
	}
	m, err := model.NewModelFromString(casbinModel)
	if err != nil {
		return nil, err
	}
	ce, err := casbin.NewEnforcer(m)
	if err != nil {
		return nil, err
	}
	ce.AddFunction("oslo", func(args ...any) (any, error) {
		name, _ := args[0].(string)
		p, _ := args[1].(*Principal)
		t, _ := args[2].(Target)
		c := rules[name]
		return c != nil && c.expr.eval(p, t), nil
	})
	lines := make([][]string, 0, len(rules))
	for _, name := range sortedKeys(rules) {
		lines = append(lines, []string{name})
	}
	if _, err := ce.AddPolicies(lines); err != nil {
		return nil, err
	}
	return &state{effective: eff, rules: rules, casbin: ce}, nil
}

// Authorize returns nil when the principal in ctx may do rule on t, a
// *DeniedError when not, and another error for a rule that does not exist
// (a programming error, never a denial to hide).
func (e *Enforcer) Authorize(ctx context.Context, rule string, t Target) error {
	ok, err := e.Decide(PrincipalFrom(ctx), rule, t)
	if err != nil {
		return err
	}
	if !ok {
		return &DeniedError{Rule: rule}
	}
	return nil
}

// Decide answers for an explicit principal (nil is anonymous).
func (e *Enforcer) Decide(p *Principal, rule string, t Target) (bool, error) {
	st := e.cur.Load()
	t.serviceProject = e.serviceProject
	if _, ok := st.rules[rule]; !ok {
		return false, fmt.Errorf("no policy rule named %q", rule)
	}
	key := rule + "\x00" + p.key() + "\x00" + t.key()
	if v, ok := st.cache.Load(key); ok {
		return v.(bool), nil
	}
	ok, err := st.casbin.Enforce(p, t, rule)
	if err != nil {
		return false, fmt.Errorf("policy %s: %w", rule, err)
	}
	if st.cached.Add(1) > maxCached {
		st.cache.Clear()
		st.cached.Store(0)
	}
	st.cache.Store(key, ok)
	return ok, nil
}

// ServiceProjectName is the elevated service project in force.
func (e *Enforcer) ServiceProjectName() string { return e.serviceProject }

// Effective returns the check string in force for every rule.
func (e *Enforcer) Effective() map[string]string { return maps.Clone(e.cur.Load().effective) }

// Rules returns the documented rules with their effective check strings.
func (e *Enforcer) Rules() []Rule {
	eff := e.cur.Load().effective
	out := slices.Clone(e.defaults)
	for i := range out {
		out[i].Check = eff[out[i].Name]
	}
	return out
}

// Has reports whether a rule exists (defaults, or an operator's addition
// such as a per-step rule).
func (e *Enforcer) Has(rule string) bool {
	_, ok := e.cur.Load().rules[rule]
	return ok
}
