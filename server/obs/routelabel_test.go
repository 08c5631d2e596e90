package obs_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestRefusalsCountedByRoute: a request refused before its handler ran —
// no credentials (401) — is counted under the route it asked for, not
// under the middleware's mount point, so a dashboard shows which API a
// client without a token keeps calling.
func TestRefusalsCountedByRoute(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	for _, p := range []string{"/v1/nodes", "/v1/nodes/abc/states/power", "/v1/nodes/abc/states/power"} {
		req, _ := http.NewRequest("PUT", srv.URL+p, strings.NewReader("{}"))
		if p == "/v1/nodes" {
			req.Method = "GET"
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s %s: %d, want 401", req.Method, p, resp.StatusCode)
		}
	}
	body := string(srv.Client().Do(t, "GET", "/metrics", nil).Body)
	for _, want := range []string{
		`anvil_http_requests_total{method="GET",route="/v1/nodes",status="401"} 1`,
		`anvil_http_requests_total{method="PUT",route="/v1/nodes/:node/states/power",status="401"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s; the 401s it counts:\n%s", want, grep401(body))
		}
	}
}

func grep401(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, `status="401"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
