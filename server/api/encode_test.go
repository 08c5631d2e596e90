package api

import (
	"encoding/json"
	"math"
	"regexp"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/nodes"
)

// TestFieldNamesNeedNoEscape holds jw.key to its premise: every key the
// field tables write is a plain name that JSON needs no escape for.
func TestFieldNamesNeedNoEscape(t *testing.T) {
	plain := regexp.MustCompile(`^[a-z_]+$`)
	var names []string
	for _, f := range nodeFields {
		names = append(names, f.name)
	}
	for _, f := range portTable.fields {
		names = append(names, f.name)
	}
	for _, f := range pgTable.fields {
		names = append(names, f.name)
	}
	for _, n := range names {
		if !plain.MatchString(n) {
			t.Errorf("field %q would need escaping as a JSON key", n)
		}
	}
}

// TestNodeLinksEscapeBase: the base URL comes from the request's Host
// header, so a hostile one must still give valid JSON with the hrefs
// intact.
func TestNodeLinksEscapeBase(t *testing.T) {
	base := `http://h"<x>\y`
	uuid := "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"
	w := &jw{}
	w.setBase(base)
	v := &nodes.View{Node: &ent.Node{UUID: uuid, Driver: "fake-hardware"}}
	writeNode(w, v, namedFields([]string{"uuid", "ports"}, VerMax), VerMax)
	var got struct {
		Ports []struct{ Href, Rel string }
		Links []struct{ Href, Rel string }
	}
	if err := json.Unmarshal(w.b, &got); err != nil {
		t.Fatalf("%v: %s", err, w.b)
	}
	want := []string{base + "/v1/nodes/" + uuid + "/ports", "self", base + "/nodes/" + uuid + "/ports", "bookmark",
		base + "/v1/nodes/" + uuid, "self", base + "/nodes/" + uuid, "bookmark"}
	var have []string
	for _, l := range append(got.Ports, got.Links...) {
		have = append(have, l.Href, l.Rel)
	}
	if len(have) != len(want) {
		t.Fatalf("links %q, want %q", have, want)
	}
	for i := range want {
		if have[i] != want[i] {
			t.Errorf("link part %d is %q, want %q", i, have[i], want[i])
		}
	}
}

// TestAppendValueMatchesEncodingJSON: the hand-written dict encoder
// writes exactly what encoding/json writes for every kind of decoded
// JSON, and declines what it does not know so encoding/json takes it.
func TestAppendValueMatchesEncodingJSON(t *testing.T) {
	values := []any{
		nil, true, false, "", "plain", `quote" back\ <tag> & amp`, "ctl\x00\x01\x1f\t\n\r", "line\u2028sep\u2029", "bad\xffutf8", "ünï😀",
		0.0, math.Copysign(0, -1), 1.0, -1.5, 0.1, 123456789.0, 1e20, 1e21, -1e21, 1e-6, 1e-7, 5e-324, math.MaxFloat64, 65536.0, 1.0 / 3,
		[]any{}, []any{1.0, "a", nil, []any{true}}, map[string]any{}, map[string]any{"z": 1.0, "a": map[string]any{"y": []any{"x"}, "b": nil}, "<k>": "v"},
	}
	// Values as a JSON decode gives them, from a document of each kind.
	var decoded map[string]any
	if err := json.Unmarshal([]byte(`{"cpus": 16, "memory_mb": 65536, "capabilities": "boot_mode:uefi,secure_boot:true",
		"nested": {"list": [1, 2.5, -3e-9, "s", {"deep": null}], "big": 12345678901234567890}}`), &decoded); err != nil {
		t.Fatal(err)
	}
	values = append(values, decoded)
	for _, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendValue(nil, v)
		if !ok || string(got) != string(want) {
			t.Errorf("%#v: got %s (ok %v), want %s", v, got, ok, want)
		}
	}
	for _, v := range []any{3, []string{"a"}, map[string]string{"a": "b"}, math.NaN(), math.Inf(1), map[string]any{"a": []any{int64(1)}}} {
		if _, ok := appendValue(nil, v); ok {
			t.Errorf("%#v: accepted; encoding/json should have it", v)
		}
	}
}
