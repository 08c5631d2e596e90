package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// consoleState reads GET states/console.
func consoleState(t *testing.T, c *servertest.Client, id string) (bool, any) {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id+"/states/console", nil)
	mustStatus(t, r, 200)
	m := r.JSON(t)
	return m["console_enabled"] == true, m["console_info"]
}

// TestConsoleFake enables and disables the fake console as Ironic's
// fake-hardware does (console_info {}), checks the rules per persona
// (SYSTEM_MEMBER_OR_OWNER_MEMBER: a lessee is refused, another project
// sees no node), Ironic's refusals, the audit, and that a change of
// lessee disables the console.
func TestConsoleFake(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin, owner := clients["system-admin"], clients["owner-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "con-1", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		path := "/v1/nodes/" + id + "/states/console"

		if on, info := consoleState(t, owner, id); on || info != nil {
			t.Fatalf("a new node's console: %v %v", on, info)
		}
		mustStatus(t, clients["other-member"].Do(t, "GET", path, nil), 404)
		mustStatus(t, clients["other-member"].Do(t, "PUT", path, `{"enabled":true}`), 404)
		mustStatus(t, clients["lessee-member"].Do(t, "GET", path, nil), 403)
		mustStatus(t, clients["lessee-admin"].Do(t, "PUT", path, `{"enabled":true}`), 403)
		mustStatus(t, clients["owner-reader"].Do(t, "PUT", path, `{"enabled":true}`), 403)
		mustFaultNaming(t, "no enabled", owner.Do(t, "PUT", path, `{}`), "enabled")
		mustFaultNaming(t, "enabled not a boolean", owner.Do(t, "PUT", path, `{"enabled":"on"}`), "enabled")

		r = owner.Do(t, "PUT", path, map[string]any{"enabled": true})
		mustStatus(t, r, 202)
		if !strings.HasSuffix(r.Header.Get("Location"), path) {
			t.Errorf("Location %q", r.Header.Get("Location"))
		}
		eventually(t, "console enabled", func() bool { on, _ := consoleState(t, owner, id); return on })
		// The path tempest's get_console calls answers the same, with
		// the same authorization.
		alias := "/v1/nodes/states/console/" + id
		if got := owner.Do(t, "GET", alias, nil).JSON(t); got["console_enabled"] != true || got["console_info"] == nil {
			t.Errorf("GET %s: %v", alias, got)
		}
		mustStatus(t, clients["other-member"].Do(t, "GET", alias, nil), 404)
		mustStatus(t, clients["lessee-member"].Do(t, "GET", alias, nil), 403)
		if _, info := consoleState(t, owner, id); fmt.Sprint(info) != "map[]" {
			t.Errorf("fake console_info = %v, want Ironic's {}", info)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["console_enabled"] != true {
			t.Errorf("node console_enabled = %v", n["console_enabled"])
		}
		// Already enabled is accepted, as Ironic does.
		mustStatus(t, owner.Do(t, "PUT", path, map[string]any{"enabled": true}), 202)
		auditedRule(t, clients["system-reader"], "baremetal:node:set_console_state")

		// The driver cannot change under an enabled console (Ironic's 409).
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/driver","value":"ipmi"},{"op":"add","path":"/driver_info/ipmi_address","value":"192.0.2.1"}]`), 409)

		// A new lessee does not inherit the console.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/lessee","value":"oth"}]`), 200)
		if on, info := consoleState(t, owner, id); on || info != nil {
			t.Fatalf("console after the lessee changed: %v %v", on, info)
		}
		h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).Body
		if !strings.Contains(string(h), "Console disabled: the node's owner or lessee changed") {
			t.Errorf("history lacks the console's end: %s", h)
		}

		// Enable, then disable.
		mustStatus(t, owner.Do(t, "PUT", path, map[string]any{"enabled": true}), 202)
		eventually(t, "console enabled", func() bool { on, _ := consoleState(t, owner, id); return on })
		mustStatus(t, owner.Do(t, "PUT", path, map[string]any{"enabled": false}), 202)
		eventually(t, "console disabled", func() bool { on, _ := consoleState(t, owner, id); return !on })

		// no-console: Ironic's UnsupportedDriverExtension, a 400.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/console_interface","value":"no-console"}]`), 200)
		mustFaultNaming(t, "no-console", owner.Do(t, "PUT", path, map[string]any{"enabled": true}), "console_interface")
	})
}

// TestConsoleIPMISOL runs an ipmitool-socat console against ipmi_sim
// with serial-over-LAN: bytes typed at the console's tcp:// URL reach
// the machine's serial port and its output comes back; a second client
// is turned away while one is connected; a change of lessee closes the
// console, its client included; the conductor's restart reopens an
// enabled console.
func TestConsoleIPMISOL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartSOL(t)
		serial := sim.Serial(t)
		lo := freeTCPPort(t)
		opts := bmcOpts
		opts.Conductor.Console.PortMin, opts.Conductor.Console.PortMax = lo, lo+3
		srv, clients := startLocal(t, setting, opts)
		admin, owner := clients["system-admin"], clients["owner-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "sol-1", "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password),
			"console_interface": "ipmitool-socat", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		path := "/v1/nodes/" + id + "/states/console"

		mustStatus(t, owner.Do(t, "PUT", path, map[string]any{"enabled": true}), 202)
		eventually(t, "console enabled", func() bool { on, _ := consoleState(t, owner, id); return on })
		_, info := consoleState(t, owner, id)
		m, _ := info.(map[string]any)
		want := fmt.Sprintf("tcp://127.0.0.1:%d", lo)
		if m["type"] != "socat" || m["url"] != want {
			t.Fatalf("console_info = %v, want socat at %s", info, want)
		}

		conn := dialConsole(t, want)
		talk(t, conn, serial)
		// One client at a time, as Ironic's socat (max-children=1): the
		// next waits, and has the console once the first leaves; its
		// session is a new one (the previous was deactivated).
		next := dialConsole(t, want)
		if _, err := next.Write([]byte("queued\r")); err != nil {
			t.Fatal(err)
		}
		_ = serial.SetReadDeadline(time.Now().Add(2 * time.Second))
		if b, _ := io.ReadAll(serial); strings.Contains(string(b), "queued") {
			t.Fatal("a second client was served beside the first")
		}
		conn.Close()
		conn = next
		talk(t, conn, serial)

		// The conductor's restart reopens the console at the same URL.
		conn.Close()
		srv.Cond.Stop()
		cfg := opts.Conductor
		cfg.Name = srv.Cond.Name()
		again := conductor.New(srv.DB, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), cfg)
		if err := again.Start(context.Background(), "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(again.Stop)
		if on, info := consoleState(t, owner, id); !on || info.(map[string]any)["url"] != want {
			t.Fatalf("after restart: %v %v", on, info)
		}
		conn = dialConsole(t, want)
		talk(t, conn, serial)

		// The lease ends: the client is cut and the port closes.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"remove","path":"/lessee"}]`), 200)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatalf("the client was not cut when the lease ended: %v", err)
		}
		eventually(t, "port closed", func() bool {
			c, err := net.Dial("tcp", strings.TrimPrefix(want, "tcp://"))
			if err == nil {
				c.Close()
			}
			return err != nil
		})
	})
}

func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func dialConsole(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// talk round-trips the socat console at conn to the machine's serial
// port, and leaves conn without a read deadline.
func talk(t *testing.T, conn, serial net.Conn) {
	t.Helper()
	bmctest.RoundTrip(t, "at "+conn.RemoteAddr().String(), bmctest.Socket(conn), serial, 15*time.Second)
	_ = conn.SetReadDeadline(time.Time{})
}

// TestBaremetalCLIConsole drives Debian's client through node console
// enable, show and disable on a fake-hardware node.
func TestBaremetalCLIConsole(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, admin := start(t, setting)
		bm := newCLI(t, srv.URL)
		bm.json("node", "create", "--driver", "fake-hardware", "--name", "cli-con")
		bm.run(false, "node", "console", "enable", "cli-con")
		eventually(t, "console enabled", func() bool {
			return admin.Do(t, "GET", "/v1/nodes/cli-con", nil).JSON(t)["console_enabled"] == true
		})
		if s := bm.json("node", "console", "show", "cli-con").(map[string]any); s["console_enabled"] != true || fmt.Sprint(s["console_info"]) != "map[]" {
			t.Errorf("console show: %v", s)
		}
		bm.run(false, "node", "console", "disable", "cli-con")
		eventually(t, "console disabled", func() bool {
			return admin.Do(t, "GET", "/v1/nodes/cli-con", nil).JSON(t)["console_enabled"] == false
		})
		if s := bm.json("node", "console", "show", "cli-con").(map[string]any); s["console_enabled"] != false || s["console_info"] != nil {
			t.Errorf("console show after disable: %v", s)
		}
		if out := bm.run(true, "node", "console", "enable", "no-such-node"); !strings.Contains(out, "no-such-node") {
			t.Errorf("console enable of a missing node: %s", out)
		}
	})
}

// TestConsoleTearDown: undeploying disables the console, where Ironic
// only stops it until the next deploy, so the next tenant does not get
// it (README, Console).
func TestConsoleTearDown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, admin := start(t, setting)
		id := availableNode(t, admin, map[string]any{"name": "con-td"})
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}), 202)
		eventually(t, "console enabled", func() bool { on, _ := consoleState(t, admin, id); return on })
		provision(t, admin, id, map[string]any{"target": "deleted"}, 202)
		waitState(t, admin, id, "available")
		if on, info := consoleState(t, admin, id); on || info != nil {
			t.Fatalf("console after tear down: %v %v", on, info)
		}
		if h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).Body; !strings.Contains(string(h), "console disabled") {
			t.Errorf("history does not say the console was disabled: %s", h)
		}
	})
}
