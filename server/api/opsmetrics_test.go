package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// scrape reads /metrics from the server at url, as Prometheus would.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// sample is the value of series (name{labels in name order}) in a
// scrape; 0 when the scrape lacks it, as a counter not yet counted.
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// moved checks that each series grew by exactly its delta between two
// scrapes.
func moved(t *testing.T, before, after string, want map[string]float64) {
	t.Helper()
	for series, d := range want {
		if got := sample(t, after, series) - sample(t, before, series); got != d {
			t.Errorf("%s moved by %v, want %v\n%s", series, got, d, grepLines(after, series[:strings.IndexAny(series+"{", "{")]))
		}
	}
}

// rpcOpts bound BMC calls tightly, so that a BMC that never answers
// times out within the test, yet a loopback BMC on a busy CI machine
// answers in time.
var rpcOpts = server.Options{Conductor: conductor.Config{PowerTimeout: 20 * time.Second,
	BMC: bmc.Options{Timeout: 3 * time.Second, Retries: -1, PowerPoll: 100 * time.Millisecond}}}

// TestBMCAndStepMetrics drives a node through bmclib's rpc provider
// against a loopback BMC and reads what /metrics counted: a clean run's
// power and boot device calls and its steps, each with its driver,
// operation and outcome; a wrong secret as an error of kind auth and the
// step it broke as failed; and a BMC that never answers as a timeout.
func TestBMCAndStepMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		hook := bmctest.NewRPCWebhook("rpc-metrics-secret", "off")
		ts := httptest.NewServer(hook)
		defer ts.Close()
		srv, clients := startLocal(t, setting, rpcOpts)
		admin := clients["system-admin"]
		info := map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node7", "bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": hook.Secret}
		id := enrolBmclib(t, admin, "metrics-rpc", info, hook.Secret)

		before := scrape(t, srv.URL)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil),
			step("management", "set_boot_device", map[string]any{"device": "pxe"}))}, 202)
		waitState(t, admin, id, "manageable")
		after := scrape(t, srv.URL)
		moved(t, before, after, map[string]float64{
			`anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_set",outcome="ok"}`:          1,
			`anvil_bmc_calls_total{driver="bmclib:rpc",operation="boot_device_set",outcome="ok"}`:    1,
			`anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_set",outcome="error"}`:       0,
			`anvil_bmc_call_duration_seconds_count{driver="bmclib:rpc",operation="power_set"}`:       1,
			`anvil_bmc_call_duration_seconds_count{driver="bmclib:rpc",operation="boot_device_set"}`: 1,
			`anvil_steps_total{outcome="ok",phase="clean",step="power.power_on"}`:                    1,
			`anvil_steps_total{outcome="ok",phase="clean",step="management.set_boot_device"}`:        1,
			`anvil_step_duration_seconds_count{phase="clean",step="management.set_boot_device"}`:     1,
			`anvil_bmc_call_errors_total{driver="bmclib:rpc",kind="auth"}`:                           0,
		})
		// Power waits for the BMC to report the state: at least one read.
		if d := sample(t, after, `anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_get",outcome="ok"}`) -
			sample(t, before, `anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_get",outcome="ok"}`); d < 1 {
			t.Errorf("power reads moved by %v", d)
		}
		if strings.Contains(after, "rack1-node7") || strings.Contains(after, id) || strings.Contains(after, ts.URL) {
			t.Error("a node's address, UUID or BMC URL is a label")
		}

		// The wrong secret: the BMC refuses the signature.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/driver_info/bmclib_rpc_secret","value":"not-the-secret"}]`), 200)
		before = after
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_off", nil))}, 202)
		waitState(t, admin, id, "clean failed")
		after = scrape(t, srv.URL)
		moved(t, before, after, map[string]float64{
			`anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_set",outcome="error"}`: 1,
			`anvil_bmc_call_errors_total{driver="bmclib:rpc",kind="auth"}`:                     1,
			`anvil_steps_total{outcome="failed",phase="clean",step="power.power_off"}`:         1,
			`anvil_steps_total{outcome="ok",phase="clean",step="power.power_off"}`:             0,
		})

		// A BMC that takes the connection and never answers: enrolling it,
		// manage reads its power state to verify it, and times out.
		hold := make(chan struct{})
		silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-hold:
			}
		}))
		defer silent.Close()
		defer close(hold)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "metrics-mute", "driver": "bmclib", "driver_info": map[string]any{
			"bmclib_provider": "rpc", "bmclib_address": "rack1-node8", "bmclib_rpc_url": silent.URL + "/bmc", "bmclib_rpc_secret": hook.Secret}})
		mustStatus(t, r, 201)
		mute := r.JSON(t)["uuid"].(string)
		before = after
		provision(t, admin, mute, map[string]any{"target": "manage"}, 202)
		if n := waitState(t, admin, mute, "enroll"); n["last_error"] == nil {
			t.Fatal("a silent BMC was verified")
		}
		after = scrape(t, srv.URL)
		moved(t, before, after, map[string]float64{
			`anvil_bmc_calls_total{driver="bmclib:rpc",operation="power_get",outcome="timeout"}`: 1,
			`anvil_bmc_call_errors_total{driver="bmclib:rpc",kind="unreachable"}`:                1,
		})
	})
}

// TestCampaignMetrics runs a campaign over two nodes, with a third that
// cannot take the runbook skipped, and reads the nodes' outcomes and the
// campaigns by state from /metrics.
func TestCampaignMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_METRICS", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "cm", "CUSTOM_METRICS", 2)
		// Still enrolled: runbooks run on manageable or active nodes.
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "cm-enrolled", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+r.JSON(t)["uuid"].(string)+"/traits/CUSTOM_METRICS", nil), 204)
		before := scrape(t, srv.URL)
		for _, s := range campaigns.States {
			if !strings.Contains(before, `anvil_campaigns{state="`+s+`"} 0`) {
				t.Errorf("before any campaign, no anvil_campaigns at 0 for %s", s)
			}
		}
		r = admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "metered", "runbook": "CUSTOM_METRICS",
			"nodes": append(names, "cm-enrolled"), "max_concurrency": 2, "skip_ineligible": true})
		mustStatus(t, r, 201)
		waitCampaign(t, admin, r.JSON(t)["uuid"].(string), stateIs("completed"))
		after := scrape(t, srv.URL)
		moved(t, before, after, map[string]float64{
			`anvil_campaign_nodes_total{outcome="started"}`:                    2,
			`anvil_campaign_nodes_total{outcome="succeeded"}`:                  2,
			`anvil_campaign_nodes_total{outcome="failed"}`:                     0,
			`anvil_campaign_nodes_total{outcome="skipped"}`:                    1,
			`anvil_campaigns{state="completed"}`:                               1,
			`anvil_campaigns{state="running"}`:                                 0,
			`anvil_steps_total{outcome="ok",phase="clean",step="deploy.wait"}`: 2,
		})
	})
}

// TestWebhookMetrics delivers audit events to a receiver that fails the
// first attempt with a 500 (retried, then delivered) and refuses the
// next event with a 400 (failed, not retried), and reads the deliveries,
// retries and the queue, empty again, from /metrics.
func TestWebhookMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		calls := 0
		h := newHookReceiver(t, func(int) int {
			calls++
			return map[int]int{1: 500, 2: 200, 3: 400}[calls]
		})
		srv, _ := startLocal(t, setting, hookOptions(h.URL))
		before := scrape(t, srv.URL)
		if !strings.Contains(before, `anvil_webhook_deliveries_total{outcome="failed"} 0`) || !strings.Contains(before, "anvil_webhook_queue_depth 0") {
			t.Errorf("before any event:\n%s", grepLines(before, "anvil_webhook"))
		}
		ctx := context.Background()
		srv.Audit.Done(ctx, campaigns.EventFinish, "campaign", "metrics-1", nil, nil)
		srv.Audit.Done(ctx, campaigns.EventFinish, "campaign", "metrics-2", nil, nil)
		deadline := time.Now().Add(time.Minute)
		var after string
		for {
			after = scrape(t, srv.URL)
			if sample(t, after, `anvil_webhook_deliveries_total{outcome="failed"}`) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		moved(t, before, after, map[string]float64{
			`anvil_webhook_deliveries_total{outcome="delivered"}`: 1,
			`anvil_webhook_deliveries_total{outcome="failed"}`:    1,
			`anvil_webhook_deliveries_total{outcome="lost"}`:      0,
			"anvil_webhook_retries_total":                         1,
		})
		if q := sample(t, after, "anvil_webhook_queue_depth"); q != 0 {
			t.Errorf("queue depth %v after every event was sent", q)
		}
		if h.tried("metrics-1") != 2 || h.tried("metrics-2") != 1 {
			t.Errorf("attempts: %d and %d, want 2 and 1", h.tried("metrics-1"), h.tried("metrics-2"))
		}
	})
}

// servedMetrics are the metric names a scrape serves, a histogram's
// series names too.
func servedMetrics(text string) map[string]bool {
	served := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		served[f[2]] = true
		if f[3] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				served[f[2]+s] = true
			}
		}
	}
	return served
}

// TestAgentMetrics: an agent's lookup and heartbeat are counted ok, a
// lookup no node answers and a heartbeat with a wrong token refused.
func TestAgentMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		me := agentFrom(srv, "10.0.0.2")
		id := agentNode(t, srv, cs["system-admin"], "am", "clean wait", "52:54:00:dd:00:01")
		before := scrape(t, srv.URL)
		tok := lookupToken(t, me.Do(t, "GET", "/v1/lookup?node_uuid="+id, nil)).(string)
		wantFault(t, me.Do(t, "GET", "/v1/lookup?addresses=52:54:00:dd:00:99", nil), 404)
		const cb = "https://10.0.0.2:9999"
		mustStatus(t, me.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok)), 202)
		mustStatus(t, me.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok)), 202)
		wantFault(t, me.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok+"x")), 400)
		moved(t, before, scrape(t, srv.URL), map[string]float64{
			`anvil_agent_lookups_total{outcome="ok"}`:         1,
			`anvil_agent_lookups_total{outcome="refused"}`:    1,
			`anvil_agent_lookups_total{outcome="failed"}`:     0,
			`anvil_agent_heartbeats_total{outcome="ok"}`:      2,
			`anvil_agent_heartbeats_total{outcome="refused"}`: 1,
		})
	})
}
