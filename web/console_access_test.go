package web_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestConsoleClosesWhenAccessEnds: a lessee's member watching a node's
// serial console (ipmi_sim with SOL; a policy.d rule lets the lessee's
// members open it) loses the socket within 5 s, with a close frame
// saying why, when its role is revoked, when its account is deleted,
// when it signs out elsewhere, and when the node's lease changes. On
// both databases.
func TestConsoleClosesWhenAccessEnds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartSOL(t)
		pdir := t.TempDir()
		rule := `"baremetal:node:get_console": "rule:system_member_or_owner_member or rule:lessee_member"` + "\n"
		if err := os.WriteFile(filepath.Join(pdir, "10-lessee-console.yaml"), []byte(rule), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := server.Options{Database: setting, PolicyDir: pdir, PolicyOverrideEnabled: true,
			Conductor: conductor.Config{BMC: bmc.Options{Timeout: 5 * time.Second, Retries: -1}}}
		opts.Conductor.Console.PortMin = 20000 + int(time.Now().UnixNano()%10000)
		opts.Conductor.Console.PortMax = opts.Conductor.Console.PortMin + 50
		srv := servertest.Start(t, opts)
		ctx := context.Background()
		lessee := identity.Assignment{Scope: identity.Scope{Project: "les"}, Role: "member"}
		for user, a := range map[string]identity.Assignment{
			"root": {Scope: identity.Scope{System: true}, Role: "admin"},
			"gil":  lessee, "lee": lessee, "liz": lessee, "lou": lessee,
		} {
			if err := srv.IDs.CreateUser(ctx, user, user+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, user, a); err != nil {
				t.Fatal(err)
			}
		}
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		api := srv.Client()
		api.Header.Set("X-Auth-Token", tok)
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sol-access", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password),
			"console_interface": "ipmitool-socat", "owner": "own", "lessee": "les"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}); r.Status != 202 {
			t.Fatalf("enable: %d %s", r.Status, r.Body)
		}
		for deadline := time.Now().Add(10 * time.Second); api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["console_enabled"] != true; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("console not enabled")
			}
		}

		wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/nodes/" + id + "/console/ws"
		// open opens the console as user, as its browser does.
		open := func(user string) (*browser, *websocket.Conn) {
			t.Helper()
			b := signInAs(t, srv, user)
			h := http.Header{"Cookie": {"anvil_session=" + b.cookie()}, "Origin": {srv.URL}}
			ws, resp, err := websocket.DefaultDialer.Dial(wsURL, h)
			if err != nil {
				st := 0
				if resp != nil {
					st = resp.StatusCode
				}
				t.Fatalf("%s opening the console: %d %v", user, st, err)
			}
			t.Cleanup(func() { ws.Close() })
			return b, ws
		}
		// closes waits up to 5 s from now for the socket's close frame
		// and checks its reason, and its code unless code is 0.
		closes := func(what string, ws *websocket.Conn, code int, reason string) {
			t.Helper()
			_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				_, _, err := ws.ReadMessage()
				if err == nil {
					continue // the machine's output
				}
				var ce *websocket.CloseError
				if !errors.As(err, &ce) {
					t.Errorf("%s: the socket did not close with a close frame within 5 s: %v", what, err)
				} else if code != 0 && ce.Code != code || ce.Text != reason {
					t.Errorf("%s: closed with %d %q; want %d %q", what, ce.Code, ce.Text, code, reason)
				}
				return
			}
		}

		_, ws := open("gil")
		if err := srv.IDs.Revoke(ctx, "gil", lessee); err != nil {
			t.Fatal(err)
		}
		closes("revoking the role", ws, websocket.ClosePolicyViolation, "your access to this node's console was revoked")

		_, ws = open("lee")
		if err := srv.IDs.DeleteUser(ctx, "lee"); err != nil {
			t.Fatal(err)
		}
		closes("deleting the account", ws, websocket.ClosePolicyViolation, "your account was deleted")

		liz, ws := open("liz")
		if st, _, _ := liz.do("POST", "/logout", map[string][]string{"csrf": {liz.csrf}}); st != 303 {
			t.Fatalf("sign out: %d", st)
		}
		closes("signing out", ws, websocket.ClosePolicyViolation, "your session ended")

		// A change of lease also turns the console off: the conductor's
		// end or the next check closes the socket, saying why either way.
		_, ws = open("lou")
		if r := api.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/lessee", "value": "les-2"}}); r.Status != 200 {
			t.Fatalf("patch: %d %s", r.Status, r.Body)
		}
		closes("changing the lease", ws, 0, "the node's lease changed")
	})
}
