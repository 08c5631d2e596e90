package web_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func zipOf(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for n, b := range files {
		f, _ := w.Create(n)
		f.Write([]byte(b))
	}
	w.Close()
	return buf.Bytes()
}

// upload posts a zip to the policy page as the browser's form would.
func (b *browser) upload(action string, data []byte) (int, string) {
	b.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("csrf", b.csrf)
	mw.WriteField("action", action)
	fw, _ := mw.CreateFormFile("zip", "override.zip")
	fw.Write(data)
	mw.Close()
	req, _ := http.NewRequest("POST", b.base+"/admin/policy", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if m := csrfField.FindStringSubmatch(string(raw)); m != nil {
		b.csrf = m[1]
	}
	return resp.StatusCode, string(raw)
}

var hiddenField = regexp.MustCompile(`<input type="hidden" name="(zip|base|token)" value="([^"]*)"`)

// applyForm is the Apply form a preview page shows, as it is.
func (b *browser) applyForm(page string) url.Values {
	form := url.Values{"csrf": {b.csrf}}
	for _, m := range hiddenField.FindAllStringSubmatch(page[strings.Index(page, `action="/admin/policy/apply"`):], 3) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	return form
}

// applyPreviewed submits the Apply form a preview page shows, as it is,
// and follows the redirect.
func (b *browser) applyPreviewed(page string) (int, string) {
	b.t.Helper()
	st, body, h := b.do("POST", "/admin/policy/apply", b.applyForm(page))
	if st != 303 {
		return st, body
	}
	st, body, _ = b.do("GET", h.Get("Location"), nil)
	return st, body
}

func TestAdminPolicyPage(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), PolicyOverrideEnabled: true, PolicyDir: filepath.Join(t.TempDir(), "policy.d")})
	ctx := context.Background()
	for _, u := range []struct {
		name  string
		scope identity.Scope
		role  string
	}{{"root", identity.Scope{System: true}, "admin"}, {"sue", identity.Scope{System: true}, "reader"}, {"pam", identity.Scope{Project: "p"}, "admin"}} {
		srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1")
		srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: u.scope, Role: u.role})
	}
	signIn := func(user string) *browser {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}})
		return b
	}
	root := signIn("root")
	st, page, _ := root.do("GET", "/admin/policy", nil)
	if st != 200 || !strings.Contains(page, `data-rule="baremetal:node:set_power_state"`) || !strings.Contains(page, "Preview") {
		t.Fatalf("policy page: %d", st)
	}
	if st, _, _ := signIn("pam").do("GET", "/admin/policy", nil); st != 403 {
		t.Errorf("a project admin got %d for the policy page", st)
	}
	if _, page, _ := signIn("sue").do("GET", "/admin/policy", nil); strings.Contains(page, "Upload an override") {
		t.Error("a system reader is offered the upload form")
	}

	broken := zipOf(t, map[string]string{"p.yaml": `"baremetal:node:get": "role:admin and ("`})
	st, page = root.upload("preview", broken)
	if st != 400 || !strings.Contains(page, "Would be refused") {
		t.Errorf("preview of a broken zip: %d", st)
	}
	if strings.Contains(page, `action="/admin/policy/apply"`) {
		t.Error("a refused preview offers Apply")
	}
	good := zipOf(t, map[string]string{"etc/10-power.yaml": `"baremetal:node:set_power_state": "rule:system_member"`})
	st, page = root.upload("preview", good)
	if st != 200 || !strings.Contains(page, "baremetal:node:set_power_state") || !strings.Contains(page, `data-testid="preview"`) {
		t.Errorf("preview of a good zip: %d", st)
	}
	// Narrowing a rule is no widening; widening one names who gains; a
	// base rule is refused by name.
	if strings.Contains(page, `data-testid="preview-widens"`) {
		t.Error("a narrowing preview is marked as widening")
	}
	st, page = root.upload("preview", zipOf(t, map[string]string{"w.yaml": `"baremetal:node:update:owner": "rule:system_member or role:member"`}))
	if st != 200 || !strings.Contains(page, `data-testid="preview-widens"`) || !strings.Contains(page, "WIDENS access for owner-admin, owner-manager, owner-member, lessee-admin") {
		t.Errorf("preview of a widening zip: %d", st)
	}
	st, page = root.upload("preview", zipOf(t, map[string]string{"b.yaml": `"system_member": "@"`}))
	if st != 400 || !strings.Contains(page, "system_member") || !strings.Contains(page, "base rule") {
		t.Errorf("preview of a base-rule override: %d", st)
	}
	_, page = root.upload("preview", good)
	if st, page := root.applyPreviewed(page); st != 200 || !strings.Contains(page, "Stored as revision 1;") || !strings.Contains(page, "PO: 1 file(s)") {
		t.Fatalf("apply of a good zip: %d\n%s", st, page)
	}
	// The matrix shows the new decision: lessee members may no longer power.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, page, _ = root.do("GET", "/admin/policy", nil)
		row := page[strings.Index(page, `data-rule="baremetal:node:set_power_state"`):]
		row = row[:strings.Index(row, "</tr>")]
		// System admin and member, and the elevated service project's
		// service user, whom rule:service_role makes a system member.
		if strings.Count(row, ">allow<") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("matrix row after the override: %s", row)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What if: a lessee member of the node's lessee project, on a real node.
	tok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	api := srv.Client()
	api.Header.Set("X-Auth-Token", tok)
	api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "wi-1", "driver": "fake", "owner": "own", "lessee": "les"})
	_, page, _ = root.do("GET", "/admin/policy?role=member&scope=project&project=les&node=wi-1", nil)
	wi := page[strings.Index(page, `data-testid="whatif"`):]
	allowed := wi[:strings.Index(wi, "<details>")]
	if !strings.Contains(allowed, "baremetal:node:get<") || !strings.Contains(allowed, "baremetal:node:set_provision_state:runbook<") ||
		strings.Contains(allowed, "baremetal:node:set_power_state<") || strings.Contains(allowed, "baremetal:node:update:owner<") {
		t.Errorf("what-if for a lessee member (power overridden to system only):\n%s", allowed)
	}
	if _, page, _ = root.do("GET", "/admin/policy?role=member&scope=project&project=les&node=nope", nil); !strings.Contains(page, "could not be found") {
		t.Error("what-if on a missing node does not say so")
	}
	if st, body, _ := root.do("GET", "/admin/policy/current.zip", nil); st != 200 || !strings.HasPrefix(body, "PK") {
		t.Errorf("current.zip: %d", st)
	}
}

// TestPolicyRevisions: Apply stores exactly the previewed files, and only
// against the revision previewed; an older revision is restored as a new
// one, and "Revert to defaults" stores an empty one, each audited.
func TestPolicyRevisions(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), PolicyOverrideEnabled: true, PolicyDir: filepath.Join(t.TempDir(), "policy.d")})
	ctx := context.Background()
	for _, u := range []struct {
		name, role string
	}{{"root", "admin"}, {"sue", "reader"}} {
		srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1")
		srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: identity.Scope{System: true}, Role: u.role})
	}
	signIn := func(user string) *browser {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}})
		b.do("GET", "/admin/policy", nil)
		return b
	}
	root := signIn("root")
	stored := func() map[int64]map[string]string {
		out := map[int64]map[string]string{}
		rs, err := srv.DB.PolicyOverride.Query().All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			out[r.Revision] = r.Files
		}
		return out
	}
	power := map[string]string{"power.yaml": `"baremetal:node:set_power_state": "rule:system_member"`}
	owner := map[string]string{"owner.yaml": `"baremetal:node:update:owner": "rule:system_admin"`}
	for i, files := range []map[string]string{power, owner} {
		_, page := root.upload("preview", zipOf(t, files))
		if st, page := root.applyPreviewed(page); st != 200 || !strings.Contains(page, fmt.Sprintf("Stored as revision %d;", i+1)) {
			t.Fatalf("apply %d: %d\n%s", i+1, st, page)
		}
	}

	// Apply stores only what this session previewed: other bytes under
	// the previewed signature, a zip never previewed with a digest made
	// by hand, the signature with another base, and another session's or
	// user's preview are all refused, and nothing is stored.
	_, previewed := root.upload("preview", zipOf(t, power))
	notPreviewed := "This upload was not previewed; upload it again"
	forged := zipOf(t, owner)
	sum := sha256.Sum256(forged)
	for name, form := range map[string]url.Values{
		"other bytes":  {"zip": {base64.StdEncoding.EncodeToString(forged)}},
		"hand digest":  {"zip": {base64.StdEncoding.EncodeToString(forged)}, "token": {hex.EncodeToString(sum[:])}, "digest": {hex.EncodeToString(sum[:])}},
		"no signature": {"token": {""}},
		"other base":   {"base": {"1"}},
	} {
		f := root.applyForm(previewed)
		for k, v := range form {
			f[k] = v
		}
		if st, page, _ := root.do("POST", "/admin/policy/apply", f); st != 400 || !strings.Contains(page, notPreviewed) {
			t.Errorf("apply, %s: %d", name, st)
		}
	}
	// The same admin in another browser, and another admin, replaying
	// the form root's preview showed.
	root2 := signIn("root")
	srv.IDs.CreateUser(ctx, "ada", "ada-password-1")
	srv.IDs.Grant(ctx, "ada", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	ada := signIn("ada")
	for _, b := range []*browser{root2, ada} {
		f := root.applyForm(previewed)
		f.Set("csrf", b.csrf)
		if st, page, _ := b.do("POST", "/admin/policy/apply", f); st != 400 || !strings.Contains(page, notPreviewed) {
			t.Errorf("apply of root's preview from another session: %d", st)
		}
	}
	if got := stored(); len(got) != 2 {
		t.Fatalf("refused applies stored revisions: %v", got)
	}
	// A preview made before another apply is refused: its diff is stale;
	// so is a second apply of the same preview.
	_, stale := root.upload("preview", zipOf(t, power))
	_, fresh := root.upload("preview", zipOf(t, map[string]string{"x.yaml": `"baremetal:node:get": "rule:system_reader"`}))
	if st, _ := root.applyPreviewed(fresh); st != 200 {
		t.Fatalf("apply: %d", st)
	}
	if st, page := root.applyPreviewed(stale); st != 409 || !strings.Contains(page, "revision 3 now, not 2") {
		t.Errorf("apply of a stale preview: %d", st)
	}
	if st, page := root.applyPreviewed(fresh); st != 409 || !strings.Contains(page, "revision 3 now, not 2") {
		t.Errorf("a second apply of one preview: %d", st)
	}
	if got := stored(); len(got) != 3 || got[3]["x.yaml"] == "" {
		t.Fatalf("stored revisions: %v", got)
	}

	// Restore revision 1: stored again as revision 4, the policy follows.
	_, page, _ := root.do("GET", "/admin/policy", nil)
	if !strings.Contains(page, `data-revision="3"`) || !strings.Contains(page, "Restore revision 1 (power.yaml)? It is stored as revision 4") {
		t.Fatalf("revision list:\n%s", page)
	}
	if st, _, _ := root.do("POST", "/admin/policy/revisions/1/restore", url.Values{"csrf": {root.csrf}, "base": {"2"}}); st != 409 {
		t.Errorf("restore against a stale revision: %d", st)
	}
	sue := signIn("sue")
	if st, _, _ := root.do("POST", "/admin/policy/revisions/99/restore", url.Values{"csrf": {root.csrf}, "base": {"3"}}); st != 404 {
		t.Errorf("restore of a missing revision: %d", st)
	}
	if st, _, _ := sue.do("POST", "/admin/policy/revisions/1/restore", url.Values{"csrf": {sue.csrf}, "base": {"3"}}); st != 403 {
		t.Errorf("a system reader's restore: %d", st)
	}
	st, _, h := root.do("POST", "/admin/policy/revisions/1/restore", url.Values{"csrf": {root.csrf}, "base": {"3"}})
	if st != 303 || h.Get("Location") != "/admin/policy" {
		t.Fatalf("restore: %d", st)
	}
	_, page, _ = root.do("GET", "/admin/policy", nil)
	if !strings.Contains(page, "Stored as revision 4 (restore of revision 1)") || !strings.Contains(page, "PO: 1 file(s) in force (power.yaml)") {
		t.Errorf("after restore:\n%s", page)
	}
	if got := stored(); len(got) != 4 || got[4]["power.yaml"] != power["power.yaml"] || len(got[4]) != 1 {
		t.Fatalf("revision 4 is not revision 1's files: %v", got[4])
	}

	// Revert to defaults: an empty revision 5.
	if st, _, _ := root.do("POST", "/admin/policy/revert", url.Values{"csrf": {root.csrf}}); st != 400 {
		t.Errorf("revert without its base: %d", st)
	}
	if st, _, _ := root.do("POST", "/admin/policy/revert", url.Values{"csrf": {root.csrf}, "base": {"4"}}); st != 303 {
		t.Fatalf("revert: %d", st)
	}
	_, page, _ = root.do("GET", "/admin/policy", nil)
	if !strings.Contains(page, "PO: no override files; defaults in force") || strings.Contains(page, ">overridden<") || strings.Contains(page, "Revert to defaults</button>") {
		t.Errorf("after revert:\n%s", page)
	}
	if got := stored(); len(got[5]) != 0 || len(got) != 5 {
		t.Errorf("revision 5: %v", got[5])
	}
	var hows []string
	for _, e := range srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:policy:update")).AllX(ctx) {
		if h, ok := e.Detail["how"].(string); ok && e.Result == "allowed" {
			hows = append(hows, h)
		}
	}
	if strings.Join(hows, "; ") != "restore of revision 1; revert to defaults" {
		t.Errorf("audited changes: %q", hows)
	}
}

// TestPolicyOverridesDisabled: with overrides off (the default), the page
// says so instead of a blank status, and a preview offers no Apply, saying
// why; an Apply posted anyway is refused and stores nothing, since it
// would take effect unreviewed the moment overrides were enabled.
func TestPolicyOverridesDisabled(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	root := newBrowser(t, srv.URL)
	root.do("GET", "/login", nil)
	root.do("POST", "/login", url.Values{"csrf": {root.csrf}, "username": {"root"}, "password": {"root-password-1"}})
	_, page, _ := root.do("GET", "/admin/policy", nil)
	if !strings.Contains(page, `data-testid="policy-page-status">Overrides are disabled on this server`) || !strings.Contains(page, "--policy-override-enabled") {
		t.Errorf("policy page status with overrides disabled:\n%s", page)
	}
	_, page = root.upload("preview", zipOf(t, map[string]string{"p.yaml": `"baremetal:node:set_power_state": "rule:system_member"`}))
	if !strings.Contains(page, `data-testid="preview"`) || strings.Contains(page, `action="/admin/policy/apply"`) || !strings.Contains(page, "Apply is not offered: overrides are disabled") {
		t.Errorf("a preview with overrides disabled offers Apply:\n%s", page)
	}
	st, page, _ := root.do("POST", "/admin/policy/apply", url.Values{"csrf": {root.csrf}, "zip": {""}, "base": {"0"}, "token": {"x"}})
	if n, _ := srv.DB.PolicyOverride.Query().Count(ctx); st != 409 || !strings.Contains(page, "overrides are disabled on this server") || n != 0 {
		t.Errorf("apply with overrides disabled: %d\n%s", st, page)
	}
}

// TestPolicyPreviewAcrossProjects: a preview says what a rule not
// overridden falls back to instead of "", and marks in a warning style
// the changes that widen access across projects (another project's
// persona newly allowed, or project callers newly allowed a system-only
// rule), but not a widening within the node's own projects nor a
// narrowing; the matrix and rules table filter by rule name.
func TestPolicyPreviewAcrossProjects(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), PolicyOverrideEnabled: true, PolicyDir: filepath.Join(t.TempDir(), "policy.d")})
	ctx := context.Background()
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	root := newBrowser(t, srv.URL)
	root.do("GET", "/login", nil)
	root.do("POST", "/login", url.Values{"csrf": {root.csrf}, "username": {"root"}, "password": {"root-password-1"}})
	root.do("GET", "/admin/policy", nil)
	crossLine := regexp.MustCompile(`<li class="warn" data-cross-project><code>([^<]*)</code>`)
	crossed := func(page string) []string {
		var out []string
		for _, m := range crossLine.FindAllStringSubmatch(page, -1) {
			k, _, _ := strings.Cut(html.UnescapeString(m[1]), ": ")
			out = append(out, k)
		}
		return out
	}
	st, page := root.upload("preview", zipOf(t, map[string]string{"p.yaml": `"baremetal:node:set_power_state": "rule:system_or_owner_or_lessee_member or rule:owner_reader"
"baremetal:node:update:owner": "rule:system_member or rule:owner_member"
"baremetal:driver:ipa_lookup": "rule:system_admin"
`}))
	if st != 200 || !strings.Contains(page, `data-testid="preview"`) {
		t.Fatalf("preview: %d\n%s", st, page)
	}
	text := html.UnescapeString(page)
	for _, want := range []string{
		`baremetal:driver:ipa_lookup: (default, empty: anyone) -> "rule:system_admin"`,
		`baremetal:node:update:owner: (default: "rule:system_member") -> "rule:system_member or rule:owner_member"  WIDENS access for owner-admin`,
		`baremetal:node:set_power_state: (default: "rule:system_or_owner_or_lessee_member") -> "rule:system_or_owner_or_lessee_member or rule:owner_reader"  WIDENS access for owner-reader`,
		"1 change(s) widen access across projects",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the preview lacks %s", want)
		}
	}
	if got := crossed(page); !slices.Equal(got, []string{"baremetal:node:update:owner"}) {
		t.Errorf("marked across projects: %v, want only the owner rule", got)
	}
	_, page = root.upload("preview", zipOf(t, map[string]string{"p.yaml": `"baremetal:node:set_power_state": "role:member"`}))
	if got := crossed(page); !slices.Equal(got, []string{"baremetal:node:set_power_state"}) || !strings.Contains(page, "WIDENS access for other-") {
		t.Errorf("another project's members allowed: marked %v\n%s", got, page)
	}
	_, page = root.upload("preview", zipOf(t, map[string]string{"p.yaml": `"baremetal:node:set_power_state": "rule:system_member"`}))
	if strings.Contains(page, "data-cross-project") || strings.Contains(page, "preview-cross-project") {
		t.Errorf("a narrowing is marked across projects")
	}

	_, page, _ = root.do("GET", "/admin/policy?rules=POWER_STATE", nil)
	rows := regexp.MustCompile(`<tr data-rule="([^"]+)">`).FindAllStringSubmatch(page, -1)
	if len(rows) == 0 || !strings.Contains(page, `value="POWER_STATE"`) {
		t.Fatalf("filtered matrix: %d rows", len(rows))
	}
	for _, r := range rows {
		if !strings.Contains(r[1], "power_state") {
			t.Errorf("the filter keeps %s", r[1])
		}
	}
	if strings.Contains(page, "<code>baremetal:node:create</code>") {
		t.Error("the rules table is not filtered")
	}
}
