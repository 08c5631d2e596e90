package policies

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Persona is a typical caller, for the persona × rule matrix that
// `anvil policy check` prints and the admin console shows.
type Persona struct {
	Name      string
	Principal *Principal
	// serviceProject marks the elevated service persona, whose project is
	// the enforcer's service project, whatever that is set to.
	serviceProject bool
}

// The matrix's projects: the node's owner, its lessee, and a stranger.
const (
	MatrixOwner  = "owner-project"
	MatrixLessee = "lessee-project"
	matrixOther  = "other-project"
)

// Personas returns the secure-RBAC personas: system admin, member, reader
// and service, then each project role (service last) as the node's owner,
// its lessee and an unrelated project, then a service user of the
// elevated service project.
func Personas() []Persona {
	var out []Persona
	for _, r := range []string{"admin", "member", "reader", RoleService} {
		out = append(out, Persona{Name: "system-" + r, Principal: &Principal{User: "system-" + r, System: true, Roles: ExpandRoles([]string{r})}})
	}
	for _, rel := range []struct{ name, project string }{{"owner", MatrixOwner}, {"lessee", MatrixLessee}, {"other", matrixOther}} {
		for _, r := range knownRoles {
			n := rel.name + "-" + r
			out = append(out, Persona{Name: n, Principal: &Principal{User: n, Project: rel.project, Roles: ExpandRoles([]string{r})}})
		}
	}
	out = append(out, Persona{Name: "service-project-service", serviceProject: true,
		Principal: &Principal{User: "service-project-service", Project: DefaultServiceProject, Roles: []string{RoleService}}})
	return out
}

// PersonaNames lists the names Personas uses.
func PersonaNames() []string {
	var out []string
	for _, p := range Personas() {
		out = append(out, p.Name)
	}
	return out
}

// MatrixTarget is the resource every rule is checked against: a node,
// runbook and allocation owned by the owner project and leased to the
// lessee project.
var MatrixTarget = Target{NodeOwner: MatrixOwner, NodeLessee: MatrixLessee, RunbookOwner: MatrixOwner, AllocationOwner: MatrixOwner, CampaignOwner: MatrixOwner, ThreadOwner: MatrixOwner, ThreadAsker: MatrixLessee}

// Matrix decides every documented rule for every persona given: result
// [rule][persona] is true when allowed.
func (e *Enforcer) Matrix(personas []Persona) (rules []string, allowed [][]bool, err error) {
	for _, r := range e.Rules() {
		if len(r.Scopes) == 0 {
			continue // base rules are building blocks, not actions
		}
		row := make([]bool, len(personas))
		for i, p := range personas {
			pr := p.Principal
			if p.serviceProject {
				c := *pr
				c.Project = e.serviceProject
				pr = &c
			}
			if row[i], err = e.Decide(pr, r.Name, MatrixTarget); err != nil {
				return nil, nil, err
			}
		}
		rules = append(rules, r.Name)
		allowed = append(allowed, row)
	}
	return rules, allowed, nil
}

// SelectPersonas returns the named personas, in the order given; names
// may be separated by commas. Unknown names are an error listing the
// known ones.
func SelectPersonas(names []string) ([]Persona, error) {
	all := Personas()
	if len(names) == 0 {
		return all, nil
	}
	byName := map[string]Persona{}
	for _, p := range all {
		byName[p.Name] = p
	}
	var out []Persona
	for _, n := range names {
		for _, n := range strings.Split(n, ",") {
			p, ok := byName[strings.TrimSpace(n)]
			if !ok {
				known := PersonaNames()
				sort.Strings(known)
				return nil, fmt.Errorf("unknown persona %q; known: %s", n, strings.Join(known, ", "))
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Sample renders a policy file an operator can copy into policy.d: every
// rule commented out at its default, with its description, scopes and
// the operations it guards, in Ironic's YAML policy format.
func Sample(rules []Rule) string {
	var b strings.Builder
	b.WriteString("# Anvil policy sample. Uncomment and edit a rule to override it; files in\n")
	b.WriteString("# policy.d are merged over the defaults in lexical order.\n")
	for _, r := range rules {
		b.WriteString("\n# " + r.Description + "\n")
		if len(r.Scopes) > 0 {
			b.WriteString("# Scope types: " + strings.Join(r.Scopes, ", ") + "\n")
		}
		switch {
		case slices.Contains(Protected, r.Name):
			b.WriteString("# Protected: an override may not change it.\n")
		case IsBaseRule(r.Name):
			b.WriteString("# A base rule other rules are built on: an override may not change it.\n")
		}
		for _, op := range r.Operations {
			b.WriteString("# " + op + "\n")
		}
		fmt.Fprintf(&b, "#%q: %q\n", r.Name, r.Check)
	}
	return b.String()
}

// Widening compares two sets of overrides on the persona matrix and
// returns, for every documented rule, the personas the second allows
// that the first denied: what applying after in place of before would
// newly let through.
func Widening(before, after map[string]string) (map[string][]string, error) {
	eb, err := New(Defaults(), before)
	if err != nil {
		return nil, err
	}
	ea, err := New(Defaults(), after)
	if err != nil {
		return nil, err
	}
	var rules []string
	for _, r := range Defaults() {
		if len(r.Scopes) > 0 {
			rules = append(rules, r.Name)
		}
	}
	// Per-step rules exist only in overrides; a missing one limits
	// nothing, so dropping or loosening one widens.
	for _, set := range []map[string]string{before, after} {
		for name := range set {
			if IsStepRule(name) && !slices.Contains(rules, name) {
				rules = append(rules, name)
			}
		}
	}
	decide := func(e *Enforcer, p *Principal, rule string) (bool, error) {
		if !e.Has(rule) {
			return true, nil
		}
		return e.Decide(p, rule, MatrixTarget)
	}
	out := map[string][]string{}
	for _, rule := range rules {
		for _, p := range Personas() {
			was, err := decide(eb, p.Principal, rule)
			if err != nil {
				return nil, err
			}
			now, err := decide(ea, p.Principal, rule)
			if err != nil {
				return nil, err
			}
			if now && !was {
				out[rule] = append(out[rule], p.Name)
			}
		}
	}
	return out, nil
}
