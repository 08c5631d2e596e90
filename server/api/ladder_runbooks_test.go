package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRunbookDescriptionAndNames (1.112): a runbook's description is
// stored, shown and patchable from 1.112 and refused below (400 in a
// create body or a patch, as Ironic's schema and allowed fields); a new
// runbook's name is a trait below 1.112 and any 1-255 RFC 3986 unreserved
// characters from it; a patch takes the wider pattern at every version,
// as Ironic's patch schema.
func TestRunbookDescriptionAndNames(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c0 := start(t, setting)
		c := at(c0, api.VerRunbookTraits.String())
		old := at(c0, below(api.VerRunbookTraits))
		steps := `"steps":[{"interface":"power","step":"reboot","order":1}]`

		r := c.Do(t, "POST", "/v1/runbooks", `{"name":"fw-update_2.1~a","description":"Flash the BMC.",`+steps+`}`)
		mustStatus(t, r, 201)
		if got := r.JSON(t)["description"]; got != "Flash the BMC." {
			t.Errorf("description %v", got)
		}
		if got := c.Do(t, "GET", "/v1/runbooks/fw-update_2.1~a?fields=name,description", nil).JSON(t); got["description"] != "Flash the BMC." {
			t.Errorf("?fields=name,description: %v", got)
		}
		if got := c.Do(t, "GET", "/v1/runbooks/detail", nil).JSON(t)["runbooks"].([]any)[0].(map[string]any); got["description"] != "Flash the BMC." {
			t.Errorf("detail %v", got)
		}
		for _, bad := range []string{`"has space"`, `"slash/y"`, `""`, `"` + strings.Repeat("a", 256) + `"`} {
			wantFault(t, c.Do(t, "POST", "/v1/runbooks", `{"name":`+bad+`,`+steps+`}`), 400, "name")
		}
		wantFault(t, c.Do(t, "POST", "/v1/runbooks", `{"name":"long","description":"`+strings.Repeat("é", 256)+`",`+steps+`}`), 400, "description")
		mustStatus(t, c.Do(t, "POST", "/v1/runbooks", `{"name":"long","description":"`+strings.Repeat("é", 255)+`",`+steps+`}`), 201)

		// Below 1.112: trait names only, no description.
		wantFault(t, old.Do(t, "POST", "/v1/runbooks", `{"name":"lower-case",`+steps+`}`), 400, "name")
		wantFault(t, old.Do(t, "POST", "/v1/runbooks", `{"name":"CUSTOM_OLD","description":"x",`+steps+`}`), 400, "description")
		mustStatus(t, old.Do(t, "POST", "/v1/runbooks", `{"name":"CUSTOM_OLD",`+steps+`}`), 201)
		got := old.Do(t, "GET", "/v1/runbooks/fw-update_2.1~a", nil).JSON(t)
		if _, ok := got["description"]; ok {
			t.Errorf("description shown below 1.112: %v", got)
		}
		wantFault(t, old.Do(t, "GET", "/v1/runbooks/fw-update_2.1~a?fields=description", nil), 400, "description")
		wantFault(t, old.Do(t, "PATCH", "/v1/runbooks/CUSTOM_OLD", []map[string]any{{"op": "add", "path": "/description", "value": "x"}}), 400, "description")
		// A patch renames with the wider pattern at any version.
		mustStatus(t, old.Do(t, "PATCH", "/v1/runbooks/CUSTOM_OLD", []map[string]any{{"op": "replace", "path": "/name", "value": "renamed.one"}}), 200)

		r = c.Do(t, "PATCH", "/v1/runbooks/renamed.one", []map[string]any{{"op": "add", "path": "/description", "value": "Now described."}})
		mustStatus(t, r, 200)
		if got := r.JSON(t)["description"]; got != "Now described." {
			t.Errorf("patched description %v", got)
		}
		r = c.Do(t, "PATCH", "/v1/runbooks/renamed.one", []map[string]any{{"op": "remove", "path": "/description"}})
		mustStatus(t, r, 200)
		if d, ok := r.JSON(t)["description"]; !ok || d != nil {
			t.Errorf("removed description: %v (shown %v), want null", d, ok)
		}
	})
}
