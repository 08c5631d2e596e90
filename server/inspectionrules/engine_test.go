package inspectionrules

import (
	"strings"
	"testing"
)

// inventory is the shape bmc.Inventory stores, trimmed.
var inventory = map[string]any{
	"cpu":        map[string]any{"count": float64(8), "architecture": "x86_64"},
	"memory":     map[string]any{"physical_mb": float64(16384)},
	"interfaces": []any{map[string]any{"name": "eth0", "mac_address": "52:54:00:00:00:01", "ipv4_address": "192.0.2.7"}},
	"disks":      []any{},
}

func testState() *state {
	return &state{
		node:      map[string]any{"uuid": "u-1", "name": "n1", "properties": map[string]any{"capabilities": "boot_mode:uefi"}, "extra": map[string]any{}, "resource_class": nil},
		traits:    []string{"CUSTOM_OLD"},
		inventory: inventory, pluginData: map[string]any{},
	}
}

// TestInterpolate: Python format fields over the rule context, as
// Ironic's str.format, and the string kept when a field names nothing.
func TestInterpolate(t *testing.T) {
	ctx := map[string]any{"node": testState().node, "inventory": inventory, "plugin_data": map[string]any{}}
	for in, want := range map[string]any{
		"{inventory[cpu][count]}":                    "8",
		"{inventory[cpu][architecture]}-{node.name}": "x86_64-n1",
		"{inventory[interfaces][0][mac_address]}":    "52:54:00:00:00:01",
		"{inventory[disks]}":                         "[]",
		"{node[resource_class]}":                     "None",
		"{{literal}}":                                "{literal}",
		"{inventory[nothing]}":                       "{inventory[nothing]}",
		"{inventory[cpu][count]:>4}":                 "{inventory[cpu][count]:>4}",
	} {
		if got := interpolate(in, ctx, false); got != want {
			t.Errorf("%s = %v, want %v", in, got, want)
		}
	}
	if got := interpolate("{inventory[nothing]}", ctx, true); got != nil {
		t.Errorf("is-empty on a missing field = %v, want nil", got)
	}
}

// TestConditions: each operator, inversion, and loops with any, all,
// first and last.
func TestConditions(t *testing.T) {
	s := testState()
	cond := func(op string, args map[string]any, extra ...any) map[string]any {
		c := map[string]any{"op": op, "args": args}
		for i := 0; i+1 < len(extra); i += 2 {
			c[extra[i].(string)] = extra[i+1]
		}
		return c
	}
	for _, tc := range []struct {
		c    map[string]any
		want bool
	}{
		{cond("eq", map[string]any{"values": []any{"{inventory[cpu][count]}", 8}}), true},
		{cond("eq", map[string]any{"values": []any{"{inventory[cpu][count]}", "8"}}), true},
		{cond("!eq", map[string]any{"values": []any{"{inventory[cpu][count]}", 8}}), false},
		{cond("gt", map[string]any{"values": []any{"{inventory[memory][physical_mb]}", 8192, 100}}), true},
		{cond("lt", map[string]any{"values": []any{"{inventory[cpu][count]}", 4}}), false},
		{cond("is-empty", map[string]any{"value": "{inventory[disks]}"}), true},
		{cond("is-empty", map[string]any{"value": "{inventory[nothing]}"}), true},
		{cond("is-empty", map[string]any{"value": "{inventory[cpu]}"}), false},
		{cond("in-net", map[string]any{"address": "{inventory[interfaces][0][ipv4_address]}", "subnet": "192.0.2.0/24"}), true},
		{cond("in-net", map[string]any{"address": "198.51.100.1", "subnet": "192.0.2.0/24"}), false},
		{cond("matches", map[string]any{"value": "{inventory[cpu][architecture]}", "regex": "x86"}), false},
		{cond("matches", map[string]any{"value": "{inventory[cpu][architecture]}", "regex": "x86_64"}), true},
		{cond("contains", map[string]any{"value": "{inventory[cpu][architecture]}", "regex": "86"}), true},
		{cond("one-of", map[string]any{"value": "{inventory[cpu][architecture]}", "values": []any{"aarch64", "x86_64"}}), true},
		{cond("is-none", map[string]any{"value": nil}), true},
		{cond("is-true", map[string]any{"value": "Yes"}), true},
		{cond("is-false", map[string]any{"value": float64(0)}), true},
		{cond("is-false", map[string]any{"value": nil}), true},
		{cond("eq", map[string]any{"values": []any{"{item}", "x86_64"}}, "loop", []any{"arm", "x86_64"}), true},
		{cond("eq", map[string]any{"values": []any{"{item}", "x86_64"}}, "loop", []any{"arm", "x86_64"}, "multiple", "all"), false},
		{cond("eq", map[string]any{"values": []any{"{item}", "{inventory[cpu][architecture]}"}}, "loop", []any{"x86_64", "x86_64"}, "multiple", "all"), true},
		{cond("eq", map[string]any{"values": []any{"{item}", "arm"}}, "loop", []any{"arm", "x86_64"}, "multiple", "last"), false},
		{cond("eq", map[string]any{"values": []any{"{item}", "arm"}}, "loop", []any{"arm", "x86_64"}, "multiple", "first"), true},
		// A top-level string argument is formatted twice in a loop, so an
		// item may hold variables.
		{cond("matches", map[string]any{"value": "{item[n]}", "regex": "8"}, "loop", map[string]any{"n": "{inventory[cpu][count]}"}), true},
	} {
		got, err := s.check(tc.c)
		if err != nil || got != tc.want {
			t.Errorf("%v = %v, %v; want %v", tc.c, got, err, tc.want)
		}
	}
	if _, err := s.check(cond("lt", map[string]any{"values": []any{map[string]any{}, 1}})); err == nil {
		t.Errorf("ordering an object against a number succeeded")
	}
}

// TestActions: what each action does to the node's state.
func TestActions(t *testing.T) {
	s := testState()
	act := func(op string, args map[string]any) {
		t.Helper()
		if err := s.run(map[string]any{"op": op, "args": args}); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	act("set-attribute", map[string]any{"path": "/properties/cpus", "value": "{inventory[cpu][count]}"})
	act("set-attribute", map[string]any{"path": "resource_class", "value": "baremetal-{inventory[cpu][architecture]}"})
	act("set-attribute", map[string]any{"path": "extra.deep.key", "value": 1})
	act("extend-attribute", map[string]any{"path": "/extra/tags", "value": "a"})
	act("extend-attribute", map[string]any{"path": "/extra/tags", "value": "a", "unique": true})
	act("extend-attribute", map[string]any{"path": "/extra/tags", "value": "b"})
	act("del-attribute", map[string]any{"path": "/extra/deep/key"})
	act("set-capability", map[string]any{"name": "gpu", "value": "none"})
	act("set-capability", map[string]any{"name": "boot_mode", "value": "bios"})
	act("unset-capability", map[string]any{"name": "gpu"})
	act("add-trait", map[string]any{"name": "CUSTOM_NEW"})
	act("add-trait", map[string]any{"name": "CUSTOM_NEW"})
	act("remove-trait", map[string]any{"name": "CUSTOM_OLD"})
	act("set-plugin-data", map[string]any{"path": "seen.by", "value": "rule"})
	act("unset-plugin-data", map[string]any{"path": "not.there"})
	act("log", map[string]any{"msg": "cpus {inventory[cpu][count]}"})
	props := s.node["properties"].(map[string]any)
	extra := s.node["extra"].(map[string]any)
	if props["cpus"] != "8" || s.node["resource_class"] != "baremetal-x86_64" || props["capabilities"] != "boot_mode:bios" {
		t.Errorf("node %v", s.node)
	}
	if tags := extra["tags"].([]any); len(tags) != 2 || len(extra["deep"].(map[string]any)) != 0 {
		t.Errorf("extra %v", extra)
	}
	if len(s.traits) != 1 || s.traits[0] != "CUSTOM_NEW" {
		t.Errorf("traits %v", s.traits)
	}
	if s.pluginData["seen"].(map[string]any)["by"] != "rule" {
		t.Errorf("plugin_data %v", s.pluginData)
	}
	for _, bad := range []map[string]any{
		{"op": "fail", "args": map[string]any{"msg": "no"}},
		{"op": "set-attribute", "args": map[string]any{"path": "/{inventory[cpu][architecture]}/x", "value": 1}},
		{"op": "extend-attribute", "args": map[string]any{"path": "/resource_class", "value": 1}},
		{"op": "del-attribute", "args": map[string]any{"path": "/extra/none"}},
		{"op": "add-trait", "args": map[string]any{"name": "{inventory[cpu][architecture]}"}},
	} {
		if err := s.run(bad); err == nil {
			t.Errorf("%v succeeded", bad)
		}
	}
}

// TestValidate: Ironic's validate_rule answers, each naming its field.
func TestValidate(t *testing.T) {
	ok := []any{map[string]any{"op": "add-trait", "args": []any{"CUSTOM_X"}}}
	// List args are kept as sent, and named by the action's signature.
	if p, err := parse(Input{Actions: ok}); err != nil || namedArgs("add-trait", p.actions[0]["args"])["name"] != "CUSTOM_X" || p.phase != "main" {
		t.Errorf("list args: %v %v", p, err)
	}
	for _, tc := range []struct {
		in      Input
		mention string
	}{
		{Input{Actions: ok, Priority: 1.5}, "Priority"},
		{Input{Actions: ok, Sensitive: "yes"}, "sensitive"},
		{Input{Actions: []any{map[string]any{"op": "log", "args": map[string]any{"msg": "m", "level": "loud"}}}}, "log level"},
		{Input{Actions: []any{map[string]any{"op": "add-trait", "args": []any{"CUSTOM_X", 2}}}}, "too many"},
		{Input{Actions: []any{map[string]any{"op": "add-trait", "args": "CUSTOM_X"}}}, "list or dictionary"},
		{Input{Actions: []any{map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_X"}, "multiple": "any"}}}, "multiple"},
		{Input{Actions: ok, Conditions: []any{map[string]any{"op": "in-net", "args": map[string]any{"address": "x", "subnet": "10.0.0.0/33"}}}}, "subnet"},
		{Input{Actions: ok, Conditions: []any{map[string]any{"op": "eq", "args": map[string]any{"values": []any{}}, "loop": "x"}}}, "loop"},
	} {
		_, err := parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%+v: %v, want a mention of %q", tc.in, err, tc.mention)
		}
	}
}
