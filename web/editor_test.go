package web_test

import (
	"context"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// editorEnv is a server with a blue manager (mia), a blue member (mo), a
// green manager (gina) and a system manager (sam), and an API client
// signed in as sam.
type editorEnv struct {
	srv *servertest.Server
	api *servertest.Client
	t   *testing.T
}

func newEditorEnv(t *testing.T) *editorEnv {
	return newEditorEnvOn(t, storetest.Setting(t, "sqlite"))
}

// newEditorEnvOn is newEditorEnv on the database setting names.
func newEditorEnvOn(t *testing.T, setting string) *editorEnv {
	srv := servertest.Start(t, server.Options{Database: setting})
	ctx := context.Background()
	for _, u := range []struct {
		name  string
		scope identity.Scope
		role  string
	}{{"mia", identity.Scope{Project: "blue"}, "manager"}, {"mo", identity.Scope{Project: "blue"}, "member"},
		{"gina", identity.Scope{Project: "green"}, "manager"}, {"sam", identity.Scope{System: true}, "manager"}} {
		srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1")
		srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: u.scope, Role: u.role})
	}
	api := srv.Client()
	tok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "sam", Scope: identity.Scope{System: true}, Roles: []string{"manager"}})
	api.Header.Set("X-Auth-Token", tok)
	return &editorEnv{srv: srv, api: api, t: t}
}

func (env *editorEnv) signIn(user string) *browser { return signInAs(env.t, env.srv, user) }

// runbook is the API's view of a runbook (any owner, as the system sees).
func (env *editorEnv) runbook(ident string) (int, map[string]any) {
	r := env.api.Do(env.t, "GET", "/v1/runbooks/"+ident, nil)
	if r.Status != 200 {
		return r.Status, nil
	}
	return 200, r.JSON(env.t)
}

// rows builds the editor's step rows: each is interface.step (or "other:
// interface.step" with JSON), then argument name=value pairs.
func rows(form url.Values, steps ...[]string) url.Values {
	for i, s := range steps {
		p := fmt.Sprintf("s%d.", i)
		form.Add("row", fmt.Sprint(i))
		if name, ok := strings.CutPrefix(s[0], "other:"); ok {
			form.Set(p+"step", "other")
			form.Set(p+"custom", name)
			if len(s) > 1 {
				form.Set(p+"json", s[1])
			}
			continue
		}
		form.Set(p+"step", s[0])
		for _, kv := range s[1:] {
			k, v, _ := strings.Cut(kv, "=")
			form.Set(p+"a."+k, v)
		}
	}
	return form
}

func TestRunbookEditor(t *testing.T) {
	env := newEditorEnv(t)
	if st, page, _ := env.signIn("mo").do("GET", "/runbooks/new", nil); st != 403 || !strings.Contains(page, "baremetal:runbook:create") {
		t.Errorf("a project member opened the editor: %d (the page must name the rule)", st)
	}
	mia := env.signIn("mia")
	if st, page, _ := mia.do("GET", "/runbooks/new", nil); st != 200 || strings.Contains(page, "Public (every project") || !strings.Contains(page, `name="s0.step"`) {
		t.Fatalf("editor for a project manager: %d (one blank row, no publishing)", st)
	}
	form := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_FW_BLUE"}},
		[]string{"management.set_boot_device", "device=pxe"}, []string{"power.power_off"}, []string{"power.power_on"})
	st, _, h := mia.do("POST", "/runbooks/new", form)
	if st != 303 || !strings.HasPrefix(h.Get("Location"), "/runbooks?saved=") {
		t.Fatalf("save: %d %s", st, h.Get("Location"))
	}
	_, page, _ := mia.do("GET", h.Get("Location"), nil)
	if !strings.Contains(page, "Saved CUSTOM_FW_BLUE: private to project blue") {
		t.Errorf("the saved runbook's visibility is not said")
	}

	// A system manager publishes it; the owner clears.
	sam := env.signIn("sam")
	_, page, _ = sam.do("GET", "/runbooks/CUSTOM_FW_BLUE/edit", nil)
	if !strings.Contains(page, "Public (every project") {
		t.Fatal("the system manager is not offered publishing")
	}
	_, rb := env.runbook("CUSTOM_FW_BLUE")
	id := rb["uuid"].(string)
	pub := rows(url.Values{"csrf": {sam.csrf}, "name": {"CUSTOM_FW_BLUE"}, "public": {"true"}, "owner": {"blue"}},
		[]string{"management.set_boot_device", "device=pxe"}, []string{"power.power_off"}, []string{"power.power_on"})
	if st, _, _ := sam.do("POST", "/runbooks/"+id+"/edit", pub); st != 303 {
		t.Fatalf("publish: %d", st)
	}
	if _, rb := env.runbook(id); rb["public"] != true || rb["owner"] != nil {
		t.Errorf("after publishing: public %v owner %v", rb["public"], rb["owner"])
	}
	// "New runbook" as the system: Public and Owner take effect at once,
	// and the page says what resulted.
	for _, c := range []struct{ public, owner, want string }{
		{"true", "", "public — every project"},
		{"", "green", "private to project green"},
	} {
		name := "CUSTOM_NEW_" + strings.ToUpper(c.owner+c.public)
		form := rows(url.Values{"csrf": {sam.csrf}, "name": {name}, "public": {c.public}, "owner": {c.owner}}, []string{"power.power_on"})
		st, _, h := sam.do("POST", "/runbooks/new", form)
		if st != 303 {
			t.Fatalf("create %s: %d", name, st)
		}
		if _, page, _ := sam.do("GET", h.Get("Location"), nil); !strings.Contains(page, c.want) {
			t.Errorf("create %s: the page does not say %q", name, c.want)
		}
		_, rb := env.runbook(name)
		if fmt.Sprint(rb["public"]) != fmt.Sprint(c.public == "true") || (c.owner != "" && rb["owner"] != c.owner) {
			t.Errorf("create %s: public %v owner %v", name, rb["public"], rb["owner"])
		}
	}
	// The project manager can no longer edit a public runbook, and is told why.
	if st, page, _ := mia.do("GET", "/runbooks/CUSTOM_FW_BLUE/edit", nil); st != 403 || !strings.Contains(page, "baremetal:runbook:update") {
		t.Errorf("project manager editing a public runbook: %d", st)
	}
}

// Three bad rows and a bad name give four errors in one answer, each
// next to its field and in the summary, with rows numbered as shown; and
// nothing is saved.
func TestRunbookEditorShowsEveryError(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	form := rows(url.Values{"csrf": {mia.csrf}, "name": {"not a trait"}},
		[]string{"power.power_on"},
		[]string{"deploy.wait", "seconds=ten"},
		[]string{"management.set_boot_device"},
		[]string{"other:deploy.erase_devices", "{not json"},
		[]string{"deploy.wait", "seconds=90000"},
	)
	form.Add("row", "5") // a row left blank
	st, page, _ := mia.do("POST", "/runbooks/new", form)
	if st != 400 {
		t.Fatalf("bad form: %d", st)
	}
	summary := between(page, `data-testid="error-summary"`, "</div>")
	for _, want := range []string{
		`href="#rb-name">name &#34;not a trait&#34; must be 1 to 255 letters, digits`,
		`href="#s1-a-seconds">Step 2: argument seconds must be a whole number.`,
		`href="#s2-a-device">Step 3: step management.set_boot_device needs argument &#34;device&#34;`,
		`href="#s3-json">Step 4: arguments must be a JSON object`,
		`href="#s4-a-seconds">Step 5: argument seconds must be a whole number of seconds from 0 to 86400`,
		`href="#s5-step">Step 6: choose a step, or remove the row.`,
		"6 problems: nothing was saved",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	if !strings.Contains(summary, `role="alert"`) && !strings.Contains(page, `role="alert" data-testid="error-summary"`) {
		t.Error("the summary is not an alert")
	}
	if strings.Contains(page, "steps[") {
		t.Error("an error names a row by its index in the request, not as shown")
	}
	// Next to the field: the error is in the row, and the field points at it.
	row := between(page, `data-row="1"`, "</tr>")
	if !strings.Contains(row, `id="s1-a-seconds-error"`) || !strings.Contains(row, `aria-describedby="s1-a-seconds-hint s1-a-seconds-error"`) || !strings.Contains(row, `value="ten"`) {
		t.Errorf("row 2 does not keep its value and show its error:\n%s", row)
	}
	if st, _ := env.runbook("CUSTOM_ANY"); st != 404 {
		t.Error("something was saved")
	}
	if n := env.srv.DB.Runbook.Query().CountX(context.Background()); n != 0 {
		t.Errorf("%d runbooks saved from a form with errors", n)
	}
}

// Row buttons add, remove and move rows, keeping what was typed; htmx
// gets the rows alone. What is saved is the order shown, numbered 1..N.
func TestRunbookEditorRows(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	base := func(op string) url.Values {
		f := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_ROWS"}, "op": {op}},
			[]string{"power.power_off"}, []string{"deploy.wait", "seconds=5"}, []string{"power.power_on"})
		return f
	}
	selected := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<option value="([a-z_.]+)" selected>`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for _, c := range []struct {
		op   string
		want string
	}{
		{"add", "power.power_off deploy.wait power.power_on"}, // and a blank fourth row
		{"up:1", "deploy.wait power.power_off power.power_on"},
		{"down:1", "power.power_off power.power_on deploy.wait"},
		{"remove:0", "deploy.wait power.power_on"},
		{"up:0", "power.power_off deploy.wait power.power_on"}, // the first row does not move up
	} {
		st, page, _ := mia.do("POST", "/runbooks/new", base(c.op))
		if got := strings.Join(selected(page), " "); st != 200 || got != c.want {
			t.Errorf("%s: %d, rows %q, want %q", c.op, st, got, c.want)
		}
		if !strings.Contains(page, `value="5"`) {
			t.Errorf("%s: the wait's seconds were lost", c.op)
		}
	}
	if _, page, _ := mia.do("POST", "/runbooks/new", base("add")); !strings.Contains(page, `data-row="3"`) || !strings.Contains(page, "<h1>") {
		t.Error("add without htmx: no fourth row, or not the whole page")
	}
	st, frag, _ := mia.do("POST", "/runbooks/new", base("up:2"), "HX-Request", "true")
	if st != 200 || !strings.HasPrefix(strings.TrimSpace(frag), `<fieldset id="steps"`) || strings.Contains(frag, "<h1>") {
		t.Errorf("htmx gets the rows alone: %d %.80q", st, frag)
	}
	if got := strings.Join(selected(frag), " "); got != "power.power_off power.power_on deploy.wait" {
		t.Errorf("htmx up:2: %s", got)
	}
	// Changing a row's step shows the new step's fields.
	f := base("refresh")
	f.Set("s2.step", "management.set_boot_device")
	if _, frag, _ := mia.do("POST", "/runbooks/new", f, "HX-Request", "true"); !strings.Contains(frag, `id="s2-a-device"`) || !strings.Contains(frag, `<option value="pxe">`) {
		t.Errorf("the boot device's choices are not offered:\n%s", frag)
	}
	if n := env.srv.DB.Runbook.Query().CountX(context.Background()); n != 0 {
		t.Errorf("a row button saved the runbook (%d)", n)
	}

	// Saved in the order shown.
	save := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_ROWS"}},
		[]string{"power.power_on"}, []string{"deploy.wait", "seconds=5"}, []string{"power.power_off"})
	if st, _, _ := mia.do("POST", "/runbooks/new", save); st != 303 {
		t.Fatalf("save: %d", st)
	}
	_, rb := env.runbook("CUSTOM_ROWS")
	var got []string
	for _, s := range rb["steps"].([]any) {
		m := s.(map[string]any)
		got = append(got, fmt.Sprintf("%v.%v@%v", m["interface"], m["step"], m["order"]))
	}
	if strings.Join(got, " ") != "power.power_on@1 deploy.wait@2 power.power_off@3" {
		t.Errorf("saved steps %v", got)
	}
}

// Argument fields are typed as the catalogue says; a step the catalogue
// does not know keeps JSON; the description lives in extra.
func TestRunbookEditorTypedArguments(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	form := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_TYPED"}, "description": {"Reflash and boot from the network."}, "retryable": {"true"}},
		[]string{"deploy.wait", "seconds=30"},
		[]string{"management.set_boot_device", "device=pxe", "persistent=true"},
		[]string{"management.set_secure_boot"}, // the required checkbox left unticked: false
		[]string{"raid.create_configuration", "create_root_volume=", "delete_existing=false"},
		[]string{"bios.apply_configuration", `settings=[{"name": "ProcTurboMode", "value": "Enabled"}]`},
		[]string{"other:deploy.erase_devices", `{"erase": true}`},
	)
	if st, page, _ := mia.do("POST", "/runbooks/new", form); st != 303 {
		t.Fatalf("save: %d\n%s", st, between(page, `data-testid="error-summary"`, "</div>"))
	}
	_, rb := env.runbook("CUSTOM_TYPED")
	args := map[string]string{}
	for _, s := range rb["steps"].([]any) {
		m := s.(map[string]any)
		args[fmt.Sprintf("%v.%v", m["interface"], m["step"])] = fmt.Sprintf("%#v", m["args"])
	}
	for step, want := range map[string]string{
		"deploy.wait":                `map[string]interface {}{"seconds":30}`,
		"management.set_boot_device": `map[string]interface {}{"device":"pxe", "persistent":true}`,
		"management.set_secure_boot": `map[string]interface {}{"enabled":false}`,
		"raid.create_configuration":  `map[string]interface {}{"delete_existing":false}`,
		"bios.apply_configuration":   `map[string]interface {}{"settings":[]interface {}{map[string]interface {}{"name":"ProcTurboMode", "value":"Enabled"}}}`,
		"deploy.erase_devices":       `map[string]interface {}{"erase":true}`,
	} {
		if args[step] != want {
			t.Errorf("%s args %s, want %s", step, args[step], want)
		}
	}
	// The description is the runbook's own field (Ironic's 1.112), which
	// API clients read too.
	if rb["description"] != "Reflash and boot from the network." || len(rb["extra"].(map[string]any)) != 0 {
		t.Errorf("description %v, extra %v", rb["description"], rb["extra"])
	}
	// The editor shows it all again, and an empty description is none.
	_, page, _ := mia.do("GET", "/runbooks/CUSTOM_TYPED/edit", nil)
	for _, want := range []string{`id="s0-a-seconds" name="s0.a.seconds" value="30"`, `<option value="pxe" selected>`, `value="deploy.erase_devices"`,
		`{&#34;erase&#34;:true}`, ">Reflash and boot from the network.</textarea>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the edit page lacks %s", want)
		}
	}
	// The list says what the runbook is for.
	_, page, _ = mia.do("GET", "/runbooks", nil)
	if !strings.Contains(page, `<p class="why" data-testid="runbook-description">Reflash and boot from the network.</p>`) {
		t.Error("the runbook list lacks the description")
	}
	id := rb["uuid"].(string)
	form.Set("csrf", mia.csrf)
	form.Set("description", "")
	if st, _, _ := mia.do("POST", "/runbooks/"+id+"/edit", form); st != 303 {
		t.Fatalf("edit: %d", st)
	}
	if _, rb := env.runbook(id); rb["description"] != nil {
		t.Errorf("the description stayed: %v", rb["description"])
	}
	if _, page, _ = mia.do("GET", "/runbooks", nil); strings.Contains(page, "runbook-description") {
		t.Error("the list still shows a removed description")
	}
}

// Delete asks first (the form's data-confirm names the runbook), goes
// through the API's service (404/403 as the API answers, audited), and
// comes back to the list with a flash. Other projects and members get
// nothing, and forged owner and public fields are ignored.
func TestRunbookEditorDeleteAndHostile(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	forged := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_BLUE"}, "owner": {"green"}, "public": {"true"}}, []string{"power.power_on"})
	if st, _, _ := mia.do("POST", "/runbooks/new", forged); st != 303 {
		t.Fatalf("create: %d", st)
	}
	_, rb := env.runbook("CUSTOM_BLUE")
	if rb["owner"] != "blue" || rb["public"] != false {
		t.Errorf("a project manager's forged owner/public took: owner %v public %v", rb["owner"], rb["public"])
	}
	id := rb["uuid"].(string)

	gina := env.signIn("gina")
	gina.do("GET", "/nodes", nil)
	edit := rows(url.Values{"csrf": {gina.csrf}, "name": {"CUSTOM_GREEN"}}, []string{"power.power_off"})
	for _, r := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/runbooks/CUSTOM_BLUE/edit", nil}, {"GET", "/runbooks/" + id + "/edit", nil},
		{"POST", "/runbooks/" + id + "/edit", edit}, {"POST", "/runbooks/" + id + "/delete", url.Values{"csrf": {gina.csrf}}},
		{"POST", "/runbooks/CUSTOM_BLUE/delete", url.Values{"csrf": {gina.csrf}}},
	} {
		if st, page, _ := gina.do(r.method, r.path, r.form); st != 404 || strings.Contains(page, "blue") {
			t.Errorf("another project's manager: %s %s: %d", r.method, r.path, st)
		}
	}
	mo := env.signIn("mo")
	_, page, _ := mo.do("GET", "/runbooks", nil)
	if strings.Contains(page, "/delete") {
		t.Error("a member is offered Delete")
	}
	if st, page, _ := mo.do("POST", "/runbooks/"+id+"/delete", url.Values{"csrf": {mo.csrf}}); st != 403 || !strings.Contains(page, "baremetal:runbook:delete") || !strings.Contains(page, "member of blue") {
		t.Errorf("a member deleting: %d, without the reason", st)
	}
	if st, _, _ := mo.do("POST", "/runbooks/"+id+"/edit", rows(url.Values{"csrf": {mo.csrf}, "name": {"CUSTOM_BLUE"}}, []string{"power.power_off"})); st != 403 {
		t.Errorf("a member saving: %d", st)
	}
	if st, _ := env.runbook(id); st != 200 {
		t.Fatal("the runbook went")
	}
	// A forged owner on edit changes nothing either.
	mia.do("GET", "/runbooks/"+id+"/edit", nil)
	if st, _, _ := mia.do("POST", "/runbooks/"+id+"/edit", rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_BLUE"}, "owner": {"green"}, "public": {"true"}}, []string{"power.power_off"})); st != 303 {
		t.Errorf("edit: %d", st)
	}
	if _, rb := env.runbook(id); rb["owner"] != "blue" || rb["public"] != false {
		t.Errorf("after a forged edit: owner %v public %v", rb["owner"], rb["public"])
	}

	// Without the CSRF token nothing happens; with it the runbook goes.
	_, page, _ = mia.do("GET", "/runbooks/"+id+"/edit", nil)
	if !strings.Contains(page, `data-confirm="Delete runbook CUSTOM_BLUE? Nodes can no longer run it`) {
		t.Error("Delete does not ask first, naming the runbook")
	}
	if st, _, _ := mia.do("POST", "/runbooks/"+id+"/delete", url.Values{}); st != 403 {
		t.Errorf("delete without the CSRF token: %d", st)
	}
	st, _, h := mia.do("POST", "/runbooks/"+id+"/delete", url.Values{"csrf": {mia.csrf}})
	if st != 303 || h.Get("Location") != "/runbooks" {
		t.Fatalf("delete: %d %s", st, h.Get("Location"))
	}
	if _, page, _ := mia.do("GET", "/runbooks", nil); !strings.Contains(page, "Deleted runbook CUSTOM_BLUE.") {
		t.Error("no flash after deleting")
	}
	if st, _ := env.runbook(id); st != 404 {
		t.Errorf("after delete the API answers %d", st)
	}
	ctx := context.Background()
	if n := env.srv.DB.AuditEvent.Query().Where(auditevent.Rule("baremetal:runbook:delete"), auditevent.TargetID(id), auditevent.Result("allowed")).CountX(ctx); n != 1 {
		t.Errorf("%d audit records of the delete", n)
	}
	// Replayed: the runbook is gone.
	if st, _, _ := mia.do("POST", "/runbooks/"+id+"/delete", url.Values{"csrf": {mia.csrf}}); st != 404 {
		t.Errorf("a replayed delete: %d", st)
	}
}

// between is s from the first start to the next end after it.
func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}

// A step's arguments are the run's to check, so the API stores a runbook
// whatever they are; the editor shows each argument problem next to its
// field first ("nothing was saved yet"), and saves on "Save anyway".
// What the form cannot type (a number that is not one) still blocks.
func TestRunbookEditorWarnsOfArgumentsThenSavesAnyway(t *testing.T) {
	env := newEditorEnv(t)
	mia := env.signIn("mia")
	mia.do("GET", "/runbooks/new", nil)
	form := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_LATER"}},
		[]string{"power.power_on"},
		[]string{"management.set_boot_device"}, // device left out
		[]string{"deploy.wait", "seconds=90000"},
	)
	st, page, _ := mia.do("POST", "/runbooks/new", form)
	if st != 400 {
		t.Fatalf("first save: %d", st)
	}
	summary := between(page, `data-testid="error-summary"`, "</div>")
	for _, want := range []string{"2 argument problems: nothing was saved yet", `href="#s1-a-device">Step 2: step management.set_boot_device needs argument &#34;device&#34;`,
		`href="#s2-a-seconds">Step 3: argument seconds must be a whole number of seconds from 0 to 86400`, `data-testid="save-anyway-why"`} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	if !strings.Contains(page, `value="save-anyway"`) {
		t.Error("no Save anyway button")
	}
	if st, _ := env.runbook("CUSTOM_LATER"); st != 404 {
		t.Error("saved before Save anyway")
	}
	form.Set("csrf", mia.csrf)
	form.Set("op", "save-anyway")
	if st, page, _ := mia.do("POST", "/runbooks/new", form); st != 303 {
		t.Fatalf("save anyway: %d\n%s", st, between(page, `data-testid="error-summary"`, "</div>"))
	}
	_, rb := env.runbook("CUSTOM_LATER")
	if st := rb["steps"].([]any); len(st) != 3 || fmt.Sprint(st[2].(map[string]any)["args"]) != "map[seconds:90000]" {
		t.Errorf("stored steps %v", rb["steps"])
	}
	// A value the form cannot type blocks even Save anyway.
	form = rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_NEVER"}, "op": {"save-anyway"}}, []string{"deploy.wait", "seconds=ten"})
	st, page, _ = mia.do("POST", "/runbooks/new", form)
	if summary := between(page, `data-testid="error-summary"`, "</div>"); st != 400 || !strings.Contains(summary, "1 problem: nothing was saved") || !strings.Contains(summary, "must be a whole number.") {
		t.Errorf("an untypable value with Save anyway: %d\n%s", st, summary)
	}
	if st, _ := env.runbook("CUSTOM_NEVER"); st != 404 {
		t.Error("an untypable value was saved")
	}
}

// TestEditorNamesRunbooksAsTraits: the editor gates a runbook by its
// name, so a name no node can carry as a trait is refused with the
// custom trait it could be, and nothing is saved; the suggested name
// saves. On both databases.
func TestEditorNamesRunbooksAsTraits(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		env := newEditorEnvOn(t, setting)
		mia := env.signIn("mia")
		for name, want := range map[string]string{
			"BLUE_BURNIN": "such as CUSTOM_BLUE_BURNIN",
			"blue-burnin": "such as CUSTOM_BLUE_BURNIN",
		} {
			st, page, _ := mia.do("POST", "/runbooks/new", rows(url.Values{"csrf": {mia.csrf}, "name": {name}}, []string{"power.power_on"}))
			if st != 400 || !strings.Contains(html.UnescapeString(page), want) || !strings.Contains(page, "no node could run this runbook") {
				t.Errorf("saving %q: %d, want 400 saying %q", name, st, want)
			}
			if st, _, _ := mia.do("GET", "/runbooks/"+name+"/edit", nil); st != 404 {
				t.Errorf("runbook %q was saved anyway: %d", name, st)
			}
		}
		st, _, h := mia.do("POST", "/runbooks/new", rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_BLUE_BURNIN"}}, []string{"power.power_on"}))
		if st != 303 || !strings.HasPrefix(h.Get("Location"), "/runbooks?saved=") {
			t.Fatalf("saving the suggested name: %d %s", st, h.Get("Location"))
		}
	})
}
