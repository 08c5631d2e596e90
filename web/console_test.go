package web_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestPortalConsole opens an ipmitool-socat console (ipmi_sim with SOL)
// through the portal's WebSocket: the owner's member sees the page and
// the machine's bytes both ways; a cross-origin upgrade, one without a
// session and one from the lessee (who does not pass get_console by
// default, as in Ironic) are refused; the lease's end closes the socket.
func TestPortalConsole(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartSOL(t)
		serial := sim.Serial(t)
		opts := server.Options{Database: setting, Conductor: conductor.Config{BMC: bmc.Options{Timeout: 5 * time.Second, Retries: -1}}}
		// A range few other programs use; a taken port is skipped.
		opts.Conductor.Console.PortMin = 20000 + int(time.Now().UnixNano()%10000)
		opts.Conductor.Console.PortMax = opts.Conductor.Console.PortMin + 50
		srv := servertest.Start(t, opts)
		ctx := context.Background()
		for user, a := range map[string]identity.Assignment{
			"root": {Scope: identity.Scope{System: true}, Role: "admin"},
			"pat":  {Scope: identity.Scope{Project: "own"}, Role: "member"},
			"gil":  {Scope: identity.Scope{Project: "les"}, Role: "member"},
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
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sol-web", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password),
			"console_interface": "ipmitool-socat", "owner": "own", "lessee": "les"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)

		pat := signInAs(t, srv, "pat")
		if st, body, _ := pat.do("GET", "/nodes/"+id+"/console", nil); st != 200 || !strings.Contains(body, "The console is off") {
			t.Fatalf("console page while off: %d", st)
		}
		if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}); r.Status != 202 {
			t.Fatalf("enable: %d %s", r.Status, r.Body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["console_enabled"] != true {
			if time.Now().After(deadline) {
				t.Fatal("console not enabled")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if st, body, _ := pat.do("GET", "/nodes/"+id, nil); st != 200 || !strings.Contains(body, "/nodes/"+id+"/console") {
			t.Errorf("node page lacks the console link: %d", st)
		}
		if st, body, _ := pat.do("GET", "/nodes/"+id+"/console", nil); st != 200 || !strings.Contains(body, `data-console="/nodes/`+id+`/console/ws"`) {
			t.Fatalf("console page: %d %s", st, body)
		}
		gil := signInAs(t, srv, "gil")
		if st, _, _ := gil.do("GET", "/nodes/"+id+"/console", nil); st != 403 {
			t.Errorf("lessee's console page: %d, want 403", st)
		}

		wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/nodes/" + id + "/console/ws"
		dial := func(cookie, origin string) (*websocket.Conn, int) {
			h := http.Header{}
			if cookie != "" {
				h.Set("Cookie", "anvil_session="+cookie)
			}
			if origin != "" {
				h.Set("Origin", origin)
			}
			c, resp, err := websocket.DefaultDialer.Dial(wsURL, h)
			if err != nil {
				if resp == nil {
					t.Fatal(err)
				}
				return nil, resp.StatusCode
			}
			t.Cleanup(func() { c.Close() })
			return c, 101
		}
		if _, st := dial(pat.cookie(), "http://evil.example"); st != 403 {
			t.Errorf("cross-origin upgrade: %d, want 403", st)
		}
		if _, st := dial(pat.cookie(), ""); st != 403 {
			t.Errorf("upgrade without Origin: %d, want 403", st)
		}
		if _, st := dial("", srv.URL); st == 101 {
			t.Error("upgrade without a session was accepted")
		}
		if _, st := dial(gil.cookie(), srv.URL); st != 403 {
			t.Errorf("lessee's upgrade: %d, want 403", st)
		}
		ws, st := dial(pat.cookie(), srv.URL)
		if st != 101 {
			t.Fatalf("owner's upgrade: %d", st)
		}

		// Typed in the browser, seen on the serial port, and back.
		bmctest.RoundTrip(t, "in the portal", bmctest.WebSocket(ws), serial, 15*time.Second)
		if r := api.Do(t, "GET", "/v1/events?rule=baremetal:node:get_console", nil); !strings.Contains(string(r.Body), id) {
			t.Errorf("the console's opening was not audited: %s", r.Body)
		}

		// The lease ends: the socket closes.
		if r := api.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/lessee"}}); r.Status != 200 {
			t.Fatalf("patch: %d %s", r.Status, r.Body)
		}
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				if strings.Contains(err.Error(), "timeout") {
					t.Fatalf("the socket stayed open after the lease ended: %v", err)
				}
				break
			}
		}
	})
}

// TestPortalConsoleSwitch turns an ipmitool-socat console (ipmi_sim with
// SOL) on and off from the portal's form: the owner's member may (the
// API then shows the console on, then off, and each change is audited);
// the lessee's member, who does not pass set_console_state by default,
// is told who may, refused with 403 and changes nothing; a project that
// cannot see the node gets 404; a bad value is a 400 naming the field.
func TestPortalConsoleSwitch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartSOL(t)
		opts := server.Options{Database: setting, Conductor: conductor.Config{BMC: bmc.Options{Timeout: 5 * time.Second, Retries: -1}}}
		opts.Conductor.Console.PortMin = 20000 + int(time.Now().UnixNano()%10000)
		opts.Conductor.Console.PortMax = opts.Conductor.Console.PortMin + 50
		srv := servertest.Start(t, opts)
		ctx := context.Background()
		for user, a := range map[string]identity.Assignment{
			"root": {Scope: identity.Scope{System: true}, Role: "admin"},
			"pat":  {Scope: identity.Scope{Project: "own"}, Role: "member"},
			"gil":  {Scope: identity.Scope{Project: "les"}, Role: "member"},
			"oz":   {Scope: identity.Scope{Project: "other"}, Role: "member"},
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
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sol-switch", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password),
			"console_interface": "ipmitool-socat", "owner": "own", "lessee": "les"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		enabled := func() any { return api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["console_enabled"] }
		// The users of the switch's audit events with this result.
		audited := func(result string) []any {
			evs := api.Do(t, "GET", "/v1/events?rule=baremetal:node:set_console_state&target_id="+id+"&result="+result, nil).JSON(t)["events"].([]any)
			var users []any
			for _, e := range evs {
				users = append(users, e.(map[string]any)["user"])
			}
			return users
		}
		form := func(b *browser, on, back string) url.Values {
			return url.Values{"csrf": {b.csrf}, "enabled": {on}, "back": {back}}
		}

		gil := signInAs(t, srv, "gil")
		if st, body, _ := gil.do("GET", "/nodes/"+id, nil); st != 200 || strings.Contains(body, `action="/nodes/`+id+`/console/state"`) ||
			!strings.Contains(body, "by rule baremetal:node:set_console_state") {
			t.Errorf("the lessee's node page offers the switch or does not say who may: %d", st)
		}
		if st, _, _ := gil.do("POST", "/nodes/"+id+"/console/state", form(gil, "yes", "")); st != 403 {
			t.Errorf("the lessee turned the console on: %d, want 403", st)
		}
		oz := signInAs(t, srv, "oz")
		if st, _, _ := oz.do("POST", "/nodes/"+id+"/console/state", form(oz, "yes", "")); st != 404 {
			t.Errorf("another project's member: %d, want 404", st)
		}
		if enabled() != false || len(audited("allowed")) != 0 {
			t.Fatalf("a refused switch changed the console (%v) or was audited as done", enabled())
		}
		if u := audited("denied"); !slices.Contains(u, any("gil")) {
			t.Errorf("the lessee's refusal was not audited: %v", u)
		}

		pat := signInAs(t, srv, "pat")
		if st, body, _ := pat.do("GET", "/nodes/"+id, nil); st != 200 || !strings.Contains(body, `action="/nodes/`+id+`/console/state"`) ||
			!strings.Contains(body, "Turn the console on") {
			t.Fatalf("the owner's node page lacks the switch: %d", st)
		}
		if st, body, _ := pat.do("POST", "/nodes/"+id+"/console/state", form(pat, "maybe", "")); st != 400 || !strings.Contains(body, "enabled") {
			t.Errorf("a bad value: %d, want 400 naming enabled", st)
		}
		st, _, h := pat.do("POST", "/nodes/"+id+"/console/state", form(pat, "yes", ""))
		if st != 303 || h.Get("Location") != "/nodes/"+id {
			t.Fatalf("turning on: %d to %q", st, h.Get("Location"))
		}
		if enabled() != true {
			t.Fatal("the console is not on after the form said so")
		}
		if _, body, _ := pat.do("GET", "/nodes/"+id, nil); !strings.Contains(body, "The console of sol-switch is on.") ||
			!strings.Contains(body, `data-console="/nodes/`+id+`/console/ws"`) || !strings.Contains(body, "xterm.min.js") {
			t.Errorf("the node page does not offer the terminal once the console is on")
		}
		st, _, h = pat.do("POST", "/nodes/"+id+"/console/state", form(pat, "no", "console"))
		if st != 303 || h.Get("Location") != "/nodes/"+id+"/console" {
			t.Fatalf("turning off: %d to %q", st, h.Get("Location"))
		}
		if enabled() != false {
			t.Fatal("the console is still on")
		}
		if u := audited("allowed"); len(u) != 2 || u[0] != "pat" || u[1] != "pat" {
			t.Errorf("audited switches by %v, want pat's two (on, off)", u)
		}

		// Ironic's fake console turns on too, with nothing to watch.
		r = api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "fake-console", "driver": "fake-hardware", "console_interface": "fake", "owner": "own"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		fake := r.JSON(t)["uuid"].(string)
		pat.do("GET", "/nodes/"+fake, nil)
		if st, _, _ := pat.do("POST", "/nodes/"+fake+"/console/state", form(pat, "yes", "")); st != 303 {
			t.Fatalf("turning the fake console on: %d", st)
		}
		if api.Do(t, "GET", "/v1/nodes/"+fake, nil).JSON(t)["console_enabled"] != true {
			t.Error("the fake console is not on")
		}
		if _, body, _ := pat.do("GET", "/nodes/"+fake, nil); !strings.Contains(body, "console interface (fake) has no stream") || strings.Contains(body, "data-console=") {
			t.Error("the node page offers a terminal for the fake console, or does not say why not")
		}
	})
}

// TestPortalConsoleOfImportedNode: a node enrolled without interfaces (the
// demo fleet, a CSV import) has its driver's default console, which the
// API reports (fake-hardware's is Ironic's fake console); the portal and
// the conductor use that console too, rather than none: the owner's
// member sees the switch on the node page, turns the console on, and the
// console page says there is no stream to show.
func TestPortalConsoleOfImportedNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv := servertest.Start(t, server.Options{Database: setting})
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 3); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.CreateUser(ctx, "owl", "owl-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, "owl", identity.Assignment{Scope: identity.Scope{Project: "hw-east"}, Role: "member"}); err != nil {
			t.Fatal(err)
		}
		n := srv.DB.Node.Query().Where(node.Name("demo-00001")).OnlyX(ctx)
		if n.ConsoleInterface != "" {
			t.Fatalf("the demo node stores console_interface %q; this test wants one enrolled without", n.ConsoleInterface)
		}
		owl := signInAs(t, srv, "owl")
		id := n.UUID
		if st, body, _ := owl.do("GET", "/nodes/"+id, nil); st != 200 || !strings.Contains(body, `action="/nodes/`+id+`/console/state"`) ||
			!strings.Contains(body, "Turn the console on") {
			t.Fatalf("the node page offers no console switch for the fake console: %d", st)
		}
		st, _, h := owl.do("POST", "/nodes/"+id+"/console/state", url.Values{"csrf": {owl.csrf}, "enabled": {"yes"}, "back": {"console"}})
		if st != 303 || h.Get("Location") != "/nodes/"+id+"/console" {
			t.Fatalf("turning on: %d to %q", st, h.Get("Location"))
		}
		if !srv.DB.Node.GetX(ctx, n.ID).ConsoleEnabled {
			t.Fatal("the console is not on after the form said so")
		}
		if st, body, _ := owl.do("GET", "/nodes/"+id+"/console", nil); st != 200 || !strings.Contains(body, "The console of demo-00001 is on.") ||
			!strings.Contains(body, "This node&#39;s console interface (fake) has no stream the portal can show.") {
			t.Errorf("the console page once on: %d\n%s", st, body)
		}
	})
}
