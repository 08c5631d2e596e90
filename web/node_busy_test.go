package web_test

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBusyCountsFromThePowerAction: right after Power on, a node whose
// last run failed long ago is busy for seconds, not since that run. The
// BMC accepts connections and never answers, so the action stays in
// progress while the page is read.
func TestBusyCountsFromThePowerAction(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var dialled atomic.Int32
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
				dialled.Add(1)
				held = append(held, c)
			}
		}()
		srv, api, _ := fleetWith(t, server.Options{Database: setting, Conductor: conductor.Config{BMC: bmc.Options{Timeout: 2 * time.Second, Retries: 1}}})
		r := api.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hung", "driver": "redfish", "owner": "blue",
			"driver_info": map[string]any{"redfish_address": "http://" + l.Addr().String(), "redfish_system_id": "/redfish/v1/Systems/1",
				"redfish_username": "u", "redfish_password": "p"}})
		if r.Status != 201 {
			t.Fatalf("enrol: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		// The last run failed nine minutes ago, and the node was last
		// written then.
		long := time.Now().Add(-9 * time.Minute)
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").SetLastError("Step power.power_on failed").
			SetProvisionUpdatedAt(long).SetUpdatedAt(long).Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		pat := signInAs(t, srv, "pat")
		st, frag, _ := pat.do("POST", "/nodes/"+id+"/power", url.Values{"csrf": {pat.csrf}, "target": {"power on"}}, "HX-Request", "true")
		if st != 200 {
			t.Fatalf("power on: %d\n%s", st, frag)
		}
		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		if !regexp.MustCompile(`data-testid="elapsed">\d s<`).MatchString(page) {
			t.Errorf("right after Power on the node is not busy for seconds:\n%s", page)
		}
		n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n.TargetPowerState == nil || *n.TargetPowerState != "power on" {
			t.Errorf("the power action is not in progress: target %v", n.TargetPowerState)
		}
		// The action went to the BMC (which never answers) and is still
		// waiting for it.
		for deadline := time.Now().Add(5 * time.Second); dialled.Load() == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		}
		if dialled.Load() == 0 {
			t.Error("the power action never reached the BMC")
		}
	})
}
