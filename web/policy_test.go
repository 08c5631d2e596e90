package web_test

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	st, page = root.upload("apply", broken)
	if st != 400 || !strings.Contains(page, "PO (broken): ") {
		t.Errorf("apply of a broken zip: %d, status shown: %v", st, strings.Contains(page, "PO (broken)"))
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
	st, page = root.upload("apply", good)
	if st != 200 || !strings.Contains(page, "Stored as revision") || !strings.Contains(page, "PO: 1 file(s)") {
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
