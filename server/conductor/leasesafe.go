package conductor

import (
	"context"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
)

// StepRoute names how steps reach a node, for the one decision below.
type StepRoute string

// The routes by which a caller hands Anvil steps to run.
const (
	RouteCleanSteps     StepRoute = "clean_steps"
	RouteServiceSteps   StepRoute = "service_steps"
	RouteDeploySteps    StepRoute = "deploy_steps"
	RouteDeployTemplate StepRoute = "deploy template"
	// RouteRunbook covers campaigns and recoveries too: both run a
	// runbook through Resolve, which takes only runbooks the node's
	// owner side allowed (its own, or the system's by a trait the
	// owner set).
	RouteRunbook StepRoute = "runbook"
)

// OutlivesLease says whether a step changes what stays with the machine
// after a lease ends and the wipe runs: firmware, BIOS settings and their
// reset, secure boot, the BMC itself, the RAID layout, and vendor steps
// (whose effect Anvil cannot know, so they count as the worst case). The
// reserved steps (power, hold, wait) do nothing lasting on any interface.
func OutlivesLease(s Step) bool {
	if _, ok := reserved[s.Step]; ok {
		return false
	}
	switch s.Interface {
	case "firmware", "raid", "vendor":
		return true
	case "bios":
		return s.Step == "apply_configuration" || s.Step == "factory_reset"
	case "management":
		return s.Step == "reset_bmc" || s.Step == "set_secure_boot"
	}
	return false
}

// LeaseSafe is the one place that decides whether a caller may have these
// steps run by this route: a project scope (owner or lessee alike, whatever
// the policy lets it pass) runs a step that outlives a lease only through a
// runbook, which the node's owner allowed; the system runs anything its
// rules let it. A refusal is a 403 naming the step and the way that works.
func LeaseSafe(ctx context.Context, route StepRoute, steps []Step) error {
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.System || route == RouteRunbook {
		return nil
	}
	for _, s := range steps {
		if OutlivesLease(s) {
			return errs.Forbidden("Step %s changes what outlives a lease (firmware, BIOS, BMC, RAID): a project runs it only through a runbook the node's owner allows, not through %s.", s.Name(), route)
		}
	}
	return nil
}
