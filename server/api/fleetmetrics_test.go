package api_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestFleetMetrics scrapes /metrics from a running server whose nodes are
// in several states: each state, maintenance flag, fault and conductor
// group is counted as the database holds them, the conductor that serves
// reports itself online with a heartbeat, and the build is named.
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

// TestAlertRulesNameRealMetrics: every metric the shipped alert rules
// (deploy/prometheus) name is one a running server serves, after a
// request and with a node, so that no alert silently never fires.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	srv, clients := startLocal(t, storetest.Setting(t, "sqlite"))
	mustStatus(t, clients["system-admin"].Do(t, "POST", "/v1/nodes", map[string]any{"name": "alerts", "driver": "fake-hardware"}), 201)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)`).FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				served[m[1]+s] = true
			}
		}
	}
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
			for _, name := range regexp.MustCompile(`\b(?:anvil|go_sql)_[a-z_]+`).FindAllString(r.Expr, -1) {
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
