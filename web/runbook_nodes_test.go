package web_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// nodes creates nodes through the API as a system admin, by name.
func (env *editorEnv) nodes(specs ...map[string]any) map[string]string {
	ctx := context.Background()
	env.srv.IDs.CreateUser(ctx, "root", "root-password-1")
	env.srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	tok, _, err := env.srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		env.t.Fatal(err)
	}
	admin := env.srv.Client()
	admin.Header.Set("X-Auth-Token", tok)
	ids := map[string]string{}
	for _, n := range specs {
		n["driver"] = "fake"
		r := admin.Do(env.t, "POST", "/v1/nodes", n)
		if r.Status != 201 {
			env.t.Fatalf("create %v: %d %s", n["name"], r.Status, r.Body)
		}
		ids[n["name"].(string)] = r.JSON(env.t)["uuid"].(string)
	}
	return ids
}

func (env *editorEnv) traits(id string) []string {
	r := env.api.Do(env.t, "GET", "/v1/nodes/"+id+"/traits", nil)
	var out []string
	for _, t := range r.JSON(env.t)["traits"].([]any) {
		out = append(out, t.(string))
	}
	return out
}

// A runbook's list row and editor count the nodes the viewer may see
// that carry its trait; a project manager adds the trait to the nodes
// their project owns through the node trait rule, each node's outcome
// shown, a node they only lease or cannot see refused, and each change
// audited; a member sees the count and may add to none.
func TestRunbookNodesCountAndAddTrait(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		env := newEditorEnvOn(t, setting)
		ids := env.nodes(
			map[string]any{"name": "blue-1", "owner": "blue", "resource_class": "small"},
			map[string]any{"name": "blue-2", "owner": "blue", "resource_class": "small"},
			map[string]any{"name": "blue-3", "owner": "blue", "resource_class": "gpu"},
			map[string]any{"name": "red-1", "owner": "red", "lessee": "blue", "resource_class": "small"},
			map[string]any{"name": "green-1", "owner": "green", "resource_class": "small"},
		)
		if r := env.api.Do(t, "PUT", "/v1/nodes/"+ids["green-1"]+"/traits/CUSTOM_BLUE_FW", nil); r.Status != 204 {
			t.Fatalf("trait on green-1: %d", r.Status)
		}
		mia := env.signIn("mia")
		mia.do("GET", "/runbooks/new", nil)
		if st, _, _ := mia.do("POST", "/runbooks/new", rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_BLUE_FW"}}, []string{"power.power_on"})); st != 303 {
			t.Fatalf("save: %d", st)
		}
		// green-1 carries the trait, but blue cannot see it.
		_, page, _ := mia.do("GET", "/runbooks", nil)
		if !strings.Contains(page, "No node you can see carries trait CUSTOM_BLUE_FW") {
			t.Errorf("the list does not say no node of blue's carries the trait:\n%s", between(page, "<tbody>", "</tbody>"))
		}
		sam := env.signIn("sam")
		if _, page, _ := sam.do("GET", "/runbooks", nil); !strings.Contains(page, "1 node carries trait CUSTOM_BLUE_FW") {
			t.Errorf("the system does not count green-1")
		}

		// The picker: blue's small nodes; the leased red-1 is shown but
		// disabled with the rule that refuses it.
		st, page, _ := mia.do("GET", "/runbooks/CUSTOM_BLUE_FW/nodes?class=small", nil)
		if st != 200 {
			t.Fatalf("picker: %d", st)
		}
		for _, name := range []string{"blue-1", "blue-2", "red-1"} {
			if !strings.Contains(page, `data-node="`+name+`"`) {
				t.Errorf("the picker lacks %s", name)
			}
		}
		if strings.Contains(page, `data-node="blue-3"`) || strings.Contains(page, `data-node="green-1"`) {
			t.Error("the class filter or visibility is not applied")
		}
		red := between(page, `data-node="red-1"`, "</tr>")
		if !strings.Contains(red, `disabled aria-label="Add to red-1" aria-describedby="tn-why-0"`) ||
			!strings.Contains(page, `<details class="cannot" id="tn-why-0" data-testid="refusal"><summary>1 node lacks trait CUSTOM_BLUE_FW, and your role (manager of blue) may not add it: ask project red&#39;s managers or admins, or an operator, to add it.</summary>`) {
			t.Errorf("red-1 is not disabled with its reason:\n%s", page)
		}
		if blue := between(page, `data-node="blue-1"`, "</tr>"); strings.Contains(blue, "disabled") {
			t.Errorf("blue-1 is disabled for blue's manager:\n%s", blue)
		}

		// Add to blue-1, blue-2, and (a forged form) red-1 and green-1.
		form := url.Values{"csrf": {mia.csrf}, "trait": {"CUSTOM_BLUE_FW"}, "node": {ids["blue-1"], ids["blue-2"], ids["red-1"], ids["green-1"]}}
		st, page, _ = mia.do("POST", "/runbooks/CUSTOM_BLUE_FW/nodes", form)
		if st != 200 {
			t.Fatalf("add: %d", st)
		}
		outcomes := between(page, `data-testid="outcomes"`, "</section>")
		for _, want := range []string{
			"<strong>blue-1</strong>: added CUSTOM_BLUE_FW.",
			"<strong>blue-2</strong>: added CUSTOM_BLUE_FW.",
			"<strong>red-1</strong>: refused: ",
			"<strong>" + ids["green-1"] + "</strong>: refused: ",
		} {
			if !strings.Contains(outcomes, want) {
				t.Errorf("outcomes lack %q:\n%s", want, outcomes)
			}
		}
		if !strings.Contains(between(outcomes, `data-node="red-1"`, "</li>"), "baremetal:node:traits:set") {
			t.Errorf("red-1's refusal does not name the rule:\n%s", outcomes)
		}
		if !strings.Contains(page, "2 nodes carry trait CUSTOM_BLUE_FW") {
			t.Error("the page does not count the two nodes after adding")
		}
		for name, want := range map[string]bool{"blue-1": true, "blue-2": true, "blue-3": false, "red-1": false} {
			if got := slices.Contains(env.traits(ids[name]), "CUSTOM_BLUE_FW"); got != want {
				t.Errorf("%s carries the trait: %v, want %v", name, got, want)
			}
		}
		ctx := context.Background()
		for _, name := range []string{"blue-1", "blue-2"} {
			n := env.srv.DB.AuditEvent.Query().Where(auditevent.Rule("baremetal:node:traits:set"), auditevent.TargetID(ids[name]), auditevent.User("mia")).CountX(ctx)
			if n != 1 {
				t.Errorf("%s: %d audit records of mia's trait change, want 1", name, n)
			}
		}
		// Again: already there, said so.
		st, page, _ = mia.do("POST", "/runbooks/CUSTOM_BLUE_FW/nodes", url.Values{"csrf": {mia.csrf}, "trait": {"CUSTOM_BLUE_FW"}, "node": {ids["blue-1"]}})
		if st != 200 || !strings.Contains(page, "<strong>blue-1</strong>: already carried CUSTOM_BLUE_FW.") {
			t.Errorf("adding again: %d", st)
		}

		// The member counts the nodes it may see (not green-1), and may
		// add to none: the form is refused per node by the service.
		mo := env.signIn("mo")
		if _, page, _ := mo.do("GET", "/runbooks", nil); !strings.Contains(page, "2 nodes carry trait CUSTOM_BLUE_FW") {
			t.Error("the member's count is not 2")
		}
		if _, page, _ := sam.do("GET", "/runbooks", nil); !strings.Contains(page, "3 nodes carry trait CUSTOM_BLUE_FW") {
			t.Error("the system's count is not 3")
		}
		_, page, _ = mo.do("GET", "/runbooks/CUSTOM_BLUE_FW/nodes", nil)
		if b := between(page, `data-node="blue-3"`, "</tr>"); !strings.Contains(b, "disabled") ||
			!strings.Contains(page, "<summary>1 node lacks trait CUSTOM_BLUE_FW, and your role (member of blue) may not add it: ask project blue&#39;s managers or admins, or an operator, to add it.</summary>") ||
			!strings.Contains(page, "<summary>2 nodes already carry CUSTOM_BLUE_FW, so the runbook can run there; your role (member of blue) may not change their traits.</summary>") {
			t.Errorf("blue-3 is not disabled for the member, with why:\n%s", page)
		}
		_, page, _ = mo.do("POST", "/runbooks/CUSTOM_BLUE_FW/nodes", url.Values{"csrf": {mo.csrf}, "trait": {"CUSTOM_BLUE_FW"}, "node": {ids["blue-3"]}})
		if !strings.Contains(between(page, `data-node="blue-3"`, "</li>"), "refused: ") || slices.Contains(env.traits(ids["blue-3"]), "CUSTOM_BLUE_FW") {
			t.Error("the member added the trait to blue-3")
		}

		// Bad input: a trait that is not the runbook's, or no node.
		st, page, _ = mia.do("POST", "/runbooks/CUSTOM_BLUE_FW/nodes", url.Values{"csrf": {mia.csrf}, "trait": {"CUSTOM_OTHER"}, "node": {ids["blue-3"]}})
		if st != 400 || !strings.Contains(page, "trait: choose one of runbook CUSTOM_BLUE_FW") || slices.Contains(env.traits(ids["blue-3"]), "CUSTOM_OTHER") {
			t.Errorf("another trait: %d", st)
		}
		if st, page, _ := mia.do("POST", "/runbooks/CUSTOM_BLUE_FW/nodes", url.Values{"csrf": {mia.csrf}, "trait": {"CUSTOM_BLUE_FW"}}); st != 400 || !strings.Contains(page, "node: choose at least one node") {
			t.Errorf("no node: %d", st)
		}
		// Another project's manager cannot see blue's runbook.
		if st, _, _ := env.signIn("gina").do("GET", "/runbooks/CUSTOM_BLUE_FW/nodes", nil); st != 404 {
			t.Errorf("gina opened blue's runbook's nodes: %d", st)
		}
	})
}

// Step arguments read as words everywhere a runbook's steps are shown
// (the list, a node's runbooks, the editor's preview): a list one item a
// line, an object as "key: value" pairs, deeper things as indented JSON;
// never Go's map[...] rendering.
func TestRunbookArgsReadable(t *testing.T) {
	env := newEditorEnv(t)
	ids := env.nodes(map[string]any{"name": "n-1", "owner": "blue"})
	env.api.Do(t, "PUT", "/v1/nodes/"+ids["n-1"]+"/traits/CUSTOM_ARGS", nil)
	r := env.api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_ARGS", "steps": []map[string]any{
		{"interface": "bios", "step": "apply_configuration", "order": 1, "args": map[string]any{"settings": []map[string]any{{"name": "SysProfile", "value": "PerfOptimized"}, {"name": "ProcTurboMode", "value": "Enabled"}}}},
		{"interface": "firmware", "step": "update", "order": 2, "args": map[string]any{"settings": []map[string]any{{"component": "bios", "url": "http://fw.example/bios-1.1.bin"}}}},
		{"interface": "deploy", "step": "wait", "order": 3, "args": map[string]any{"seconds": 3}},
		{"interface": "deploy", "step": "custom_layout", "order": 4, "args": map[string]any{"layout": map[string]any{"disks": []any{map[string]any{"size_gb": 10}}}}},
	}})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	want := []string{
		`<li data-arg="settings">settings: <ul><li>name: SysProfile, value: PerfOptimized</li><li>name: ProcTurboMode, value: Enabled</li></ul></li>`,
		`<li>component: bios, url: http://fw.example/bios-1.1.bin</li>`,
		`<li data-arg="seconds">seconds: 3</li>`,
		"layout: <pre>{\n  &#34;disks&#34;: [\n    {\n      &#34;size_gb&#34;: 10\n    }\n  ]\n}</pre>",
	}
	sam := env.signIn("sam")
	_, list, _ := sam.do("GET", "/runbooks", nil)
	_, node, _ := sam.do("GET", "/nodes/"+ids["n-1"], nil)
	_, editor, _ := sam.do("GET", "/runbooks/CUSTOM_ARGS/edit", nil)
	for where, page := range map[string]string{
		"runbook list": between(list, `data-runbook="CUSTOM_ARGS"`, "</tr>"),
		"node page":    between(node, `<div class="runbook" data-runbook="CUSTOM_ARGS">`, "</details>"),
		"preview":      between(editor, `data-testid="preview"`, "</fieldset>"),
	} {
		for _, w := range want {
			if !strings.Contains(page, w) {
				t.Errorf("%s lacks %q:\n%s", where, w, page)
			}
		}
		if strings.Contains(page, "map[") {
			t.Errorf("%s shows a Go map", where)
		}
	}
}

// A new runbook is retryable: the editor offers the box ticked and saves
// no key; clearing it writes the publisher's opt-out (extra
// anvil_retryable false) and ticking it again removes that, leaving the
// rest of extra as API clients put it.
func TestRunbookEditorRetryable(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	checkbox := `name="retryable" value="true"`
	if _, page, _ := mia.do("GET", "/runbooks/new", nil); !strings.Contains(page, checkbox+" checked") {
		t.Error("a new runbook is not offered retryable")
	}
	form := func(retry bool) url.Values {
		f := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_RETRY"}}, []string{"power.power_on"})
		if retry {
			f.Set("retryable", "true")
		}
		return f
	}
	if st, _, _ := mia.do("POST", "/runbooks/new", form(true)); st != 303 {
		t.Fatalf("create: %d", st)
	}
	_, rb := env.runbook("CUSTOM_RETRY")
	id := rb["uuid"].(string)
	if extra, _ := rb["extra"].(map[string]any); extra["anvil_retryable"] != nil {
		t.Fatalf("created retryable: extra %v (want no opt-out)", rb["extra"])
	}
	if r := env.api.Do(t, "PATCH", "/v1/runbooks/"+id, []map[string]any{{"op": "add", "path": "/extra/team", "value": "storage"}}); r.Status != 200 {
		t.Fatalf("patch extra: %d %s", r.Status, r.Body)
	}
	if _, page, _ := mia.do("GET", "/runbooks/CUSTOM_RETRY/edit", nil); !strings.Contains(page, checkbox+" checked") {
		t.Error("the editor does not show the runbook retryable")
	}
	for _, retry := range []bool{false, true} {
		if st, _, _ := mia.do("POST", "/runbooks/"+id+"/edit", form(retry)); st != 303 {
			t.Fatalf("save retryable=%v: %d", retry, st)
		}
		_, rb = env.runbook(id)
		extra, _ := rb["extra"].(map[string]any)
		v, set := extra["anvil_retryable"]
		if set == retry || (!retry && v != false) || extra["team"] != "storage" {
			t.Errorf("saved retryable=%v: extra %v", retry, extra)
		}
		_, page, _ := mia.do("GET", "/runbooks/CUSTOM_RETRY/edit", nil)
		if strings.Contains(page, checkbox+" checked") != retry {
			t.Errorf("saved retryable=%v: the checkbox does not follow", retry)
		}
	}
}

// The settings builders: bios.apply_configuration picks a setting from a
// reference node's cached BIOS settings (a node the viewer cannot see
// says so) and adds it to the JSON list, which stays what is saved;
// firmware.update adds a component with an uploaded image for those who
// may list images, and tells others to give a URL.
func TestRunbookEditorSettingsBuilders(t *testing.T) {
	env := newEditorEnv(t)
	ids := env.nodes(map[string]any{"name": "ref-1", "owner": "blue"}, map[string]any{"name": "green-1", "owner": "green"})
	ctx := context.Background()
	n := env.srv.DB.Node.Query().Where(node.UUID(ids["ref-1"])).OnlyX(ctx)
	env.srv.DB.BiosSetting.Create().SetNodeID(n.ID).SetName("ProcTurboMode").SetValue("Disabled").ExecX(ctx)
	env.srv.DB.BiosSetting.Create().SetNodeID(n.ID).SetName("SysProfile").SetValue("Balanced").ExecX(ctx)
	img, err := env.srv.Firmware.Put("bios-2.0.bin", strings.NewReader("image bytes"))
	if err != nil {
		t.Fatal(err)
	}

	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	form := func(b *browser, op string, step []string, builder ...string) url.Values {
		f := rows(url.Values{"csrf": {b.csrf}, "name": {"CUSTOM_BUILT"}, "op": {op}}, step)
		for _, kv := range builder {
			k, v, _ := strings.Cut(kv, "=")
			f.Set("s0.b."+k, v)
		}
		return f
	}
	bios := []string{"bios.apply_configuration", `settings=[{"name": "SysProfile", "value": "Balanced"}]`}
	_, frag, _ := mia.do("POST", "/runbooks/new", form(mia, "refresh", bios, "ref=ref-1"), "HX-Request", "true")
	if !strings.Contains(frag, `<option value="ProcTurboMode">ProcTurboMode (now Disabled)</option>`) {
		t.Errorf("the reference node's settings are not offered:\n%s", between(frag, `data-testid="builder-0"`, "</fieldset>"))
	}
	_, frag, _ = mia.do("POST", "/runbooks/new", form(mia, "append:0", bios, "ref=ref-1", "name=ProcTurboMode", "value=Enabled"), "HX-Request", "true")
	want := "[\n  {\n    &#34;name&#34;: &#34;SysProfile&#34;,\n    &#34;value&#34;: &#34;Balanced&#34;\n  },\n  {\n    &#34;name&#34;: &#34;ProcTurboMode&#34;,\n    &#34;value&#34;: &#34;Enabled&#34;\n  }\n]</textarea>"
	if !strings.Contains(frag, want) || !strings.Contains(frag, "Added ProcTurboMode = Enabled to settings below") {
		t.Errorf("the setting is not added to the list:\n%s", between(frag, `data-row="0"`, "</tr>"))
	}
	// Added again with another value: replaced, not listed twice.
	again := []string{"bios.apply_configuration", `settings=[{"name": "ProcTurboMode", "value": "Enabled"}]`}
	_, frag, _ = mia.do("POST", "/runbooks/new", form(mia, "append:0", again, "name=ProcTurboMode", "value=Disabled"), "HX-Request", "true")
	if strings.Count(frag, "&#34;ProcTurboMode&#34;") != 1 || !strings.Contains(frag, "&#34;value&#34;: &#34;Disabled&#34;") {
		t.Errorf("the setting is not replaced:\n%s", between(frag, `data-row="0"`, "</tr>"))
	}
	_, frag, _ = mia.do("POST", "/runbooks/new", form(mia, "refresh", bios, "ref="+ids["green-1"]), "HX-Request", "true")
	if !strings.Contains(frag, "Reference node: Node "+ids["green-1"]+" could not be found") {
		t.Errorf("another project's node as reference:\n%s", between(frag, `data-testid="builder-0"`, "</fieldset>"))
	}
	_, frag, _ = mia.do("POST", "/runbooks/new", form(mia, "append:0", bios), "HX-Request", "true")
	if !strings.Contains(frag, "Setting: choose or type a setting&#39;s name.") {
		t.Error("adding no setting is not refused")
	}

	// Firmware: the project manager may not list images; the system may.
	fw := []string{"firmware.update"}
	_, frag, _ = mia.do("POST", "/runbooks/new", form(mia, "refresh", fw), "HX-Request", "true")
	if !strings.Contains(frag, "anvil:firmware_image:list") || strings.Contains(frag, "bios-2.0.bin") {
		t.Errorf("the project manager is offered images, or not told why not:\n%s", between(frag, `data-testid="builder-0"`, "</fieldset>"))
	}
	sam := env.signIn("sam")
	sam.do("GET", "/runbooks/new", nil)
	_, frag, _ = sam.do("POST", "/runbooks/new", form(sam, "refresh", fw), "HX-Request", "true")
	if !strings.Contains(frag, `<option value="`+img.URL+`">bios-2.0.bin</option>`) {
		t.Errorf("the system manager is not offered the image:\n%s", between(frag, `data-testid="builder-0"`, "</fieldset>"))
	}
	_, frag, _ = sam.do("POST", "/runbooks/new", form(sam, "append:0", fw, "component=nic:", "nic=NIC.Slot.1", "image="+img.URL, "wait=30"), "HX-Request", "true")
	if !strings.Contains(frag, "&#34;component&#34;: &#34;nic:NIC.Slot.1&#34;,\n    &#34;url&#34;: &#34;"+img.URL+"&#34;,\n    &#34;wait&#34;: 30") {
		t.Errorf("the component is not added:\n%s", between(frag, `data-row="0"`, "</tr>"))
	}
	_, frag, _ = sam.do("POST", "/runbooks/new", form(sam, "append:0", fw, "component=bmc"), "HX-Request", "true")
	if !strings.Contains(frag, "Image: choose an uploaded image or give an http:// or https:// URL.") {
		t.Error("a component without an image is not refused")
	}
	// What the builder wrote is what is saved.
	built := []string{"firmware.update", `settings=[{"component": "bios", "url": "` + img.URL + `"}]`}
	if st, _, _ := sam.do("POST", "/runbooks/new", form(sam, "save", built)); st != 303 {
		t.Fatalf("save: %d", st)
	}
	_, rb := env.runbook("CUSTOM_BUILT")
	steps, _ := rb["steps"].([]any)
	if len(steps) != 1 || fmt.Sprint(steps[0].(map[string]any)["args"]) != fmt.Sprint(map[string]any{"settings": []any{map[string]any{"component": "bios", "url": img.URL}}}) {
		t.Errorf("saved steps: %v", rb["steps"])
	}
}

// TestRunbookChoosersCountAndCollapse: every list of runbooks says on how
// many of the viewer's nodes each can run (carrying its trait, taken by
// it, and where the viewer may run runbooks: a private runbook of blue's
// does not run on red's node that blue leases), and "Choose where it
// runs" says a refusal shared by many nodes once, with its count and the
// nodes behind a disclosure, instead of once a row.
func TestRunbookChoosersCountAndCollapse(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		env := newEditorEnvOn(t, setting)
		var specs []map[string]any
		for i := range 12 {
			specs = append(specs, map[string]any{"name": fmt.Sprintf("b-%02d", i), "owner": "blue"})
		}
		ids := env.nodes(append(specs, map[string]any{"name": "red-1", "owner": "red", "lessee": "blue"})...)
		mia := env.signIn("mia")
		mia.do("GET", "/runbooks/new", nil)
		st, _, h := mia.do("POST", "/runbooks/new", rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_BURNIN"}}, []string{"power.power_on"}))
		if st != 303 {
			t.Fatalf("save: %d", st)
		}
		saved := h.Get("Location")
		// Saved: where it runs today (nowhere yet), and how it reaches more.
		if _, page, _ := mia.do("GET", saved, nil); !strings.Contains(page, "No node of yours can run it yet: it runs on nodes that carry CUSTOM_BURNIN. To run it on more, give them CUSTOM_BURNIN under “Choose where it runs”.") {
			t.Errorf("the save does not say where the runbook runs:\n%s", between(page, "<main", "</h1>"))
		}
		for _, name := range []string{"b-00", "b-01", "b-02", "red-1"} {
			if r := env.api.Do(t, "PUT", "/v1/nodes/"+ids[name]+"/traits/CUSTOM_BURNIN", nil); r.Status != 204 {
				t.Fatalf("trait on %s: %d", name, r.Status)
			}
		}
		_, page, _ := mia.do("GET", saved, nil)
		if !strings.Contains(page, "It can run today on 3 of your nodes: b-00, b-01, b-02. To run it on more") {
			t.Errorf("the save does not name where the runbook runs:\n%s", between(page, "<main", "</h1>"))
		}
		if _, page, _ := env.signIn("mo").do("GET", saved, nil); !strings.Contains(page, "It can run today on 3 of your nodes: b-00, b-01, b-02. To run it on more, ask project blue&#39;s managers or admins, or an operator, to give them CUSTOM_BURNIN.") {
			t.Errorf("the member is not told whom to ask:\n%s", between(page, "<main", "</h1>"))
		}
		if row := between(page, `data-runbook="CUSTOM_BURNIN"`, "</tr>"); !strings.Contains(row, "4 nodes carry trait CUSTOM_BURNIN") ||
			!strings.Contains(row, `<span data-testid="eligible">(runs on 3 of your nodes)</span>`) {
			t.Errorf("the list does not count where the runbook runs:\n%s", row)
		}
		_, page, _ = mia.do("GET", "/nodes/"+ids["b-00"], nil)
		if !regexp.MustCompile(`data-testid="runbook-eligible">(CUSTOM_BURNIN |— )runs on 3 of your nodes`).MatchString(page) {
			t.Errorf("the node's runbooks do not say where they run:\n%s", between(page, `id="runbooks"`, "</section>"))
		}
		_, page, _ = mia.do("POST", "/nodes/bulk", url.Values{"csrf": {mia.csrf}, "action": {"runbook"}, "node": {ids["b-00"]}})
		if !strings.Contains(page, `<option value="CUSTOM_BURNIN">CUSTOM_BURNIN — runs on 3 of your nodes</option>`) {
			t.Errorf("the rollout's runbook choice does not count:\n%s", between(page, `<select id="bulk-runbook"`, "</select>"))
		}

		// The member may add the trait to none of them: one line for the
		// nine blue nodes without it, one for the three with it, one for
		// red's.
		mo := env.signIn("mo")
		_, page, _ = mo.do("GET", "/runbooks/CUSTOM_BURNIN/nodes", nil)
		if n := strings.Count(page, `data-testid="refusal"`); n != 3 {
			t.Errorf("%d refusal lines, want 3:\n%s", n, between(page, `data-testid="refusals"`, "</table>"))
		}
		lack := "9 nodes lack trait CUSTOM_BURNIN, and your role (member of blue) may not add it: ask project blue&#39;s managers or admins, or an operator, to add it."
		if strings.Count(page, lack) != 1 || strings.Contains(page, "may not add traits to this node") {
			t.Errorf("the shared refusal is not said once:\n%s", page)
		}
		g := between(page, "<summary>"+lack+"</summary>", "</details>")
		for i := 3; i < 12; i++ {
			name := fmt.Sprintf("b-%02d", i)
			if !strings.Contains(g, "<li>"+name+"</li>") {
				t.Errorf("the refusal's disclosure lacks %s:\n%s", name, g)
			}
			id := describedBy.FindStringSubmatch(between(page, `data-node="`+name+`"`, "</tr>"))
			if id == nil || !strings.Contains(page, `<details class="cannot" id="`+id[1]+`" data-testid="refusal"><summary>`+lack) {
				t.Errorf("%s's checkbox is not described by its refusal: %v", name, id)
			}
		}
	})
}

var describedBy = regexp.MustCompile(`aria-describedby="([^"]+)"`)
