package conductor

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
)

// Step is one clean or service step, as Ironic spells it.
type Step struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args,omitempty"`
}

// Name is interface.step.
func (s Step) Name() string { return s.Interface + "." + s.Step }

func (s Step) asMap() map[string]any {
	m := map[string]any{"interface": s.Interface, "step": s.Step, "args": s.Args}
	if s.Args == nil {
		m["args"] = map[string]any{}
	}
	return m
}

// MaxSteps bounds one request.
const MaxSteps = 50

// StepInterfaces are the interfaces Ironic accepts in clean, service
// and runbook steps (its CLEANING_INTERFACE_PRIORITY).
var StepInterfaces = []string{"bios", "deploy", "firmware", "management", "power", "raid", "vendor"}

// stepNameRE is a driver method's name, which is what a step names.
var stepNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)

// ValidateSteps checks steps when the request arrives: one of Ironic's
// step interfaces, a well-formed step name, and for a step Anvil runs,
// known and well-formed arguments. Whether the node's driver runs each
// step is decided when the run starts. field names the request field
// for the error (clean_steps, service_steps or steps); the error is the
// first of StepProblems.
func ValidateSteps(field string, steps []Step) error {
	if len(steps) == 0 {
		return errs.BadRequest(field, "%s must list at least one step", field)
	}
	if len(steps) > MaxSteps {
		return errs.BadRequest(field, "%s lists %d steps; at most %d", field, len(steps), MaxSteps)
	}
	if p := StepProblems(steps); len(p) > 0 {
		return p[0].Err(field)
	}
	return nil
}

// StepProblem is one thing wrong with one step of a list: the step's
// index, the part to blame (interface, step, or args.<name>), and what is
// wrong, in words that read after the step's position ("steps[1]: ",
// "Step 2: ").
type StepProblem struct {
	Index int
	Part  string
	Msg   string
}

// Err is the problem as the API answers it, the step named by its index
// in the request field.
func (p StepProblem) Err(field string) error {
	where := fmt.Sprintf("%s[%d]", field, p.Index)
	return errs.BadRequest(where+"."+p.Part, "%s: %s", where, p.Msg)
}

// StepProblems lists everything ValidateSteps checks of each step, not
// only the first failure, so a form can show every problem at once.
// Arguments are checked in name order, so the list is the same each time.
func StepProblems(steps []Step) []StepProblem {
	var out []StepProblem
	for i, s := range steps {
		bad := func(part, format string, a ...any) {
			out = append(out, StepProblem{Index: i, Part: part, Msg: fmt.Sprintf(format, a...)})
		}
		okIface := slices.Contains(StepInterfaces, s.Interface)
		if !okIface {
			bad("interface", "interface %q is not one of %s", s.Interface, strings.Join(StepInterfaces, ", "))
		}
		if !stepNameRE.MatchString(s.Step) {
			bad("step", "step %q is not a step name (letters, digits and _, not starting with a digit)", s.Step)
			continue
		}
		info := lookupStep(s.Interface, s.Step)
		// The agent's steps take what the agent's hardware managers
		// define (argsinfo); the agent checks them when the step runs.
		if !okIface || info == nil || info.InBand {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(s.Args)) {
			j := slices.IndexFunc(info.Args, func(a Arg) bool { return a.Name == k })
			if j < 0 {
				bad("args."+k, "step %s takes no argument %q", s.Name(), k)
			} else if err := info.Args[j].check(s.Args[k]); err != nil {
				bad("args."+k, "argument %s %v", k, err)
			}
		}
		for _, a := range info.Args {
			if _, ok := s.Args[a.Name]; a.Required && !ok {
				bad("args."+a.Name, "step %s needs argument %q", s.Name(), a.Name)
			}
		}
	}
	return out
}

// stepsFitDriver checks what depends on the node's driver, once the node
// is known: a boot device the driver cannot set is a 400 before any step
// runs.
func stepsFitDriver(field string, steps []Step, driver string) error {
	for i, s := range steps {
		if s.Name() != "management.set_boot_device" {
			continue
		}
		dev, _ := s.Args["device"].(string)
		if valid := bmc.BootDevices(driver); !slices.Contains(valid, dev) {
			return errs.BadRequest(fmt.Sprintf("%s[%d].args.device", field, i), "%s[%d]: device %q is not one of %s (driver %s)", field, i, dev, strings.Join(valid, ", "), driver)
		}
	}
	return nil
}

func stepsFromAny(v any) []Step {
	list, _ := v.([]any)
	var out []Step
	for _, x := range list {
		m, _ := x.(map[string]any)
		s := Step{}
		s.Interface, _ = m["interface"].(string)
		s.Step, _ = m["step"].(string)
		s.Args, _ = m["args"].(map[string]any)
		out = append(out, s)
	}
	return out
}

func stepsToAny(steps []Step) []any {
	out := make([]any, len(steps))
	for i, s := range steps {
		out[i] = s.asMap()
	}
	return out
}

// LastRun reads InternalLastRun from a node's driver_internal_info: the
// target ("clean" or "service"), runbook name ("" for explicit steps) and
// steps of the last run it started; ok is false when none is recorded.
func LastRun(info map[string]any) (target, runbook string, steps []Step, ok bool) {
	m, _ := info[InternalLastRun].(map[string]any)
	target, _ = m["target"].(string)
	runbook, _ = m["runbook"].(string)
	steps = stepsFromAny(m["steps"])
	return target, runbook, steps, (target == "clean" || target == "service") && len(steps) > 0
}
