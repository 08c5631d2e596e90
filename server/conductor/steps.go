package conductor

import (
	"fmt"
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

// argSpec describes one step argument.
type argSpec struct {
	name     string
	required bool
	check    func(any) error
}

// StepInfo is a step of the catalogue.
type StepInfo struct {
	Interface, Step, Description string
	args                         []argSpec
}

func isDevice(v any) error {
	s, _ := v.(string)
	if !slices.Contains(bmc.AllBootDevices(), s) {
		return fmt.Errorf("must be one of %s", strings.Join(bmc.AllBootDevices(), ", "))
	}
	return nil
}

func isBool(v any) error {
	if _, ok := v.(bool); !ok {
		return fmt.Errorf("must be true or false")
	}
	return nil
}

func isSeconds(v any) error {
	f, ok := v.(float64)
	if !ok || f < 0 || f > 86400 || f != float64(int(f)) {
		return fmt.Errorf("must be a whole number of seconds from 0 to 86400")
	}
	return nil
}

// catalogue is every step Anvil runs: Ironic's reserved steps and the
// management steps a BMC can do. None needs a ramdisk agent, which Anvil
// does not run, so disable_ramdisk changes nothing about what may run.
var catalogue = []StepInfo{
	{"power", "power_on", "Power the node on.", nil},
	{"power", "power_off", "Power the node off.", nil},
	{"power", "reboot", "Restart the node (power it on when off) and wait until the BMC reports it on.", nil},
	{"management", "set_boot_device", "Set the next boot device.", []argSpec{{"device", true, isDevice}, {"persistent", false, isBool}}},
	{"management", "reset_bmc", "Restart the BMC (Redfish GracefulRestart, IPMI warm reset).", nil},
	{"deploy", "wait", "Wait the given seconds in the wait state (abort ends it early).", []argSpec{{"seconds", false, isSeconds}}},
	{"deploy", "hold", "Stop in the hold state until an operator or tenant sends unhold.", nil},
}

// Catalogue lists the steps a node may run.
func Catalogue() []StepInfo { return slices.Clone(catalogue) }

func lookupStep(iface, step string) *StepInfo {
	for i := range catalogue {
		if catalogue[i].Interface == iface && catalogue[i].Step == step {
			return &catalogue[i]
		}
	}
	return nil
}

// maxSteps bounds one request.
const maxSteps = 50

// ValidateSteps checks steps when the request arrives: known interface
// and step, known and well-formed arguments. field names the request
// field for the error (clean_steps or service_steps).
func ValidateSteps(field string, steps []Step) error {
	if len(steps) == 0 {
		return errs.BadRequest(field, "%s must list at least one step", field)
	}
	if len(steps) > maxSteps {
		return errs.BadRequest(field, "%s lists %d steps; at most %d", field, len(steps), maxSteps)
	}
	for i, s := range steps {
		where := fmt.Sprintf("%s[%d]", field, i)
		info := lookupStep(s.Interface, s.Step)
		if info == nil {
			var known []string
			for _, c := range catalogue {
				known = append(known, c.Interface+"."+c.Step)
			}
			return errs.BadRequest(where, "%s: unknown step %s.%s; known steps: %s", where, s.Interface, s.Step, strings.Join(known, ", "))
		}
		for k, v := range s.Args {
			var spec *argSpec
			for j := range info.args {
				if info.args[j].name == k {
					spec = &info.args[j]
				}
			}
			if spec == nil {
				return errs.BadRequest(where+".args."+k, "%s: step %s takes no argument %q", where, s.Name(), k)
			}
			if err := spec.check(v); err != nil {
				return errs.BadRequest(where+".args."+k, "%s: argument %s %v", where, k, err)
			}
		}
		for _, spec := range info.args {
			if _, ok := s.Args[spec.name]; spec.required && !ok {
				return errs.BadRequest(where+".args."+spec.name, "%s: step %s needs argument %q", where, s.Name(), spec.name)
			}
		}
	}
	return nil
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
