package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestFleetMetrics scrapes /metrics from a running server whose nodes are
// in several states: each state, maintenance flag, fault and conductor
// group is counted as the database holds them, a lock under its holder,
// allocations by state, the conductor that serves reports itself online
// with a heartbeat, and the build is named.
func TestFleetMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		ctx := context.Background()
		mk := func(name, group string) string {
			t.Helper()
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "conductor_group": group})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		mk("m-enroll-1", "")
		mk("m-enroll-2", "")
		rack := mk("m-rack", "rack-7")
		failed := mk("m-failed", "")
		// States set in the database, as the conductor would leave them.
		if err := db.Node.Update().Where(node.UUID(rack)).SetProvisionState("active").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.Node.Update().Where(node.UUID(failed)).SetProvisionState("clean failed").SetMaintenance(true).SetFault("clean failure").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		// A lock left by a conductor that is not registered, which no
		// takeover releases, and an allocation that found no node.
		if err := db.Node.Update().Where(node.UUID(rack)).SetReservation("cond-gone").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.Allocation.Create().SetUUID("00000000-0000-4000-8000-0000000000a1").SetResourceClass("gpu").SetState("error").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(body)
		for _, want := range []string{
			`anvil_nodes{conductor_group="",fault="",maintenance="false",provision_state="enroll"} 2`,
			`anvil_nodes{conductor_group="rack-7",fault="",maintenance="false",provision_state="active"} 1`,
			`anvil_nodes{conductor_group="",fault="clean failure",maintenance="true",provision_state="clean failed"} 1`,
			`anvil_conductor_reserved_nodes{conductor="cond-gone"} 1`,
			`anvil_allocations{state="error"} 1`,
			`anvil_allocations{state="allocating"} 0`,
			`anvil_allocations{state="active"} 0`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if n := strings.Count(text, "\nanvil_nodes{"); n != 3 {
			t.Errorf("%d anvil_nodes series, want 3", n)
		}
		if !regexp.MustCompile(`anvil_conductor_online\{conductor="[^"]+",conductor_group=""\} 1`).MatchString(text) ||
			!regexp.MustCompile(`anvil_conductor_heartbeat_timestamp_seconds\{conductor="[^"]+",conductor_group=""\} \d`).MatchString(text) {
			t.Errorf("/metrics lacks the serving conductor:\n%s", grepLines(text, "anvil_conductor"))
		}
		if !regexp.MustCompile(`anvil_build_info\{commit="[^"]*",version="[^"]+"\} 1`).MatchString(text) {
			t.Errorf("/metrics lacks anvil_build_info:\n%s", grepLines(text, "anvil_build"))
		}
		if strings.Contains(text, "anvil_fleet_metrics_errors_total 1") {
			t.Error("a fleet metrics read failed")
		}
	})
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// liveMetrics are the metric names a running server serves once it has
// done what each family counts: nodes in several states, one locked, a
// request, a clean run whose steps call a real (loopback) BMC, and one
// whose BMC refuses the credentials. A labelled family has
// no series, and so no TYPE line, until something is counted.
func liveMetrics(t *testing.T) map[string]bool {
	t.Helper()
	hook := bmctest.NewRPCWebhook("rpc-live-secret", "off")
	ts := httptest.NewServer(hook)
	defer ts.Close()
	srv, clients := startLocal(t, storetest.Setting(t, "sqlite"), rpcOpts)
	admin := clients["system-admin"]
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "alerts", "driver": "fake-hardware"})
	mustStatus(t, r, 201)
	// Locked by a conductor no longer registered, for the locks' family.
	if err := srv.DB.Node.Update().Where(node.UUID(r.JSON(t)["uuid"].(string))).SetReservation("cond-gone").Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := enrolBmclib(t, admin, "live-rpc", map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node9",
		"bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": hook.Secret}, hook.Secret)
	provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil))}, 202)
	waitState(t, admin, id, "manageable")
	// And a BMC that refuses the credentials, for the errors' family.
	r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "live-refused", "driver": "bmclib", "driver_info": map[string]any{
		"bmclib_provider": "rpc", "bmclib_address": "rack1-node10", "bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": "not-the-secret"}})
	mustStatus(t, r, 201)
	refused := r.JSON(t)["uuid"].(string)
	provision(t, admin, refused, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, refused, "enroll")
	return servedMetrics(scrape(t, srv.URL))
}

// namedMetrics are the anvil_ and go_sql_ metric names a PromQL
// expression reads.
var namedMetrics = regexp.MustCompile(`\b(?:anvil|go_sql)_[a-z_]+`)

// TestAlertRulesNameRealMetrics: every metric the shipped alert rules
// (deploy/prometheus) name is one a running server serves, so that no
// alert silently never fires.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	served := liveMetrics(t)
	rules, err := os.ReadFile("../../deploy/prometheus/anvil-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(rules, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("a rule without alert or expr: %+v", r)
			}
			for _, name := range namedMetrics.FindAllString(r.Expr, -1) {
				n++
				if !served[name] {
					t.Errorf("alert %s names %s, which /metrics does not serve", r.Alert, name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no metric names found in the alert rules")
	}
}

// TestDashboardNamesRealMetrics: every metric the shipped Grafana
// dashboard (deploy/grafana) queries is one a running server serves,
// and every panel but a row queries something, so no panel stays empty.
func TestDashboardNamesRealMetrics(t *testing.T) {
	served := liveMetrics(t)
	b, err := os.ReadFile("../../deploy/grafana/anvil-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			names := namedMetrics.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no anvil metric", p.Title, tg.Expr)
			}
			for _, name := range names {
				named[name] = true
				if !served[name] {
					t.Errorf("panel %q names %s, which /metrics does not serve", p.Title, name)
				}
			}
		}
	}
	// The families an operator of the fleet needs each have a panel.
	for _, want := range []string{"anvil_http_requests_total", "anvil_http_request_duration_seconds_bucket", "anvil_nodes",
		"anvil_conductor_online", "anvil_bmc_call_errors_total", "anvil_bmc_call_duration_seconds_bucket", "anvil_steps_total",
		"anvil_campaigns", "anvil_campaign_nodes_total", "anvil_webhook_deliveries_total", "anvil_webhook_queue_depth",
		"anvil_image_cache_hits_total", "anvil_image_cache_download_failures_total", "anvil_agent_heartbeats_total"} {
		if !named[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}
