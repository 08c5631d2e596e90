package runbooks

import (
	"reflect"
	"testing"

	"github.com/anvilproject/anvil/server/errs"
)

// Problems names every field at fault at once, but not the steps'
// arguments, which a run checks (ArgProblems names those, in the same
// terms); validate (the API) keeps answering with the first of them.
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
	want := []string{"name", "owner"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
	fields = nil
	for _, p := range ArgProblems(in) {
		fields = append(fields, p.Field)
	}
	if want := []string{"steps[0].args.seconds", "steps[1].args.device"}; !reflect.DeepEqual(fields, want) {
		t.Errorf("argument fields %v, want %v", fields, want)
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
