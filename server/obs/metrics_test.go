package obs_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestMetricsLabelsSurviveTheRequest: labels are kept after fasthttp
// reuses the request's buffers, so a mix of methods and paths leaves
// /metrics answering with valid methods only.
func TestMetricsLabelsSurviveTheRequest(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	methods := []string{"PUT", "POST", "DELETE", "PATCH", "GET", "OPTIONS"}
	paths := []string{"/logout", "/login", "/v1/nodes", "/nothing-here", "/nodes/x/power"}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 60 {
				req, _ := http.NewRequest(methods[(w+i)%len(methods)], srv.URL+paths[(w*7+i)%len(paths)], strings.NewReader(fmt.Sprint("x=", i)))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	r := srv.Client().Do(t, "GET", "/metrics", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics answered %d:\n%s", r.Status, r.Body)
	}
	valid := map[string]bool{}
	for _, m := range methods {
		valid[m] = true
	}
	found := 0
	for _, m := range regexp.MustCompile(`anvil_http_requests_total\{[^}]*method="([^"]*)"`).FindAllStringSubmatch(string(r.Body), -1) {
		found++
		if !valid[m[1]] {
			t.Errorf("label method=%q", m[1])
		}
	}
	if found == 0 {
		t.Fatal("no request metrics")
	}
}
