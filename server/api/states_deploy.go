package api

import (
	"slices"
	"strings"

	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
)

// b64Alphabet is what Ironic lets a string configdrive hold: base64 with
// the whitespace such values carry.
const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n\r\t "

// configDriveKeys are the keys a configdrive object may have.
var configDriveKeys = []string{"meta_data", "network_data", "user_data", "vendor_data"}

// checkDeployRequest applies Ironic's request-time rules for deployment
// (check_allow_configdrive, check_allow_deploy_steps, MIN_VERB_VERSIONS):
// which targets take a configdrive or deploy steps, in which shape, from
// which version.
func checkDeployRequest(v Version, target string, cd any, steps []cond.DeployStep) error {
	if (target == "deploy" || target == "undeploy") && v < VerDeployVerbs {
		return errs.NotAcceptable("target %s requires API version %s or later", target, VerDeployVerbs)
	}
	if len(steps) > 0 {
		if v < VerDeploySteps {
			return errs.NotAcceptable("Request not acceptable. The minimal required API version should be %s", VerDeploySteps)
		}
		if target != "active" && target != "rebuild" && target != "deploy" {
			return errs.BadRequest("deploy_steps", `"deploy_steps" is only valid when setting target provision state to active or rebuild`)
		}
	}
	if cd == nil || cd == "" {
		return nil
	}
	allowed := []string{"active", "deploy"}
	if v >= VerRebuildConfigDrive {
		allowed = append(allowed, "rebuild")
	}
	if !slices.Contains(allowed, target) {
		return errs.BadRequest("configdrive", "Adding a config drive is only supported when setting provision state to %s", strings.Join(allowed, ", "))
	}
	switch x := cd.(type) {
	case string:
		if strings.Contains(x, "://") {
			return nil
		}
		if strings.Trim(x, b64Alphabet) != "" {
			return errs.BadRequest("configdrive", "Invalid configdrive format: it is neither a URL nor base64-encoded")
		}
	case map[string]any:
		if v < VerBuildConfigDrive {
			return errs.BadRequest("configdrive", "Providing a JSON object for configdrive is only supported starting with API version %s", VerBuildConfigDrive)
		}
		if _, ok := x["vendor_data"]; ok && v < VerConfigDriveVendor {
			return errs.BadRequest("configdrive", "Providing vendor_data in configdrive is only supported starting with API version %s", VerConfigDriveVendor)
		}
		for k, val := range x {
			if !slices.Contains(configDriveKeys, k) {
				return errs.BadRequest("configdrive."+k, "Invalid configdrive format: additional property %q is not allowed (%s)", k, strings.Join(configDriveKeys, ", "))
			}
			_, isObj := val.(map[string]any)
			if k == "user_data" {
				switch val.(type) {
				case map[string]any, []any, string, nil:
					isObj = true
				}
			}
			if !isObj {
				return errs.BadRequest("configdrive."+k, "Invalid configdrive format: %s must be an object", k)
			}
		}
	default:
		return errs.BadRequest("configdrive", "Invalid configdrive format: configdrive must be a string or an object")
	}
	return nil
}
