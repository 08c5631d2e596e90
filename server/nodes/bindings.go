package nodes

import (
	"maps"
	"reflect"
	"slices"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/patchdoc"
)

// checkBindings refuses a change of where, or as whom, Anvil logs in to a
// BMC when a stored secret would follow it unsent: otherwise whoever may
// write driver_info (an owner-project member, by Ironic's default) points
// the address at a listener of theirs and has the conductor log in there
// with a password no answer ever shows them. The change is taken when the
// same request sends the secret (a value other than the mask) or removes
// it. A driver change counts as such a change for every stored secret.
// info is driver_info as the patch left it, before keepSecrets restores
// the masks, so a secret still equal to Masked is one the caller did not
// send.
func checkBindings(oldDriver, newDriver string, old, info map[string]any) error {
	kept := func(secret string) bool {
		if v, stored := old[secret]; !stored || v == nil || v == "" {
			return false
		}
		return info[secret] == Masked
	}
	for _, b := range bmc.Bindings() {
		for _, k := range b.Keys {
			if reflect.DeepEqual(patchdoc.Normal(old[k]), patchdoc.Normal(info[k])) {
				continue
			}
			for _, s := range b.Secrets {
				if kept(s) {
					return errs.BadRequest("driver_info/"+k, "Changing driver_info/%s moves where the stored driver_info/%s is sent: send driver_info/%s with it in the same request, or remove it", k, s, s)
				}
			}
		}
	}
	if bmc.Canonical(oldDriver) == bmc.Canonical(newDriver) {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if bmc.IsSecretKey(k) && kept(k) {
			return errs.BadRequest("driver", "Changing the driver moves where the stored driver_info/%s is sent: send driver_info/%s with it in the same request, or remove it", k, k)
		}
	}
	return nil
}
