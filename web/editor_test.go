package web_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func TestRunbookEditor(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	ctx := context.Background()
	for _, u := range []struct {
		name  string
		scope identity.Scope
		role  string
	}{{"mia", identity.Scope{Project: "blue"}, "manager"}, {"mo", identity.Scope{Project: "blue"}, "member"}, {"sam", identity.Scope{System: true}, "manager"}} {
		srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1")
		srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: u.scope, Role: u.role})
	}
	signIn := func(user string) *browser {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {user}, "password": {user + "-password-1"}})
		return b
	}
	if st, _, _ := signIn("mo").do("GET", "/runbooks/new", nil); st != 403 {
		t.Errorf("a project member opened the editor: %d", st)
	}
	mia := signIn("mia")
	if st, page, _ := mia.do("GET", "/runbooks/new", nil); st != 200 || strings.Contains(page, "Public (every project") {
		t.Fatalf("editor for a project manager: %d (must not offer publishing)", st)
	}
	form := url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_FW_BLUE"},
		"order": {"1", "2", "3", ""}, "step": {"power.power_off", "management.set_boot_device", "power.power_on", ""},
		"args": {"", `{"device": "floppy"}`, "", ""}}
	st, page, _ := mia.do("POST", "/runbooks/new", form)
	if st != 400 || !strings.Contains(page, `data-testid="step-error-1"`) || !strings.Contains(page, "device") {
		t.Fatalf("bad argument: %d, error not next to row 2:\n%s", st, page)
	}
	form.Set("csrf", mia.csrf)
	form["args"] = []string{"", `{"device": "pxe"}`, "", ""}
	form["order"] = []string{"2", "1", "3", ""} // reorder: boot device first, then off, then on
	st, _, h := mia.do("POST", "/runbooks/new", form)
	if st != 303 || !strings.HasPrefix(h.Get("Location"), "/runbooks?saved=") {
		t.Fatalf("save: %d %s", st, h.Get("Location"))
	}
	_, page, _ = mia.do("GET", h.Get("Location"), nil)
	if !strings.Contains(page, "Saved CUSTOM_FW_BLUE: private to project blue") {
		t.Errorf("the saved runbook's visibility is not said")
	}
	row := page[strings.Index(page, `data-runbook="CUSTOM_FW_BLUE"`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "project blue") || strings.Index(row, "set_boot_device") > strings.Index(row, "power_off") || strings.Index(row, "power_off") > strings.Index(row, "power_on") {
		t.Errorf("saved runbook row: %s", row)
	}

	// A system manager publishes it; the owner clears.
	sam := signIn("sam")
	_, page, _ = sam.do("GET", "/runbooks/CUSTOM_FW_BLUE/edit", nil)
	if !strings.Contains(page, "Public (every project") {
		t.Fatal("the system manager is not offered publishing")
	}
	pub := url.Values{"csrf": {sam.csrf}, "name": {"CUSTOM_FW_BLUE"}, "public": {"true"}, "owner": {"blue"},
		"order": {"1", "2", "3"}, "step": {"management.set_boot_device", "power.power_off", "power.power_on"}, "args": {`{"device":"pxe"}`, "", ""}}
	if st, _, _ := sam.do("POST", "/runbooks/CUSTOM_FW_BLUE/edit", pub); st != 303 {
		t.Fatalf("publish: %d", st)
	}
	api := srv.Client()
	tok, _, _ := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "sam", Scope: identity.Scope{System: true}, Roles: []string{"manager"}})
	api.Header.Set("X-Auth-Token", tok)
	rb := api.Do(t, "GET", "/v1/runbooks/CUSTOM_FW_BLUE", nil).JSON(t)
	if rb["public"] != true || rb["owner"] != nil {
		t.Errorf("after publishing: public %v owner %v", rb["public"], rb["owner"])
	}
	// "New runbook" as the system: Public and Owner take effect at once,
	// and the page says what resulted.
	for _, c := range []struct{ public, owner, want string }{
		{"true", "", "public — every project"},
		{"", "green", "private to project green"},
	} {
		name := "CUSTOM_NEW_" + strings.ToUpper(c.owner+c.public)
		form := url.Values{"csrf": {sam.csrf}, "name": {name}, "public": {c.public}, "owner": {c.owner},
			"order": {"1"}, "step": {"power.power_on"}, "args": {""}}
		st, _, h := sam.do("POST", "/runbooks/new", form)
		if st != 303 {
			t.Fatalf("create %s: %d", name, st)
		}
		if _, page, _ := sam.do("GET", h.Get("Location"), nil); !strings.Contains(page, c.want) {
			t.Errorf("create %s: the page does not say %q", name, c.want)
		}
		rb := api.Do(t, "GET", "/v1/runbooks/"+name, nil).JSON(t)
		if fmt.Sprint(rb["public"]) != fmt.Sprint(c.public == "true") || (c.owner != "" && rb["owner"] != c.owner) {
			t.Errorf("create %s: public %v owner %v", name, rb["public"], rb["owner"])
		}
	}
	// The project manager can no longer edit a public runbook.
	if st, _, _ := mia.do("GET", "/runbooks/CUSTOM_FW_BLUE/edit", nil); st != 403 {
		t.Errorf("project manager editing a public runbook: %d", st)
	}
}
