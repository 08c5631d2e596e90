package policies

import (
	"slices"
	"strings"
	"testing"
)

// Base rules are building blocks: "system_member": "@" would make every
// caller a system member for every rule built on it, so no override may
// change one.
func TestBaseRulesCannotBeOverridden(t *testing.T) {
	names := []string{"project_member", "project_admin", "service_role"}
	for _, r := range Defaults() {
		if len(r.Scopes) == 0 {
			names = append(names, r.Name)
		}
	}
	for _, want := range []string{"system_member", "system_admin", "system_reader", "project_reader", "is_node_owner", "is_node_lessee", "owner_member", "lessee_member", "is_runbook_owner", "is_runbook_public", "is_allocation_owner"} {
		if !slices.Contains(names, want) {
			t.Fatalf("%s is not among the base rules", want)
		}
	}
	for _, name := range names {
		err := Validate(Defaults(), map[string]string{name: "@"})
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("overriding %s: %v", name, err)
		}
	}
	// An operator's own helper is still allowed, and so is a scoped rule.
	if err := Validate(Defaults(), map[string]string{"my_helper": "rule:system_member", "baremetal:node:get": "rule:my_helper"}); err != nil {
		t.Error(err)
	}
}

func TestWidening(t *testing.T) {
	for name, c := range map[string]struct {
		before, after map[string]string
		rule          string
		want          []string // personas gaining the rule; nil for none
	}{
		"narrowing": {nil, map[string]string{"baremetal:node:set_power_state": "rule:system_member"}, "baremetal:node:set_power_state", nil},
		"widening": {nil, map[string]string{"baremetal:node:update:owner": "rule:system_member or role:member"}, "baremetal:node:update:owner",
			[]string{"owner-admin", "owner-manager", "owner-member", "lessee-admin", "lessee-manager", "lessee-member", "other-admin", "other-manager", "other-member"}},
		"undoing a narrowing": {map[string]string{"baremetal:node:set_power_state": "rule:system_member"}, nil, "baremetal:node:set_power_state",
			[]string{"owner-admin", "owner-manager", "owner-member", "lessee-admin", "lessee-manager", "lessee-member"}},
		"through a helper": {map[string]string{"mine": "rule:system_member", "baremetal:node:delete": "rule:mine"}, map[string]string{"mine": "role:admin", "baremetal:node:delete": "rule:mine"}, "baremetal:node:delete",
			[]string{"owner-admin", "lessee-admin", "other-admin"}},
		"dropping a step rule": {map[string]string{"baremetal:step:execute:management.reset_bmc": "rule:system_admin"}, nil, "baremetal:step:execute:management.reset_bmc",
			[]string{"system-member", "system-reader", "owner-admin"}},
	} {
		got, err := Widening(c.before, c.after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.want == nil {
			if len(got) > 0 {
				t.Errorf("%s: widens %v", name, got)
			}
			continue
		}
		for _, p := range c.want {
			if !slices.Contains(got[c.rule], p) {
				t.Errorf("%s: %s gains %s, but Widening says %v", name, p, c.rule, got[c.rule])
			}
		}
		if slices.Contains(got[c.rule], "system-admin") {
			t.Errorf("%s: system-admin was already allowed %s", name, c.rule)
		}
	}
}
