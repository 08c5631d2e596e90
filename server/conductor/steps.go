package conductor

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/ent"
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

// ValidateSteps checks explicit steps when the request arrives: their
// shape (ValidateStepShape) and, for a step Anvil runs, known and
// well-formed arguments. Whether the node's driver runs each step is
// decided when the run starts. field names the request field for the
// error (clean_steps, service_steps or deploy_steps); the error is the
// first of StepProblems.
func ValidateSteps(field string, steps []Step) error {
	return validate(field, steps, StepProblems)
}

// ValidateStepShape checks what Ironic's step schema checks when a
// runbook or deploy template is stored: how many steps, one of Ironic's
// step interfaces, a well-formed step name. Arguments are the step's to
// judge when it runs (ArgProblems), as Ironic's conductor judges them, so
// a runbook written for another driver or a later release is stored as
// it is.
func ValidateStepShape(field string, steps []Step) error {
	return validate(field, steps, ShapeProblems)
}

func validate(field string, steps []Step, problems func([]Step) []StepProblem) error {
	if len(steps) == 0 {
		return errs.BadRequest(field, "%s must list at least one step", field)
	}
	if len(steps) > MaxSteps {
		return errs.BadRequest(field, "%s lists %d steps; at most %d", field, len(steps), MaxSteps)
	}
	if p := problems(steps); len(p) > 0 {
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
// only the first failure, so a form can show every problem at once:
// ShapeProblems and ArgProblems, step by step.
func StepProblems(steps []Step) []StepProblem { return stepProblems(steps, true, true) }

// ShapeProblems lists what ValidateStepShape checks of each step.
func ShapeProblems(steps []Step) []StepProblem { return stepProblems(steps, true, false) }

// ArgProblems lists what is wrong with the arguments of the steps Anvil
// runs itself (unknown, missing, ill-typed), as a run checks them before
// its first step. The agent's steps take what its hardware managers
// define, and the agent checks them; a step Anvil does not know has no
// arguments to check here.
func ArgProblems(steps []Step) []StepProblem { return stepProblems(steps, false, true) }

// stepProblems checks the shape, the arguments or both of each step;
// arguments are checked in name order, so the list is the same each time.
func stepProblems(steps []Step, shape, args bool) []StepProblem {
	var out []StepProblem
	for i, s := range steps {
		bad := func(part, format string, a ...any) {
			out = append(out, StepProblem{Index: i, Part: part, Msg: fmt.Sprintf(format, a...)})
		}
		okIface := slices.Contains(StepInterfaces, s.Interface)
		okName := stepNameRE.MatchString(s.Step)
		if shape && !okIface {
			bad("interface", "interface %q is not one of %s", s.Interface, strings.Join(StepInterfaces, ", "))
		}
		if shape && !okName {
			bad("step", "step %q is not a step name (letters, digits and _, not starting with a digit)", s.Step)
		}
		if !args || !okIface || !okName {
			continue
		}
		info := lookupStep(s.Interface, s.Step)
		if info == nil || info.InBand {
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

// cannotRun says why a run of steps on node n cannot start, or "": a step
// the driver does not run, or a step's arguments, the first problem of
// ArgProblems. Ironic's conductor checks a runbook's steps against the
// driver's when the run starts, so a stored runbook with arguments a step
// does not take fails the run, in clean failed or service failed, before
// anything is done to the machine.
func cannotRun(n *ent.Node, kind string, steps []Step) string {
	if why := unsupported(n, steps); why != "" {
		return why
	}
	if p := ArgProblems(steps); len(p) > 0 {
		return fmt.Sprintf("Cannot %s node %s: step %d (%s): %s.", kind, n.UUID, p[0].Index+1, steps[p[0].Index].Name(), p[0].Msg)
	}
	return ""
}

// stepsFitDriver checks what depends on node n's driver, once the node
// is known: a boot device the driver cannot set is a 400 before any step
// runs.
func stepsFitDriver(field string, steps []Step, n *ent.Node) error {
	for i, s := range steps {
		if s.Name() != "management.set_boot_device" {
			continue
		}
		dev, _ := s.Args["device"].(string)
		if !slices.Contains(bmc.AllBootDevices(), dev) {
			continue // an argument problem, which the run reports (cannotRun)
		}
		if err := bootDeviceFits(fmt.Sprintf("%s[%d].args.device", field, i), dev, n); err != nil {
			return err
		}
	}
	return nil
}

// bootDeviceFits refuses, naming field, a boot device node n's driver
// (for bmclib, its provider) cannot set.
func bootDeviceFits(field, device string, n *ent.Node) error {
	valid := bmc.BootDevices(n.Driver, n.DriverInfo)
	switch {
	case slices.Contains(valid, device):
		return nil
	case len(valid) == 0:
		return errs.BadRequest(field, "%s: %s cannot set a boot device", field, bmc.DriverName(n.Driver, n.DriverInfo))
	}
	return errs.BadRequest(field, "%s: boot device %q is not one of %s (%s)", field, device, strings.Join(valid, ", "), bmc.DriverName(n.Driver, n.DriverInfo))
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
