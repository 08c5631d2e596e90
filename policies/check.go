package policies

import (
	"fmt"
	"sort"
	"strings"
)

// Target carries the attributes of the resource an action touches, by the
// names check strings use: %(node.owner)s, %(runbook.public)s, …
type Target struct {
	NodeOwner       string
	NodeLessee      string
	RunbookOwner    string
	RunbookPublic   bool
	AllocationOwner string
	CampaignOwner   string
	// OfferOwner is the project that made a leasing offer; LeaseOwner and
	// LeaseLessee are a lease's owner_id and project_id, as ESI-Leap's
	// rules name them.
	OfferOwner  string
	LeaseOwner  string
	LeaseLessee string
	// ThreadOwner is the project a tenant asked to look at a node (its
	// owner; "" for the operators), ThreadAsker the tenant's project.
	ThreadOwner string
	ThreadAsker string
	// serviceProject is the elevated service project, filled in by the
	// enforcer from its setting, never by callers.
	serviceProject string
}

// targetKeys lists every attribute a check string may read, so that an
// override naming anything else is refused when it is loaded rather than
// silently never matching.
var targetKeys = map[string]func(Target) string{
	"node.owner":       func(t Target) string { return t.NodeOwner },
	"node.lessee":      func(t Target) string { return t.NodeLessee },
	"runbook.owner":    func(t Target) string { return t.RunbookOwner },
	"runbook.public":   func(t Target) string { return boolString(t.RunbookPublic) },
	"allocation.owner": func(t Target) string { return t.AllocationOwner },
	"campaign.owner":   func(t Target) string { return t.CampaignOwner },
	"offer.project_id": func(t Target) string { return t.OfferOwner },
	"lease.owner_id":   func(t Target) string { return t.LeaseOwner },
	"lease.project_id": func(t Target) string { return t.LeaseLessee },
	"thread.owner":     func(t Target) string { return t.ThreadOwner },
	"thread.asker":     func(t Target) string { return t.ThreadAsker },
	// Ironic loads its service_project_name setting into the target as
	// config.service_project_name; rule:service_role compares it.
	"config.service_project_name": func(t Target) string { return t.serviceProject },
}

func boolString(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func (t Target) key() string {
	return t.NodeOwner + "\x00" + t.NodeLessee + "\x00" + t.RunbookOwner + "\x00" + boolString(t.RunbookPublic) + "\x00" + t.AllocationOwner + "\x00" + t.CampaignOwner +
		"\x00" + t.OfferOwner + "\x00" + t.LeaseOwner + "\x00" + t.LeaseLessee
}

// credentials are the caller attributes the left side of a generic check
// may name, as oslo.policy calls them.
var credentials = map[string]func(*Principal) string{
	"project_id": func(p *Principal) string { return p.Project },
	// An Anvil project has one identifier, serving as both its id and its
	// name, so Ironic's project_name checks read the same value.
	"project_name": func(p *Principal) string { return p.Project },
	"user_id":      func(p *Principal) string { return p.User },
	"system_scope": func(p *Principal) string {
		if p.System {
			return "all"
		}
		return ""
	},
}

// expr is a compiled check string.
type expr interface {
	eval(p *Principal, t Target) bool
}

type constExpr bool
type notExpr struct{ x expr }
type andExpr []expr
type orExpr []expr
type roleExpr string

// ruleExpr is resolved after every rule of a set is parsed, so rules can
// refer to rules defined later (or in another override file).
type ruleExpr struct {
	name string
	to   *compiled
}

// genericExpr compares a caller attribute, or a quoted literal, with a
// literal or a target attribute.
type genericExpr struct {
	cred    func(*Principal) string // nil when the left side is a literal
	literal string
	target  func(Target) string // nil when the right side is a literal
	value   string
}

func (c constExpr) eval(*Principal, Target) bool { return bool(c) }
func (n notExpr) eval(p *Principal, t Target) bool {
	return !n.x.eval(p, t)
}
func (a andExpr) eval(p *Principal, t Target) bool {
	for _, x := range a {
		if !x.eval(p, t) {
			return false
		}
	}
	return true
}
func (o orExpr) eval(p *Principal, t Target) bool {
	for _, x := range o {
		if x.eval(p, t) {
			return true
		}
	}
	return false
}
func (r roleExpr) eval(p *Principal, _ Target) bool { return p.HasRole(string(r)) }
func (r *ruleExpr) eval(p *Principal, t Target) bool {
	return r.to.expr.eval(p, t)
}
func (g genericExpr) eval(p *Principal, t Target) bool {
	left := g.literal
	if g.cred != nil {
		if p == nil {
			return false
		}
		left = g.cred(p)
	}
	right := g.value
	if g.target != nil {
		right = g.target(t)
	}
	// An unset attribute on either side never matches: a node without an
	// owner is nobody's, not everybody's.
	return left != "" && right != "" && left == right
}

// compiled is one rule's check string after parsing.
type compiled struct {
	check string
	expr  expr
	refs  []*ruleExpr
}

// parse compiles one check string. Rule references stay unresolved until
// the rule set is linked; see compileSet.
func parse(check string) (*compiled, error) {
	toks, err := tokenize(check)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if len(toks) == 0 {
		return &compiled{check: check, expr: constExpr(true)}, nil
	}
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.pos < len(toks) {
		return nil, fmt.Errorf("unexpected %q at position %d", toks[p.pos], p.pos+1)
	}
	return &compiled{check: check, expr: e, refs: p.refs}, nil
}

// tokenize splits on white space and then peels parentheses off either
// end of each word, as oslo.policy does: a target reference such as
// %(node.owner)s keeps its own parentheses.
func tokenize(s string) ([]string, error) {
	var toks []string
	for _, w := range strings.Fields(s) {
		lead := 0
		for lead < len(w) && w[lead] == '(' {
			lead++
		}
		trail := 0
		for trail < len(w)-lead && w[len(w)-1-trail] == ')' {
			trail++
		}
		for range lead {
			toks = append(toks, "(")
		}
		if core := w[lead : len(w)-trail]; core != "" {
			if q := strings.IndexAny(core, "'\""); q >= 0 && strings.Count(core, core[q:q+1])%2 != 0 {
				return nil, fmt.Errorf("unterminated quote in %q", core)
			}
			toks = append(toks, core)
		}
		for range trail {
			toks = append(toks, ")")
		}
	}
	return toks, nil
}

type parser struct {
	toks  []string
	pos   int
	refs  []*ruleExpr
	depth int
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) or() (expr, error) {
	x, err := p.and()
	if err != nil {
		return nil, err
	}
	terms := orExpr{x}
	for strings.EqualFold(p.peek(), "or") {
		p.pos++
		y, err := p.and()
		if err != nil {
			return nil, err
		}
		terms = append(terms, y)
	}
	if len(terms) == 1 {
		return x, nil
	}
	return terms, nil
}

func (p *parser) and() (expr, error) {
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	terms := andExpr{x}
	for strings.EqualFold(p.peek(), "and") {
		p.pos++
		y, err := p.unary()
		if err != nil {
			return nil, err
		}
		terms = append(terms, y)
	}
	if len(terms) == 1 {
		return x, nil
	}
	return terms, nil
}

func (p *parser) unary() (expr, error) {
	tok := p.peek()
	switch {
	case tok == "":
		return nil, fmt.Errorf("check string ends where a check was expected")
	case strings.EqualFold(tok, "not"):
		p.pos++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return notExpr{x}, nil
	case tok == "(":
		p.pos++
		if p.depth++; p.depth > 32 {
			return nil, fmt.Errorf("parentheses nested deeper than 32")
		}
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("missing closing parenthesis")
		}
		p.pos++
		p.depth--
		return x, nil
	case tok == ")" || strings.EqualFold(tok, "and") || strings.EqualFold(tok, "or"):
		return nil, fmt.Errorf("unexpected %q at position %d", tok, p.pos+1)
	}
	p.pos++
	return p.check(tok)
}

func (p *parser) check(tok string) (expr, error) {
	switch tok {
	case "@":
		return constExpr(true), nil
	case "!":
		return constExpr(false), nil
	}
	kind, match, ok := strings.Cut(tok, ":")
	if !ok || kind == "" || match == "" {
		return nil, fmt.Errorf("%q is not a check (want kind:match, @ or !)", tok)
	}
	switch kind {
	case "rule":
		r := &ruleExpr{name: match}
		p.refs = append(p.refs, r)
		return r, nil
	case "role":
		return roleExpr(strings.ToLower(match)), nil
	}
	g := genericExpr{}
	if lit, ok := unquote(kind); ok {
		g.literal = lit
	} else if f, ok := credentials[kind]; ok {
		g.cred = f
	} else {
		return nil, fmt.Errorf("unknown check kind %q in %q (known: rule, role, %s, or a quoted literal)", kind, tok, strings.Join(sortedKeys(credentials), ", "))
	}
	if strings.HasPrefix(match, "%(") && strings.HasSuffix(match, ")s") {
		name := match[2 : len(match)-2]
		f, ok := targetKeys[name]
		if !ok {
			return nil, fmt.Errorf("unknown target attribute %q in %q (known: %s)", name, tok, strings.Join(sortedKeys(targetKeys), ", "))
		}
		g.target = f
	} else if lit, ok := unquote(match); ok {
		g.value = lit
	} else {
		g.value = match
	}
	return g, nil
}

func unquote(s string) (string, bool) {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1], true
	}
	return "", false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// compileSet parses every check string of rules and links rule references,
// refusing unknown references and cycles. It is all-or-nothing: the error
// names the first bad rule.
func compileSet(rules map[string]string) (map[string]*compiled, error) {
	set := make(map[string]*compiled, len(rules))
	for _, name := range sortedKeys(rules) {
		c, err := parse(rules[name])
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", name, err)
		}
		set[name] = c
	}
	for _, name := range sortedKeys(set) {
		for _, r := range set[name].refs {
			to, ok := set[r.name]
			if !ok {
				return nil, fmt.Errorf("rule %q: refers to undefined rule %q", name, r.name)
			}
			r.to = to
		}
	}
	// Depth-first search for cycles: evaluation would never end.
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case active:
			return fmt.Errorf("rule %q: refers to itself through %s", name, strings.Join(append(path, name), " -> "))
		case done:
			return nil
		}
		state[name] = active
		for _, r := range set[name].refs {
			if err := visit(r.name, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = done
		return nil
	}
	for _, name := range sortedKeys(set) {
		if err := visit(name, nil); err != nil {
			return nil, err
		}
	}
	return set, nil
}
