package web_test

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// hungBMC listens on loopback, accepts every connection and never
// answers, as a hung BMC; it counts the connections, one per try.
func hungBMC(t *testing.T) (addr string, conns *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns = &atomic.Int32{}
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held = append(held, c)
		}
	}()
	return l.Addr().String(), conns
}

// TestPowerActionShowsTriesAndCancels: a power action whose BMC does not
// answer shows which try it is on and a Cancel button; cancelling stops
// the tries (the action ends cancelled, before its last try, not failed
// after it), clears target_power_state and the lock, and the node's
// history, its last error and the audit log say who cancelled it. Someone
// who cannot see the node gets 404, and a node with no power action
// under way a refusal that says so.
func TestPowerActionShowsTriesAndCancels(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		addr, conns := hungBMC(t)
		const tries = 5
		srv, api, _ := fleetWith(t, server.Options{Database: setting, Conductor: conductor.Config{
			BMC: bmc.Options{Timeout: 2 * time.Second, Retries: tries - 1}, PowerTimeout: time.Minute}})
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hung", "driver": "redfish", "owner": "blue",
			"driver_info": map[string]any{"redfish_address": "http://" + addr, "redfish_system_id": "/redfish/v1/Systems/1",
				"redfish_username": "u", "redfish_password": "p"}})
		if r.Status != 201 {
			t.Fatalf("enrol: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		ctx := context.Background()
		pat := signInAs(t, srv, "pat")
		if st, frag, _ := pat.do("POST", "/nodes/"+id+"/power/cancel", url.Values{"csrf": {pat.csrf}}, "HX-Request", "true"); st != 200 ||
			!strings.Contains(frag, "has no power action under way to cancel") {
			t.Fatalf("cancel with nothing under way: %d\n%s", st, frag)
		}
		if st, _, _ := pat.do("POST", "/nodes/"+id+"/power", url.Values{"csrf": {pat.csrf}, "target": {"power on"}}, "HX-Request", "true"); st != 200 {
			t.Fatalf("power on: %d", st)
		}
		gil := signInAs(t, srv, "gil") // green: not the node's project
		if st, _, _ := gil.do("POST", "/nodes/"+id+"/power/cancel", url.Values{"csrf": {gil.csrf}}, "HX-Request", "true"); st != 404 {
			t.Errorf("another project's cancel: %d, want 404", st)
		}

		retry := regexp.MustCompile(`data-testid="bmc-retry">The BMC did not answer; try 2 of 5, up to 2 s each`)
		var frag string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !retry.MatchString(frag); time.Sleep(100 * time.Millisecond) {
			_, frag, _ = pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		}
		if !retry.MatchString(frag) || !strings.Contains(frag, `data-testid="power-cancel-button">Cancel the power action</button>`) {
			t.Fatalf("the power action's second try and its Cancel were never shown:\n%s", frag)
		}
		st, frag, _ := pat.do("POST", "/nodes/"+id+"/power/cancel", url.Values{"csrf": {pat.csrf}}, "HX-Request", "true")
		if st != 200 || !strings.Contains(frag, "Asked the conductor to cancel the power action") {
			t.Fatalf("cancel: %d\n%s", st, frag)
		}
		if !strings.Contains(frag, `data-testid="power-cancel">Cancel asked by pat;`) && !strings.Contains(frag, "was cancelled by pat.") {
			t.Errorf("the page does not say the cancel was asked for:\n%s", frag)
		}

		var n = srv.DB.Node.Query().Where(node.UUID(id)).OnlyX(ctx)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && (n.TargetPowerState != nil || n.Reservation != nil); time.Sleep(100 * time.Millisecond) {
			n = srv.DB.Node.Query().Where(node.UUID(id)).OnlyX(ctx)
		}
		if n.TargetPowerState != nil || n.Reservation != nil {
			t.Fatalf("the cancelled action still holds the node: target %v, lock %v", n.TargetPowerState, n.Reservation)
		}
		// The BMC was tried once a connection; five tries would have run
		// to the end had the cancel not stopped them.
		if got := conns.Load(); got >= tries {
			t.Errorf("the BMC was tried %d times: the cancel did not stop the tries", got)
		}
		if _, ok := conductor.StoredBMCRetry(n.DriverInternalInfo); ok {
			t.Errorf("the retry record outlived the action: %v", n.DriverInternalInfo)
		}
		if _, ok := conductor.StoredPowerCancel(n.DriverInternalInfo); ok {
			t.Errorf("the cancel request outlived the action: %v", n.DriverInternalInfo)
		}
		if n.LastError == nil || !strings.HasPrefix(*n.LastError, "Power on cancelled by pat;") {
			t.Errorf("last_error: %v", n.LastError)
		}
		evs := srv.DB.NodeEvent.Query().Where(nodeevent.NodeID(n.ID), nodeevent.EventType("power")).AllX(ctx)
		if len(evs) != 1 || !strings.HasPrefix(evs[0].Event, "Power on cancelled by pat;") {
			t.Errorf("history of the power action: %+v", evs)
		}
		audits := srv.DB.AuditEvent.Query().Where(auditevent.TargetID(id), auditevent.Rule(conductor.RuleSetPower), auditevent.User("pat")).AllX(ctx)
		var cancelled, refused bool
		for _, a := range audits {
			if a.Detail["cancel"] == "power on" && a.Result == "allowed" {
				cancelled = true
			}
			if a.Detail["cancel"] == "" && a.Status == 409 {
				refused = true
			}
		}
		if !cancelled || !refused {
			t.Errorf("audit rows of the cancels (the one done, the one refused): %+v", audits)
		}

		_, frag, _ = pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		if !strings.Contains(frag, `data-testid="error-summary">Power on was cancelled by pat.</strong>`) || strings.Contains(frag, "bmc-retry") ||
			strings.Contains(frag, "power-cancel") {
			t.Errorf("after the cancel the status does not say who cancelled, or still offers it:\n%s", frag)
		}
	})
}
