package api

import (
	"encoding/json"
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
