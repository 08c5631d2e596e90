package inspectionrules

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/inspectionrule"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Apply runs the main-phase rules on a node just inspected, highest
// priority first as Ironic's engine sorts them, against {node, inventory,
// plugin_data}. The node's changes are written together, holding its row,
// or not at all: a fail action, or an action that cannot be carried out,
// returns the error that fails the inspection.
func Apply(ctx context.Context, db *store.DB, log *slog.Logger, nodeID int, inventory any) error {
	rules, err := db.InspectionRule.Query().Where(inspectionrule.Phase("main")).
		Order(ent.Desc(inspectionrule.FieldPriority), ent.Asc(inspectionrule.FieldID)).All(ctx)
	if err != nil || len(rules) == 0 {
		return err
	}
	inv, err := plain(inventory)
	if err != nil {
		return err
	}
	return store.WithTx(ctx, db, func(tx *ent.Client) error {
		if err := tx.Node.Update().Where(node.ID(nodeID)).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return err
		}
		n, err := tx.Node.Query().Where(node.ID(nodeID)).WithTraits().Only(ctx)
		if err != nil {
			return err
		}
		st := newState(n, inv, log)
		for _, r := range rules {
			ok, err := st.matches(r)
			if err != nil {
				return fmt.Errorf("inspection rule %s: %w", r.UUID, err)
			}
			if !ok {
				continue
			}
			if log != nil {
				log.Info("applying inspection rule", "rule", r.UUID, "node", n.UUID)
			}
			for i, a := range r.Actions {
				if err := st.run(a); err != nil {
					return fmt.Errorf("inspection rule %s, action %d (%v): %w", r.UUID, i, a["op"], err)
				}
			}
		}
		return st.save(ctx, tx, n)
	})
}

// plain turns a value into the JSON shapes rules read.
func plain(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(raw, &out)
}

// state is the node as the rules change it, with the documents they read.
type state struct {
	node       map[string]any
	traits     []string
	inventory  map[string]any
	pluginData map[string]any
	log        *slog.Logger
}

func newState(n *ent.Node, inv map[string]any, log *slog.Logger) *state {
	clone := func(m map[string]any) map[string]any {
		out, _ := plain(m)
		return out
	}
	ts := make([]string, len(n.Edges.Traits))
	for i, t := range n.Edges.Traits {
		ts[i] = t.Trait
	}
	str := func(p *string) any {
		if p == nil {
			return nil
		}
		return *p
	}
	return &state{
		node: map[string]any{
			"uuid": n.UUID, "name": str(n.Name), "driver": n.Driver, "owner": n.Owner, "lessee": n.Lessee,
			"provision_state": n.ProvisionState, "properties": clone(n.Properties), "extra": clone(n.Extra),
			// Secrets are masked as every API answer masks them: a
			// condition, a template or a log line can then never read,
			// copy or probe a BMC password; save puts them back.
			"instance_info": clone(nodes.MaskInstanceInfo(n.InstanceInfo)), "driver_info": clone(nodes.MaskSecrets(n.DriverInfo)),
			"resource_class": str(n.ResourceClass), "description": str(n.Description),
		},
		traits: ts, inventory: inv, pluginData: map[string]any{}, log: log,
	}
}

func (s *state) save(ctx context.Context, tx *ent.Client, n *ent.Node) error {
	m := func(k string) map[string]any { v, _ := s.node[k].(map[string]any); return v }
	if err := nodes.Unmask("driver_info", n.DriverInfo, m("driver_info")); err != nil {
		return err
	}
	if err := nodes.Unmask("instance_info", n.InstanceInfo, m("instance_info")); err != nil {
		return err
	}
	u := tx.Node.UpdateOneID(n.ID).SetProperties(m("properties")).SetExtra(m("extra")).
		SetInstanceInfo(m("instance_info")).SetDriverInfo(m("driver_info"))
	for _, f := range []struct {
		key   string
		set   func(string) *ent.NodeUpdateOne
		clear func() *ent.NodeUpdateOne
		max   int
	}{
		{"resource_class", u.SetResourceClass, u.ClearResourceClass, 80},
		{"description", u.SetDescription, u.ClearDescription, 4096},
	} {
		switch v := s.node[f.key].(type) {
		case nil:
			f.clear()
		case string:
			if len(v) > f.max {
				return fmt.Errorf("%s is longer than %d characters", f.key, f.max)
			}
			f.set(v)
		default:
			return fmt.Errorf("%s must be a string, not %v", f.key, v)
		}
	}
	if err := u.Exec(ctx); err != nil {
		return err
	}
	if err := nodes.ValidateTraits(s.traits); err != nil {
		return err
	}
	if _, err := tx.Trait.Delete().Where(trait.NodeID(n.ID)).Exec(ctx); err != nil {
		return err
	}
	bulk := make([]*ent.TraitCreate, len(s.traits))
	for i, t := range s.traits {
		bulk[i] = tx.Trait.Create().SetNodeID(n.ID).SetTrait(t)
	}
	return tx.Trait.CreateBulk(bulk...).Exec(ctx)
}

// matches is true when every condition holds; a rule without conditions
// always applies.
func (s *state) matches(r *Rule) (bool, error) {
	for _, c := range r.Conditions {
		ok, err := s.check(c)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// check evaluates one condition, over its loop when it has one: any (the
// default), all, first or last of the items decides.
func (s *state) check(c map[string]any) (bool, error) {
	op, _ := c["op"].(string)
	op = strings.TrimSpace(op)
	name := strings.TrimPrefix(op, "!")
	inverted := name != op
	one := func(item any, looped bool) (bool, error) {
		args := s.args(c, name, item, looped)
		if looped {
			args["force_strings"] = true
		}
		ok, err := evaluate(name, args)
		return ok != inverted, err
	}
	loop, looped := c["loop"]
	if !looped {
		return one(nil, false)
	}
	multiple, _ := c["multiple"].(string)
	items, ok := loop.([]any)
	if !ok {
		return one(loop, true)
	}
	var results []bool
	for _, it := range items {
		r, err := one(it, true)
		if err != nil {
			return false, err
		}
		if multiple == "first" && r {
			return true, nil
		}
		results = append(results, r)
	}
	switch multiple {
	case "all":
		return !slices.Contains(results, false), nil
	case "last":
		return len(results) > 0 && results[len(results)-1], nil
	case "first":
		return false, nil
	}
	return slices.Contains(results, true), nil
}

// formatted are the arguments Ironic interpolates outside a loop; inside
// one, every argument is.
var formatted = map[string][]string{
	"eq": {"values"}, "lt": {"values"}, "gt": {"values"}, "is-empty": {"value"}, "in-net": {"address", "subnet"},
	"matches": {"value"}, "contains": {"value"}, "one-of": {"value"}, "is-none": {"value"}, "is-true": {"value"},
	"is-false": {"value"}, "log": {"msg"}, "set-attribute": {"value"}, "extend-attribute": {"value"},
	"set-capability": {"value"}, "set-plugin-data": {"value"}, "extend-plugin-data": {"value"},
}

func (s *state) args(op map[string]any, name string, item any, looped bool) map[string]any {
	in := namedArgs(name, op["args"])
	ctx := map[string]any{"node": s.node, "inventory": s.inventory, "plugin_data": s.pluginData}
	if looped {
		ctx["item"] = item
	}
	out := make(map[string]any, len(in))
	for k, v := range in {
		if looped || slices.Contains(formatted[name], k) {
			// In a loop Ironic formats a string twice, so an item may
			// itself hold variables: {item[v]} with v "{inventory[x]}".
			if str, ok := v.(string); ok && looped {
				if once, ok := format(str, ctx); ok {
					v = once
				}
			}
			v = interpolate(v, ctx, name == "is-empty")
		}
		out[k] = v
	}
	return out
}

// interpolate fills Python format fields such as {inventory[cpu][count]}
// or {node.uuid} in strings, in lists and in objects' keys and values,
// as Ironic's str.format does: the result is a string. A field that names
// nothing leaves the string as it was, except for is-empty, where it
// reads as None.
func interpolate(v any, ctx map[string]any, emptyOp bool) any {
	switch x := v.(type) {
	case string:
		out, ok := format(x, ctx)
		if !ok {
			if emptyOp {
				return nil
			}
			return x
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = interpolate(e, ctx, emptyOp)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if nk, ok := format(k, ctx); ok {
				k = nk
			}
			out[k] = interpolate(e, ctx, emptyOp)
		}
		return out
	}
	return v
}

var field = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_]+|\[[^\]]*\])*)$`)
var part = regexp.MustCompile(`\.([A-Za-z0-9_]+)|\[([^\]]*)\]`)

func format(s string, ctx map[string]any) (string, bool) {
	if !strings.ContainsAny(s, "{}") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '{' && i+1 < len(s) && s[i+1] == '{', ch == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte(ch)
			i++
		case ch == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return s, false
			}
			v, ok := lookup(s[i+1:i+end], ctx)
			if !ok {
				return s, false
			}
			b.WriteString(pyStr(v))
			i += end
		case ch == '}':
			return s, false
		default:
			b.WriteByte(ch)
		}
	}
	return b.String(), true
}

func lookup(ref string, ctx map[string]any) (any, bool) {
	m := field.FindStringSubmatch(ref)
	if m == nil {
		return nil, false
	}
	cur, ok := ctx[m[1]]
	if !ok {
		return nil, false
	}
	for _, p := range part.FindAllStringSubmatch(m[2], -1) {
		key := p[1] + p[2]
		switch c := cur.(type) {
		case map[string]any:
			if cur, ok = c[key]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// pyStr is str() of a JSON value as Python prints it; objects and lists
// are written as JSON.
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

// evaluate is one operator on its arguments.
func evaluate(op string, a map[string]any) (bool, error) {
	switch op {
	case "eq", "lt", "gt":
		values, ok := a["values"].([]any)
		if !ok {
			return false, fmt.Errorf("failed to check condition %s: expected a list for values, got %v", op, a["values"])
		}
		force, _ := a["force_strings"].(bool)
		for i := 0; i+1 < len(values); i++ {
			c, err := compare(values[i], values[i+1], force)
			if err != nil {
				return false, err
			}
			if (op == "eq" && c != 0) || (op == "lt" && c >= 0) || (op == "gt" && c <= 0) {
				return false, nil
			}
		}
		return true, nil
	case "is-empty":
		return slices.Contains([]string{"", "None", "[]", "{}"}, pyStr(a["value"])), nil
	case "in-net":
		pfx, err := netip.ParsePrefix(pyStr(a["subnet"]))
		if err != nil {
			return false, fmt.Errorf("invalid value: %v", err)
		}
		addr, err := netip.ParseAddr(pyStr(a["address"]))
		if err != nil {
			return false, fmt.Errorf("invalid value: %v", err)
		}
		return pfx.Contains(addr), nil
	case "matches", "contains":
		re := pyStr(a["regex"])
		if op == "matches" {
			re = `^(?:` + re + `)$`
		}
		r, err := regexp.Compile(re)
		if err != nil {
			return false, fmt.Errorf("invalid regular expression: %v", err)
		}
		return r.MatchString(pyStr(a["value"])), nil
	case "one-of":
		values, _ := a["values"].([]any)
		return slices.ContainsFunc(values, func(v any) bool { c, err := compare(a["value"], v, false); return err == nil && c == 0 }), nil
	case "is-none":
		return a["value"] == nil, nil
	case "is-true", "is-false":
		want := op == "is-true"
		switch v := a["value"].(type) {
		case bool:
			return v == want, nil
		case float64:
			return (v != 0) == want, nil
		case string:
			if want {
				return slices.Contains([]string{"yes", "true"}, strings.ToLower(v)), nil
			}
			return slices.Contains([]string{"no", "false"}, strings.ToLower(v)), nil
		case nil:
			return !want, nil
		}
		return false, nil
	}
	return false, fmt.Errorf("unsupported operator %s", op)
}

// compare orders two values. Interpolation yields strings, so a number
// and a string of digits compare as numbers: a rule written for Ironic
// as ["{inventory[cpu][count]}", "8"] and one written as [..., 8] both
// work. Other strings compare as strings; force_strings compares all as
// strings, as Ironic does inside a loop.
func compare(x, y any, force bool) (int, error) {
	if !force {
		fx, okx := number(x)
		fy, oky := number(y)
		if okx && oky {
			switch {
			case fx < fy:
				return -1, nil
			case fx > fy:
				return 1, nil
			}
			return 0, nil
		}
	}
	if !force {
		if _, ok := x.(string); !ok {
			if _, ok := y.(string); !ok {
				if pyStr(x) == pyStr(y) {
					return 0, nil
				}
				return 0, fmt.Errorf("cannot order %v and %v", x, y)
			}
		}
	}
	return strings.Compare(pyStr(x), pyStr(y)), nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

// run carries out one action, over its loop when it has one.
func (s *state) run(a map[string]any) error {
	name, _ := a["op"].(string)
	name = strings.TrimSpace(name)
	loop, looped := a["loop"]
	if !looped {
		return s.act(name, s.args(a, name, nil, false))
	}
	items, ok := loop.([]any)
	if !ok {
		items = []any{loop}
	}
	for _, it := range items {
		if err := s.act(name, s.args(a, name, it, true)); err != nil {
			return err
		}
	}
	return nil
}

// splitPath reads a path as Ironic's normalize_path: slashes when there
// are any, else dots.
func splitPath(p string) []string {
	if strings.Contains(p, "/") {
		return strings.Split(strings.Trim(p, "/"), "/")
	}
	return strings.Split(p, ".")
}

func (s *state) act(name string, a map[string]any) error {
	str := func(k string) string { return pyStr(a[k]) }
	unique, _ := a["unique"].(bool)
	switch name {
	case "fail":
		return fmt.Errorf("%s", str("msg"))
	case "log":
		level := strings.ToLower(str("level"))
		lv := map[string]slog.Level{"debug": slog.LevelDebug, "warning": slog.LevelWarn, "error": slog.LevelError, "critical": slog.LevelError}[level]
		if s.log != nil {
			s.log.Log(context.Background(), lv, str("msg"), "node", s.node["uuid"])
		}
		return nil
	case "set-attribute", "extend-attribute", "del-attribute":
		parts := splitPath(str("path"))
		if !slices.Contains(nodeAttrs, parts[0]) {
			return fmt.Errorf("path %s: rules may write only %s", str("path"), strings.Join(nodeAttrs, ", "))
		}
		return edit(s.node, parts, name, a["value"], unique)
	case "set-plugin-data", "extend-plugin-data", "unset-plugin-data":
		op := map[string]string{"set-plugin-data": "set-attribute", "extend-plugin-data": "extend-attribute", "unset-plugin-data": "del-attribute"}[name]
		err := edit(s.pluginData, strings.Split(str("path"), "."), op, a["value"], unique)
		if name == "unset-plugin-data" {
			return nil // a missing path is only a warning in Ironic
		}
		return err
	case "set-capability", "unset-capability":
		props, _ := s.node["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			s.node["properties"] = props
		}
		props["capabilities"] = capability(props["capabilities"], str("name"), str("value"), name == "set-capability")
		return nil
	case "add-trait":
		t := str("name")
		if err := nodes.ValidateTrait(t); err != nil {
			return err
		}
		if !slices.Contains(s.traits, t) {
			s.traits = append(s.traits, t)
		}
		return nil
	case "remove-trait":
		s.traits = slices.DeleteFunc(s.traits, func(t string) bool { return t == str("name") })
		return nil
	}
	return fmt.Errorf("unsupported action %s", name)
}

// edit sets, extends or deletes the value at parts in doc, creating the
// objects on the way when it sets.
func edit(doc map[string]any, parts []string, op string, value any, unique bool) error {
	cur := doc
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			if op == "del-attribute" {
				return fmt.Errorf("no attribute at %s", strings.Join(parts, "/"))
			}
			if cur[p] != nil {
				return fmt.Errorf("%s is not an object", p)
			}
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	last := parts[len(parts)-1]
	switch op {
	case "set-attribute":
		cur[last] = value
	case "del-attribute":
		if _, ok := cur[last]; !ok {
			return fmt.Errorf("no attribute at %s", strings.Join(parts, "/"))
		}
		if len(parts) == 1 {
			cur[last] = nil
		} else {
			delete(cur, last)
		}
	case "extend-attribute":
		list, ok := cur[last].([]any)
		if !ok && cur[last] != nil {
			return fmt.Errorf("cannot extend non-list attribute %s with value %v", strings.Join(parts, "/"), value)
		}
		if !unique || !slices.ContainsFunc(list, func(v any) bool { return pyStr(v) == pyStr(value) }) {
			list = append(list, value)
		}
		cur[last] = list
	}
	return nil
}

// capability sets or removes one key of capabilities, kept as "k:v,k:v"
// as Ironic keeps them (a map a client stored stays a map).
func capability(caps any, key, value string, set bool) any {
	if m, ok := caps.(map[string]any); ok {
		m = maps.Clone(m)
		delete(m, key)
		if set {
			m[key] = value
		}
		return m
	}
	s, _ := caps.(string)
	var kept []string
	for _, kv := range strings.Split(s, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), ":"); k != "" && k != key {
			kept = append(kept, strings.TrimSpace(kv))
		}
	}
	if set {
		kept = append(kept, key+":"+value)
	}
	return strings.Join(kept, ",")
}
