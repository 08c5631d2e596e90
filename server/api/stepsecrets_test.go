package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPatchNeverReadsStepSecrets: a runbook's or deploy template's JSON
// patch works on the stored step arguments, secrets included, so no
// operation may read one out, by its own path or through the steps, a
// step or an args object that holds it. A project manager could
// otherwise copy a password its runbook keeps into extra, which every
// reader of the runbook sees, or probe it with test. Reading arguments
// that hold no secret, and replacing a secret, stay allowed.
func TestPatchNeverReadsStepSecrets(t *testing.T) {
	const pw = "step-s3cret-value"
	reads := []string{"/steps", "/steps/0", "/steps/0/args", "/steps/0/args/bmc_password"}
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		step := map[string]any{"interface": "vendor", "step": "set_secret", "args": map[string]any{"bmc_password": pw, "label": "x"}}
		for _, kind := range []struct{ who, path, reader string }{
			{"owner-manager", "/v1/runbooks", "owner-reader"},
			{"system-admin", "/v1/deploy_templates", "system-reader"},
		} {
			c, reader := clients[kind.who], clients[kind.reader]
			st := map[string]any{"interface": step["interface"], "step": step["step"], "args": step["args"], "order": 1}
			if kind.path == "/v1/deploy_templates" {
				st = map[string]any{"interface": step["interface"], "step": step["step"], "args": step["args"], "priority": 10}
			}
			r := c.Do(t, "POST", kind.path, map[string]any{"name": "CUSTOM_SECRET_STEP", "steps": []any{st}})
			mustStatus(t, r, 201)
			res := kind.path + "/" + r.JSON(t)["uuid"].(string)
			for _, from := range reads {
				for _, op := range []map[string]any{
					{"op": "copy", "from": from, "path": "/extra/x"},
					{"op": "move", "from": from, "path": "/extra/x"},
					{"op": "test", "path": from, "value": pw},
				} {
					mustFault(t, c.Do(t, "PATCH", res, []map[string]any{op}), 400, "holds a secret")
				}
			}
			// What holds no secret may be read; a secret may be replaced.
			mustStatus(t, c.Do(t, "PATCH", res, []map[string]any{{"op": "copy", "from": "/steps/0/args/label", "path": "/extra/label"}}), 200)
			mustStatus(t, c.Do(t, "PATCH", res, []map[string]any{{"op": "replace", "path": "/steps/0/args/bmc_password", "value": "new-" + pw}}), 200)
			for _, who := range []*servertest.Client{c, reader} {
				if body := string(who.Do(t, "GET", res, nil).Body); strings.Contains(body, pw) {
					t.Errorf("%s shows the step's secret: %s", res, body)
				}
			}
		}
	})
}
