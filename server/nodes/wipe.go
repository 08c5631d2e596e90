package nodes

import (
	"context"
	"reflect"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/server/errs"
)

// WipeKey is the driver_info key of a node's own wipe policy, which
// overrides the server's --wipe for that node (docs/wipe.md).
const WipeKey = "anvil_wipe"

// WipePolicies are the wipe policies, shallowest first.
var WipePolicies = []string{"metadata", "express", "full"}

// checkWipe refuses a change of driver_info/anvil_wipe by a caller not
// in system scope: how deep a machine is wiped between tenants is the
// operator's promise to every tenant, so neither its owner nor a lessee
// may make it shallower (403); a value that is no policy is a 400.
func checkWipe(ctx context.Context, before, after map[string]any) error {
	was, had := before[WipeKey]
	now, has := after[WipeKey]
	if had == has && reflect.DeepEqual(was, now) {
		return nil
	}
	if !systemScope(ctx) {
		return errs.Forbidden("driver_info/%s sets the node's wipe policy, which only system scope may change", WipeKey)
	}
	if p, ok := now.(string); has && (!ok || !slices.Contains(WipePolicies, p)) {
		return errs.BadRequest("driver_info/"+WipeKey, "driver_info/%s must be one of %s, not %v", WipeKey, strings.Join(WipePolicies, ", "), now)
	}
	return nil
}
