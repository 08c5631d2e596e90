package validtext_test

import (
	"testing"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/validtext"
)

// TestJSONNamesTheField: a NUL or invalid UTF-8 in any string of a JSON
// body, key or value, at any depth, is a 400 naming where it stood;
// clean bodies and bodies that are not JSON pass.
func TestJSONNamesTheField(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`{"extra":{"foo":"a\u0000b"}}`, "extra.foo"},
		{`{"description":"x\u0000"}`, "description"},
		{"{\"extra\":{\"foo\":\"\xff\xfe\"}}", "extra.foo"},
		{`{"extra":{"a\u0000":"ok"}}`, `extra.a\x00`},
		{`{"steps":[{"args":{"x":[1,"ok","\u0000"]}}]}`, "steps[0].args.x[2]"},
		{`{"a":{"b":1},"c":[{},{"d":"\u0000"}]}`, "c[1].d"},
		{`[{"op":"add","path":"/extra/foo","value":"\u0000"}]`, "extra.foo"},
		{`[{"op":"replace","path":"/driver_info","value":{"ok":"1","k":"\u0000"}}]`, "driver_info.k"},
		{`[{"op":"add","path":"/extra/a~1b","value":"ok"},{"op":"add","path":"/properties/0","value":["\u0000"]}]`, "properties[0][0]"},
		{`[{"op":"add","path":"/extra/\u0000","value":"x"}]`, "body[0].path"},
		{`"\u0000"`, "body"},
	} {
		err := validtext.JSON([]byte(tc.body))
		if errs.Status(err) != 400 || errs.FieldOf(err) != tc.field {
			t.Errorf("%s: %v (field %q), want a 400 naming %s", tc.body, err, errs.FieldOf(err), tc.field)
		}
	}
	for _, ok := range []string{`{"extra":{"foo":"caf\u00e9 ☕","n":[1,2,{"x":null}]}}`, `not json`, `{"a":"\u0000`, `[]`, ``, `{"a":"\\u0000"}`} {
		if err := validtext.JSON([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
