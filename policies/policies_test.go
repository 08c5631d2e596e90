package policies

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func proj(project string, roles ...string) *Principal {
	return &Principal{User: "u-" + project, Project: project, Roles: ExpandRoles(roles)}
}

func system(roles ...string) *Principal {
	return &Principal{User: "op", System: true, Roles: ExpandRoles(roles)}
}

func TestExpandRoles(t *testing.T) {
	got := strings.Join(ExpandRoles([]string{"member", "Auditor", "reader"}), ",")
	if got != "member,reader,auditor" {
		t.Fatalf("ExpandRoles = %s", got)
	}
	if got := ExpandRoles(nil); len(got) != 0 {
		t.Fatalf("ExpandRoles(nil) = %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, check := range []string{
		"role:admin and", "(role:admin", "role:admin)", "or role:x", "bogus",
		"project_id:%(node.colour)s", "tenant:%(node.owner)s", "'unterminated:x",
		"role:", "not",
	} {
		if _, err := parse(check); err == nil {
			t.Errorf("parse(%q) succeeded, want an error", check)
		}
	}
}

func TestDecisions(t *testing.T) {
	e, err := New(Defaults(), nil)
	if err != nil {
		t.Fatal(err)
	}
	node := Target{NodeOwner: "hw", NodeLessee: "tenant"}
	cases := []struct {
		p    *Principal
		rule string
		want bool
	}{
		{system("admin"), "baremetal:node:create", true},
		{system("member"), "baremetal:node:create", false},
		{system("reader"), "baremetal:node:list_all", true},
		{proj("hw", "reader"), "baremetal:node:list_all", false},
		{proj("hw", "reader"), "baremetal:node:get", true},
		{proj("tenant", "reader"), "baremetal:node:get", true},
		{proj("other", "admin"), "baremetal:node:get", false},
		{proj("tenant", "admin"), "baremetal:node:get:driver_info", false},
		{proj("hw", "reader"), "baremetal:node:get:driver_info", true},
		{proj("tenant", "admin"), "baremetal:node:update:lessee", false},
		{proj("hw", "admin"), "baremetal:node:update:lessee", true},
		{proj("hw", "admin"), "baremetal:node:update:owner", false},
		{proj("tenant", "member"), "baremetal:node:set_maintenance", false},
		{proj("tenant", "admin"), "baremetal:node:set_maintenance", true},
		{nil, "baremetal:node:get", false},
		// A system principal is not a member of any project: its empty
		// project must not match a node without an owner.
		{system("admin"), "is_node_owner", false},
	}
	for _, c := range cases {
		got, err := e.Decide(c.p, c.rule, node)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s %v on %s = %v, want %v", c.p.Scope(), c.p.Roles, c.rule, got, c.want)
		}
	}
	unowned := Target{}
	if ok, _ := e.Decide(&Principal{User: "x", Roles: ExpandRoles([]string{"admin"})}, "baremetal:node:get", unowned); ok {
		t.Error("a principal without a project matched a node without an owner")
	}
	if _, err := e.Decide(system("admin"), "baremetal:node:frobnicate", node); err == nil {
		t.Error("an unknown rule was decided")
	}
	err = e.Authorize(WithPrincipal(context.Background(), proj("other", "admin")), "baremetal:node:get", node)
	var d *DeniedError
	if !errors.Is(err, ErrDenied) || !errors.As(err, &d) || d.Rule != "baremetal:node:get" {
		t.Fatalf("Authorize denial = %v", err)
	}
}

func TestOverridesAllOrNothing(t *testing.T) {
	e, err := New(Defaults(), nil)
	if err != nil {
		t.Fatal(err)
	}
	member := proj("hw", "member")
	node := Target{NodeOwner: "hw"}
	if ok, _ := e.Decide(member, "baremetal:node:traits:set", node); ok {
		t.Fatal("owner member may set traits by default")
	}
	bad := []map[string]string{
		{"baremetal:node:traits:set": "rule:owner_member", "baremetal:node:get": "role:admin and ("},
		{"baremetal:node:traits:set": "rule:nowhere"},
		{"baremetal:node:nonsense": "@"},
		{"anvil:policy:update": "@"},
		{"loop_a": "rule:loop_b", "loop_b": "rule:loop_a", "baremetal:node:get": "rule:loop_a"},
	}
	for _, o := range bad {
		if err := e.Reload(o); err == nil {
			t.Errorf("Reload(%v) succeeded", o)
		}
		if ok, _ := e.Decide(member, "baremetal:node:traits:set", node); ok {
			t.Fatalf("a refused override %v changed the policy", o)
		}
	}
	if err := e.Reload(map[string]string{"my_owners": "role:member and project_id:%(node.owner)s", "baremetal:node:traits:set": "rule:my_owners"}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.Decide(member, "baremetal:node:traits:set", node); !ok {
		t.Fatal("a good override did not apply (stale cached decision?)")
	}
	if err := e.Reload(nil); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.Decide(member, "baremetal:node:traits:set", node); ok {
		t.Fatal("dropping the override did not restore the default")
	}
}

func TestDefaultsAreDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Defaults() {
		if seen[r.Name] {
			t.Errorf("rule %s defined twice", r.Name)
		}
		seen[r.Name] = true
		if r.Description == "" {
			t.Errorf("rule %s has no description", r.Name)
		}
		if strings.Contains(r.Name, ":") && len(r.Scopes) == 0 {
			t.Errorf("rule %s has no scope types", r.Name)
		}
	}
	for _, p := range Protected {
		if !seen[p] {
			t.Errorf("protected rule %s does not exist", p)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, r := range Defaults() {
		f.Add(r.Check)
	}
	f.Add("not (role:a or 'x':%(node.owner)s) and !")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parse(s)
		if err != nil {
			return
		}
		for _, r := range c.refs {
			r.to = &compiled{expr: constExpr(true)}
		}
		c.expr.eval(proj("p", "member"), Target{NodeOwner: "p"})
		c.expr.eval(nil, Target{})
	})
}

func BenchmarkAuthorize(b *testing.B) {
	e, err := New(Defaults(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := WithPrincipal(context.Background(), proj("tenant", "member"))
	node := Target{NodeOwner: "hw", NodeLessee: "tenant"}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			_ = e.Authorize(ctx, "baremetal:node:get", node)
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			e.cur.Load().cache.Clear()
			_ = e.Authorize(ctx, "baremetal:node:get", node)
		}
	})
}

// The sample file, uncommented, is a valid override of every rule with
// its own default: an operator can start from it.
func TestSampleRoundTrips(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(Sample(Defaults()), "\n") {
		if strings.HasPrefix(l, `#"`) {
			lines = append(lines, strings.TrimPrefix(l, "#"))
		}
	}
	if len(lines) != len(Defaults()) {
		t.Fatalf("sample has %d rules, want %d", len(lines), len(Defaults()))
	}
	var m map[string]string
	if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &m); err != nil {
		t.Fatal(err)
	}
	for name := range m {
		if slices.Contains(Protected, name) || IsBaseRule(name) {
			if !strings.Contains(Sample(Defaults()), "may not change it.\n#\""+name+"\"") {
				t.Errorf("the sample does not say %s cannot be overridden", name)
			}
			delete(m, name)
		}
	}
	if err := Validate(Defaults(), m); err != nil {
		t.Fatal(err)
	}
}

func TestMatrix(t *testing.T) {
	e, _ := New(Defaults(), nil)
	ps, err := SelectPersonas([]string{"owner-admin,lessee-member", "other-reader"})
	if err != nil {
		t.Fatal(err)
	}
	rules, allowed, err := e.Matrix(ps)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, r := range rules {
		var b strings.Builder
		for _, ok := range allowed[i] {
			b.WriteString(map[bool]string{true: "Y", false: "n"}[ok])
		}
		got[r] = b.String()
	}
	for rule, want := range map[string]string{
		"baremetal:node:get":                    "YYn",
		"baremetal:node:update:lessee":          "Ynn",
		"baremetal:node:create:self_owned_node": "Ynn",
		"anvil:audit:list":                      "nnn",
		"anvil:firmware_image:list":             "nnn",
		"anvil:firmware_image:create":           "nnn",
		"anvil:firmware_image:delete":           "nnn",
	} {
		if got[rule] != want {
			t.Errorf("%s: %s, want %s", rule, got[rule], want)
		}
	}
	if _, err := SelectPersonas([]string{"nobody"}); err == nil {
		t.Error("an unknown persona was accepted")
	}
}

// TestServiceRole follows Ironic's service rules: the role implies no
// other; system-scoped and owner-project service users get the SYSTEM_SERVICE
// and PROJECT_SERVICE terms; only the elevated service project passes
// rule:service_role and with it system member and reader.
func TestServiceRole(t *testing.T) {
	if got := ExpandRoles([]string{"Service"}); strings.Join(got, ",") != "service" {
		t.Fatalf("ExpandRoles(service) = %v: service must imply no other role", got)
	}
	if !KnownRole("service") || ExpandRoles([]string{"admin"})[len(ExpandRoles([]string{"admin"}))-1] == "service" {
		t.Fatal("service must be a known role that admin does not imply")
	}
	node := Target{NodeOwner: "hw", NodeLessee: "tenant"}
	for _, tc := range []struct {
		svcProject string // the enforcer's setting; empty is the default
		p          *Principal
		rule       string
		want       bool
	}{
		{"", system("service"), "baremetal:node:get", true},
		{"", system("service"), "baremetal:node:list_all", true},
		{"", system("service"), "baremetal:node:create", true},
		{"", system("service"), "baremetal:node:set_power_state", true},
		{"", system("service"), "baremetal:node:update:owner", false}, // SYSTEM_MEMBER has no SYSTEM_SERVICE
		{"", system("service"), "baremetal:node:delete", false},
		{"", system("service"), "anvil:audit:list", false},
		{"", system("service"), "anvil:firmware_image:list", true},
		{"", system("service"), "anvil:firmware_image:create", false},
		{"", proj("hw", "service"), "baremetal:node:get", true},
		{"", proj("hw", "service"), "baremetal:node:get:driver_info", true},
		{"", proj("hw", "service"), "baremetal:node:update:driver_info", true},
		{"", proj("hw", "service"), "baremetal:node:set_provision_state", true},
		{"", proj("hw", "service"), "baremetal:node:set_power_state", false}, // SYSTEM_OR_PROJECT_MEMBER has no PROJECT_SERVICE
		{"", proj("hw", "service"), "baremetal:node:list", true},
		{"", proj("hw", "service"), "baremetal:node:list_all", false},
		{"", proj("tenant", "service"), "baremetal:node:get", false}, // PROJECT_SERVICE matches the owner only
		{"", proj("tenant", "service"), "baremetal:node:set_provision_state", false},
		{"", proj("tenant", "service"), "baremetal:node:list", true},
		{"", proj("service", "service"), "baremetal:node:list_all", true},
		{"", proj("service", "service"), "baremetal:node:update:owner", true},
		{"", proj("service", "service"), "baremetal:node:create", false},
		{"", proj("service", "reader"), "baremetal:node:list_all", false},
		{"automation", proj("service", "service"), "baremetal:node:list_all", false},
		{"automation", proj("automation", "service"), "baremetal:node:list_all", true},
		{"automation", proj("automation", "service"), "baremetal:node:update:owner", true},
	} {
		e, err := New(Defaults(), nil, ServiceProject(tc.svcProject))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := e.Decide(tc.p, tc.rule, node); err != nil || got != tc.want {
			t.Errorf("service project %q: %s (%v) on %s = %v, %v; want %v", tc.svcProject, tc.p.Scope(), tc.p.Roles, tc.rule, got, err, tc.want)
		}
	}
	// Ironic lets operators redefine service_role; Anvil refuses it, as
	// every base rule, since it widens system_member and system_reader at
	// once. The service project is a setting instead (--service-project).
	if _, err := New(Defaults(), map[string]string{"service_role": "role:service and project_name:ops"}); err == nil {
		t.Error("an override of service_role was accepted")
	}
}

func TestMatrixServicePersonas(t *testing.T) {
	e, _ := New(Defaults(), nil, ServiceProject("automation"))
	ps, err := SelectPersonas([]string{"system-service,owner-service,lessee-service,other-service,service-project-service"})
	if err != nil {
		t.Fatal(err)
	}
	rules, allowed, err := e.Matrix(ps)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, r := range rules {
		var b strings.Builder
		for _, ok := range allowed[i] {
			b.WriteString(map[bool]string{true: "Y", false: "n"}[ok])
		}
		got[r] = b.String()
	}
	for rule, want := range map[string]string{
		"baremetal:node:get":             "YYnnY",
		"baremetal:node:list":            "YYYYY",
		"baremetal:node:list_all":        "YnnnY", // the elevated persona follows the enforcer's service project
		"baremetal:node:update:owner":    "nnnnY",
		"baremetal:node:set_boot_device": "YYnnY",
	} {
		if got[rule] != want {
			t.Errorf("%s: %s, want %s", rule, got[rule], want)
		}
	}
}
