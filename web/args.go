package web

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// stepView shows a step as people read it: its name, then each argument
// by name, a list one item a line, a flat object as "key: value" pairs,
// and anything deeper as indented JSON. Go's %v of a map
// ("map[component:bios]") is never shown.
func stepView(iface, step string, args map[string]any) views.StepText {
	out := views.StepText{Name: iface + "." + step}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out.Args = append(out.Args, argText(k, args[k]))
	}
	return out
}

func runbookSteps(steps []runbooks.Step) []views.StepText {
	out := make([]views.StepText, len(steps))
	for i, s := range steps {
		out[i] = stepView(s.Interface, s.Step, s.Args)
	}
	return out
}

func argText(name string, v any) views.ArgText {
	a := views.ArgText{Name: name}
	if s, ok := inline(v); ok {
		a.Value = s
		return a
	}
	if list, ok := v.([]any); ok {
		items := make([]string, 0, len(list))
		for _, e := range list {
			s, ok := inline(e)
			if !ok {
				items = nil
				break
			}
			items = append(items, s)
		}
		if items != nil || len(list) == 0 {
			a.Items = items
			if len(list) == 0 {
				a.Value = "none"
			}
			return a
		}
	}
	raw, _ := json.MarshalIndent(v, "", "  ")
	a.Block = string(raw)
	return a
}

// inline is v on one line: a scalar as JSON writes it (strings bare), or
// an object of scalars as "key: value, key: value" in key order; false
// for a list or anything deeper.
func inline(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []any:
		return "", false
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			s, ok := inline(v[k])
			if _, nested := v[k].(map[string]any); !ok || nested {
				return "", false
			}
			parts = append(parts, k+": "+s)
		}
		return strings.Join(parts, ", "), true
	}
	raw, _ := json.Marshal(v)
	return string(raw), true
}
