package runbooks

import (
	"reflect"
	"testing"

	"github.com/anvilproject/anvil/server/errs"
)

// Problems names every field at fault at once; validate (the API) keeps
// answering with the first of them.
func TestProblemsListsEveryField(t *testing.T) {
	owner := "blue"
	in := Input{Name: "not a trait", Public: true, Owner: &owner, Steps: []Step{
		{Interface: "power", Step: "power_on", Order: 3},
		{Interface: "deploy", Step: "wait", Args: map[string]any{"seconds": "ten"}, Order: 1},
		{Interface: "management", Step: "set_boot_device", Args: map[string]any{"device": "floppy-disk"}, Order: 2},
	}}
	var fields []string
	for _, p := range Problems(in) {
		fields = append(fields, p.Field)
	}
	want := []string{"name", "owner", "steps[0].args.seconds", "steps[1].args.device"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
	if in.Steps[0].Order != 3 {
		t.Error("Problems reordered the caller's steps")
	}
	err := validate(&in)
	if errs.FieldOf(err) != "name" {
		t.Errorf("validate answered %v, not the name first", err)
	}
	if p := Problems(Input{Name: "CUSTOM_OK"}); len(p) != 1 || p[0].Field != "steps" {
		t.Errorf("no steps: %v", p)
	}
}
