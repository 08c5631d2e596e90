package conductor_test

import (
	"reflect"
	"testing"

	"github.com/anvilproject/anvil/server/conductor"
)

// A form offers an argument's choices as a <select>: every choice must
// pass the step's own check, and a value outside them must not.
func TestCatalogueChoicesAreWhatTheCheckAccepts(t *testing.T) {
	n := 0
	for _, s := range conductor.Catalogue() {
		for _, a := range s.Args {
			if len(a.Choices) == 0 {
				continue
			}
			n++
			for _, c := range append(a.Choices, "no-such-choice") {
				err := conductor.ValidateSteps("steps", []conductor.Step{{Interface: s.Interface, Step: s.Step, Args: required(s, a.Name, c)}})
				if (err == nil) != (c != "no-such-choice") {
					t.Errorf("%s %s=%q: %v", s.Name(), a.Name, c, err)
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("only %d arguments offer choices (boot device, virtual media drive, boot mode)", n)
	}
}

// required fills every other required argument with a valid value, so
// only name's value decides.
func required(s conductor.StepInfo, name string, v any) map[string]any {
	args := map[string]any{name: v}
	for _, a := range s.Args {
		switch {
		case !a.Required || a.Name == name:
		case len(a.Choices) > 0:
			args[a.Name] = a.Choices[0]
		default: // attach_virtual_media's image_url
			args[a.Name] = "https://images.example/boot.iso"
		}
	}
	return args
}

func TestStepProblemsListsEveryStepsEveryProblem(t *testing.T) {
	steps := []conductor.Step{
		{Interface: "deploy", Step: "wait", Args: map[string]any{"seconds": "ten", "minutes": 1.0}},
		{Interface: "power", Step: "power_on"},
		{Interface: "warp", Step: "9lives"},
		{Interface: "management", Step: "set_boot_device"},
	}
	got := conductor.StepProblems(steps)
	want := []conductor.StepProblem{
		{Index: 0, Part: "args.minutes", Msg: `step deploy.wait takes no argument "minutes"`},
		{Index: 0, Part: "args.seconds", Msg: "argument seconds must be a whole number of seconds from 0 to 86400"},
		{Index: 2, Part: "interface", Msg: `interface "warp" is not one of bios, deploy, firmware, management, power, raid, vendor`},
		{Index: 2, Part: "step", Msg: `step "9lives" is not a step name (letters, digits and _, not starting with a digit)`},
		{Index: 3, Part: "args.device", Msg: `step management.set_boot_device needs argument "device"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %+v\nwant %+v", got, want)
	}
	// The API still answers with the first, named as before.
	if err := conductor.ValidateSteps("steps", steps); err == nil || err.Error() != `steps[0]: step deploy.wait takes no argument "minutes"` {
		t.Errorf("ValidateSteps: %v", err)
	}
}

// A runbook or deploy template is stored when its steps have Ironic's
// shape; their arguments are a run's to check (ArgProblems), and the two
// together are what explicit steps are checked for.
func TestShapeAndArgumentProblemsSplit(t *testing.T) {
	steps := []conductor.Step{
		{Interface: "raid", Step: "create_configuration", Args: map[string]any{"logical_disks": []any{}}},
		{Interface: "warp", Step: "drive"},
		{Interface: "deploy", Step: "erase_devices", Args: map[string]any{"anything": 1.0}},
	}
	if err := conductor.ValidateStepShape("steps", steps[:1]); err != nil {
		t.Errorf("shape of a step with arguments it does not take: %v", err)
	}
	shape := conductor.ShapeProblems(steps)
	if len(shape) != 1 || shape[0].Index != 1 || shape[0].Part != "interface" {
		t.Errorf("shape problems %+v", shape)
	}
	args := conductor.ArgProblems(steps)
	if len(args) != 1 || args[0].Index != 0 || args[0].Part != "args.logical_disks" || args[0].Msg != `step raid.create_configuration takes no argument "logical_disks"` {
		t.Errorf("argument problems %+v", args)
	}
	if err := conductor.ValidateSteps("steps", steps[:1]); err == nil {
		t.Error("explicit steps with an argument the step does not take were accepted")
	}
}

// firmware.update's settings take Ironic's components, bios, bmc and
// nic:<adapter>, and Ironic's wait of at least one second.
func TestFirmwareSettingsArgs(t *testing.T) {
	for _, c := range []struct {
		setting map[string]any
		want    string
	}{
		{map[string]any{"component": "nic:NIC.Slot.1", "url": "http://i.example/nic.bin", "wait": 30.0}, ""},
		{map[string]any{"component": "bmc", "url": "http://i.example/bmc.bin"}, ""},
		{map[string]any{"component": "nic:", "url": "http://i.example/nic.bin"}, "argument settings [0].component must be one of bios, bmc or nic:<adapter>"},
		{map[string]any{"component": "raid", "url": "http://i.example/r.bin"}, "argument settings [0].component must be one of bios, bmc or nic:<adapter>"},
		{map[string]any{"component": "bios", "url": "http://i.example/b.bin", "wait": 0.0}, "argument settings [0].wait must be a whole number of seconds from 1 to 86400"},
	} {
		var got string
		step := conductor.Step{Interface: "firmware", Step: "update", Args: map[string]any{"settings": []any{c.setting}}}
		if p := conductor.ArgProblems([]conductor.Step{step}); len(p) > 0 {
			got = p[0].Msg
		}
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.setting, got, c.want)
		}
	}
}
