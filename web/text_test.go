package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPortalRefusesInvalidText: a portal form whose field, or JSON in a
// field (a custom step's arguments), holds a NUL or invalid UTF-8 is a
// 400 naming it on both databases, and nothing is saved; the portal
// calls the services directly, past the API's check.
func TestPortalRefusesInvalidText(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if err := srv.IDs.CreateUser(ctx, "sam", "sam-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "sam", identity.Assignment{Scope: identity.Scope{System: true}, Role: "manager"}); err != nil {
			t.Fatal(err)
		}
		sam := signInAs(t, srv, "sam")
		for _, c := range []struct {
			form  url.Values
			field string
		}{
			{rows(url.Values{"name": {"CUSTOM_NUL_ARGS"}}, []string{"other:deploy.erase_devices", `{"a":"x\u0000"}`}), "s0.json.a"},
			{rows(url.Values{"name": {"CUSTOM_NUL_KEY"}}, []string{"other:deploy.erase_devices", `{"a\u0000":"x"}`}), `s0.json.a\x00`},
			{rows(url.Values{"name": {"CUSTOM_NUL\x00"}}, []string{"power.power_on"}), "name"},
			{rows(url.Values{"name": {"CUSTOM_BAD_UTF8"}}, []string{"other:deploy.erase_devices", "{\"a\":\"\xff\"}"}), "s0.json "},
		} {
			c.form.Set("csrf", sam.csrf)
			st, page, _ := sam.do("POST", "/runbooks/new", c.form)
			if st != 400 || !strings.Contains(page, c.field) {
				t.Errorf("%v: %d, want a 400 naming %s", c.form, st, c.field)
			}
		}
		api := srv.Client()
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "sam", Scope: identity.Scope{System: true}, Roles: []string{"manager"}})
		if err != nil {
			t.Fatal(err)
		}
		api.Header.Set("X-Auth-Token", tok)
		if l, _ := api.Do(t, "GET", "/v1/runbooks", nil).JSON(t)["runbooks"].([]any); len(l) != 0 {
			t.Errorf("a refused form saved runbooks: %v", l)
		}
	})
}
