package web_test

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestFailuresSayWhatToDo: a busy node shows how long it has been busy and
// every action section (sent again out of band with each status update)
// disabled with the reason; a failed one shows a plain summary of the BMC
// failure and what to do, the raw text behind a disclosure.
func TestFailuresSayWhatToDo(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		id := ids["f-00"]
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean wait").SetTargetProvisionState("manageable").
			SetProvisionUpdatedAt(time.Now().Add(-75 * time.Second)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		pat := signInAs(t, srv, "pat")
		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		if !regexp.MustCompile(`data-testid="elapsed">1 min 1[5-9] s<`).MatchString(page) {
			t.Errorf("busy node: no elapsed time\n%s", page)
		}
		for _, want := range []string{
			"Power actions wait while the node is clean wait.",
			`<button type="submit" disabled aria-describedby="power-why">Power on</button>`,
			"Runbooks wait while the node is clean wait.",
			">Abort the run</button>",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("busy node page lacks %s", want)
			}
		}
		// Each status update carries the action sections (deploy among them), and the
		// Hardware section a run may change.
		_, frag, _ := pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		if strings.Count(frag, `hx-swap-oob="true"`) != 6 || !strings.Contains(frag, `disabled aria-describedby="power-why">Reboot</button>`) {
			t.Errorf("status update without the action sections:\n%s", frag)
		}

		// The run failed: a BMC that did not answer.
		raw := "Step power.power_on failed: setting power on: the BMC did not answer (timeout)"
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").ClearTargetProvisionState().SetLastError(raw).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, frag, _ = pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		for _, want := range []string{
			`<strong data-testid="error-summary">The BMC at this node did not answer.</strong>`,
			"Check that the BMC is powered and on the network, then try again",
			"Then use “Return to manageable” under Recovery.",
			"<details class=\"detail\"><summary>Details</summary><pre>" + raw + "</pre></details>",
			">Return to manageable</button>",
			`<button type="submit">Power on</button>`,
		} {
			if !strings.Contains(frag, want) {
				t.Errorf("failed node lacks %s\n%s", want, frag)
			}
		}
		if strings.Contains(frag, `data-testid="elapsed"`) {
			t.Errorf("a failed node is not busy")
		}
	})
}

// TestBMCRetryShownWhileWaiting: a run whose BMC does not answer shows,
// while it waits, which try it is on, and no longer once the step has
// failed. The BMC accepts connections and never answers, as a hung one.
func TestBMCRetryShownWhileWaiting(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
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
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("manageable").Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean",
			"clean_steps": []map[string]any{{"interface": "power", "step": "power_on"}}}); r.Status != 202 {
			t.Fatalf("clean: %d %s", r.Status, r.Body)
		}
		pat := signInAs(t, srv, "pat")
		retry := regexp.MustCompile(`data-testid="bmc-retry">The BMC did not answer; try 2 of 2, up to 2 s each, since \d+ s ago.<`)
		failed := regexp.MustCompile(`data-testid="provision-state">clean failed\s*<`)
		seen := false
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			_, frag, _ := pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
			seen = seen || retry.MatchString(frag)
			if failed.MatchString(frag) {
				if strings.Contains(frag, "bmc-retry") {
					t.Errorf("a failed step still shows its retry:\n%s", frag)
				}
				if !strings.Contains(frag, "did not answer within 2 s (2 tries)") {
					t.Errorf("the failure does not say how long and how often:\n%s", frag)
				}
				break
			}
		}
		if !seen {
			t.Fatal("the second try was never shown while the step waited")
		}
		n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n.ProvisionState != "clean failed" {
			t.Fatalf("the run ended %s", n.ProvisionState)
		}
		if _, ok := conductor.StoredBMCRetry(n.DriverInternalInfo); ok {
			t.Errorf("the retry record outlived the step: %v", n.DriverInternalInfo)
		}
	})
}

// TestStepFailureReadsAsASentence: a step that fails on its own terms (a
// RAID build with no target configuration) is summarised by which step it
// was and the step's reason; a project's people read it, on the node
// page, in the node list and in the run's history, without the API call
// that fixes it, which the system's operators still see.
func TestStepFailureReadsAsASentence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		id := ids["f-00"] // owned by blue
		if r := api.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/raid_interface", "value": "fake"}}); r.Status != 200 {
			t.Fatalf("raid interface: %d %s", r.Status, r.Body)
		}
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("manageable").Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean",
			"clean_steps": []map[string]any{{"interface": "raid", "step": "create_configuration"}}}); r.Status != 202 {
			t.Fatalf("clean: %d %s", r.Status, r.Body)
		}
		deadline := time.Now().Add(30 * time.Second)
		for api.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"] != "clean failed" {
			if time.Now().After(deadline) {
				t.Fatal("the RAID step never failed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		sentence := "The step raid.create_configuration (RAID) failed: node " + id + " has no target RAID configuration. Its owner or an operator must set one."

		pat := signInAs(t, srv, "pat")
		for _, path := range []string{"/nodes/" + id, "/nodes?q=f-00"} {
			_, page, _ := pat.do("GET", path, nil)
			if strings.Contains(page, "/v1/") {
				i := strings.Index(page, "/v1/")
				t.Errorf("%s shows a project member an API path: …%s…", path, page[max(i-200, 0):min(i+100, len(page))])
			}
			if path == "/nodes/"+id && !strings.Contains(page, `<strong data-testid="error-summary">`+sentence+`</strong>`) {
				t.Errorf("the node page does not say %q:\n%s", sentence, page)
			}
		}
		root := signInAs(t, srv, "root")
		if _, page, _ := root.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "(API: PUT /v1/nodes/"+id+"/states/raid)") {
			t.Errorf("the system admin's node page lacks the API pointer")
		}
	})
}
