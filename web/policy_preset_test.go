package web_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestLesseeOperatesPresetFromConsole: under Ironic's defaults the
// lessee's member may power her leased node but not deploy it or turn
// its console on; a system admin previews the shipped preset in the
// policy console (its diff: the five rules it changes, none across
// projects) and applies it, audited; then she deploys, powers and turns
// on the console of her leased node, and gets a 404 for each on a node
// her project does not lease.
func TestLesseeOperatesPresetFromConsole(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleetWith(t, server.Options{Database: setting, PolicyOverrideEnabled: true,
			PolicyDir: filepath.Join(t.TempDir(), "policy.d")})
		ctx := context.Background()
		leased, other := ids["f-00"], ids["f-01"] // green leases f-00; f-01 is red's alone
		for _, id := range []string{leased, other} {
			if r := api.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/console_interface", "value": "fake"}}); r.Status != 200 {
				t.Fatalf("console_interface: %d %s", r.Status, r.Body)
			}
			for _, target := range []string{"manage", "provide"} {
				if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": target}); r.Status != 202 {
					t.Fatalf("%s: %d %s", target, r.Status, r.Body)
				}
				waitState(t, api, id, map[string]string{"manage": "manageable", "provide": "available"}[target])
			}
		}
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "gil", Scope: identity.Scope{Project: "green"}, Roles: []string{"member"}})
		if err != nil {
			t.Fatal(err)
		}
		gil := srv.Client()
		gil.Header.Set("X-Auth-Token", tok)
		deploy := func(id string) int {
			return gil.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "active"}).Status
		}
		console := func(id string) int {
			return gil.Do(t, "PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}).Status
		}
		power := func(id string) int {
			return gil.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}).Status
		}
		if d, c := deploy(leased), console(leased); d != 403 || c != 403 {
			t.Fatalf("under the defaults the lessee's member deploys (%d) or enables the console (%d) of her leased node, want 403", d, c)
		}

		root := signInAs(t, srv, "root")
		root.do("GET", "/admin/policy", nil)
		st, page, _ := root.do("POST", "/admin/policy/presets/lessee-operates/preview", url.Values{"csrf": {root.csrf}})
		if st != 200 || !strings.Contains(page, `data-testid="preview-of"`) {
			t.Fatalf("preset preview: %d\n%s", st, page)
		}
		preview := page[strings.Index(page, `data-testid="preview"`):]
		preview = preview[:strings.Index(preview, "</ul>")]
		var changed []string
		for _, line := range strings.Split(preview, "<li")[1:] {
			rule, _, _ := strings.Cut(line[strings.Index(line, "<code>")+len("<code>"):], ":&#34;")
			rule, _, _ = strings.Cut(rule, ": ")
			changed = append(changed, rule)
		}
		want := []string{"baremetal:node:get_console", "baremetal:node:set_console_state", "baremetal:node:set_provision_state",
			"baremetal:node:update_instance_info", "baremetal:node:validate"}
		if slices.Sort(changed); !slices.Equal(changed, want) || strings.Contains(preview, "data-cross-project") {
			t.Errorf("the preset's diff changes %v, want %v, none across projects:\n%s", changed, want, preview)
		}
		if st, page = root.applyPreviewed(page); st != 200 || !strings.Contains(page, "Stored as revision 1;") {
			t.Fatalf("apply the preset: %d\n%s", st, page)
		}
		audited := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:policy:update"), auditevent.Result("allowed")).AllX(ctx)
		if len(audited) != 1 || fmt.Sprint(audited[0].Detail["files"]) != "[lessee-operates.yaml]" ||
			!strings.Contains(fmt.Sprint(audited[0].Detail["diff"]), "baremetal:node:set_provision_state") {
			t.Errorf("the preset's apply is not audited with its file and diff: %v", audited)
		}

		for name, do := range map[string]func(string) int{"deploy": deploy, "power": power, "console": console} {
			if s := do(leased); s != 202 {
				t.Errorf("with the preset, the lessee's member's %s of her leased node: %d, want 202", name, s)
			}
			if s := do(other); s != 404 {
				t.Errorf("with the preset, the lessee's member's %s of a node her project does not lease: %d, want 404", name, s)
			}
		}
		waitState(t, api, leased, "active")
	})
}
