package nodes

import (
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/patchdoc"
)

// FuzzPatch drives arbitrary patch documents through parsing, application
// and validation: none may panic, and whatever passes validation changes
// only fields a patch is allowed to touch, with values of the right type.
func FuzzPatch(f *testing.F) {
	seeds := []string{
		`[{"op":"replace","path":"/name","value":"n1"}]`,
		`[{"op":"add","path":"/extra/a","value":{"b":[1,2]}}]`,
		`[{"op":"remove","path":"/owner"}]`,
		`[{"op":"move","from":"/extra/a","path":"/properties/a"}]`,
		`[{"op":"copy","from":"/driver_info","path":"/extra/x"}]`,
		`[{"op":"test","path":"/driver","value":"ipmi"}]`,
		`[{"op":"replace","path":"/driver_info/ipmi_password","value":"******"}]`,
		`[{"op":"replace","path":"/uuid","value":"x"}]`,
		`[]`, `{}`, `[{"op":"add","path":"/extra/~1a~0b","value":null}]`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	name := "n0"
	base := &ent.Node{
		UUID: "0b9c6a5e-8b0a-4a4e-9b7a-2d3c4e5f6a7b", Name: &name, Driver: "ipmi",
		DriverInfo: map[string]any{"ipmi_address": "192.0.2.1", "ipmi_password": "pw"},
		Extra:      map[string]any{"a": 1.0}, Properties: map[string]any{},
	}
	s := &Service{}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if ops, err := DecodePatch(raw); err != nil || checkOps(ops) != nil {
			return
		}
		after, err := patchdoc.Apply(patchDoc(base), raw, "node")
		if err != nil {
			return
		}
		changed := diff(patchDoc(base), after)
		u, err := s.validatePatched(base, after, changed, PatchOptions{})
		if err != nil {
			return
		}
		for f, v := range u.fields {
			if _, ok := fieldRules[f]; !ok {
				t.Fatalf("validated update touches %s", f)
			}
			switch f {
			case "driver_info", "properties", "extra", "instance_info":
				if _, ok := v.(map[string]any); !ok {
					t.Fatalf("%s is %T", f, v)
				}
			case "driver":
				if s, ok := v.(string); !ok || s == "" {
					t.Fatalf("driver is %#v", v)
				}
			}
		}
		if di, ok := u.fields["driver_info"].(map[string]any); ok && di["ipmi_password"] == Masked {
			t.Fatal("a masked password would be stored")
		}
	})
}
