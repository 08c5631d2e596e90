package web_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestThrottleSharedAddressHTTP: an attacker spraying 100 wrong passwords
// from one address, half at the portal's sign-in and half as HTTP Basic
// on the API, at lee and at guessed names, does not lock out sam behind
// the same address: sam's right password signs in both ways, while lee
// stays refused from there both ways.
func TestThrottleSharedAddressHTTP(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		for _, u := range []string{"lee", "sam"} {
			if err := srv.IDs.CreateUser(ctx, u, u+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u, identity.Assignment{Scope: identity.Scope{Project: "blue"}, Role: "member"}); err != nil {
				t.Fatal(err)
			}
		}
		portal := func(name, pw string) int {
			b := newBrowser(t, srv.URL)
			b.do("GET", "/login", nil)
			st, _, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {name}, "password": {pw}})
			return st
		}
		basic := func(name, pw string) int {
			c := srv.Client()
			c.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(name+":"+pw)))
			return c.Do(t, "GET", "/v1/nodes", nil).Status
		}
		for i := range 100 {
			name := "lee"
			if i%4 != 0 {
				name = fmt.Sprintf("guess-%d", i)
			}
			try := portal
			if i%2 == 1 {
				try = basic
			}
			if st := try(name, "wrong-password"); st != 401 && st != 403 && st != 429 {
				t.Fatalf("wrong password %d for %s: %d", i, name, st)
			}
		}
		if st := portal("sam", "sam-password-1"); st != 303 {
			t.Errorf("sam signs in at the portal from the sprayed address: %d, want 303", st)
		}
		if st := basic("sam", "sam-password-1"); st != 200 {
			t.Errorf("sam's Basic request from the sprayed address: %d, want 200", st)
		}
		if st := portal("lee", "lee-password-1"); st != 429 {
			t.Errorf("lee signs in at the portal from the address that attacked it: %d, want 429", st)
		}
		if st := basic("lee", "lee-password-1"); st != 429 {
			t.Errorf("lee's Basic request from the address that attacked it: %d, want 429", st)
		}
	})
}
