package obs_test

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/obs"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
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

// TestMetricsToken: with --metrics-token set, /metrics answers only the
// request that carries it, on both databases.
func TestMetricsToken(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting, MetricsToken: "scrape-secret"})
		for _, c := range []struct {
			auth string
			want int
		}{{"", 401}, {"Bearer wrong", 401}, {"Bearer scrape-secret-longer", 401}, {"scrape-secret", 401}, {"Bearer scrape-secret", 200}} {
			st, body := scrape(t, srv.URL, "Authorization", c.auth)
			if st != c.want {
				t.Errorf("Authorization %q: %d, want %d", c.auth, st, c.want)
			}
			if st != 200 && strings.Contains(body, "anvil_http_requests_total") {
				t.Errorf("Authorization %q: the metrics were shown", c.auth)
			}
		}
	})
}

// TestMetricsLoopbackOnly: without a token, /metrics answers a scraper on
// loopback and refuses one a proxy forwarded, whatever address the proxy
// names; a peer elsewhere is refused too.
func TestMetricsLoopbackOnly(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		if st, body := scrape(t, srv.URL, "", ""); st != 200 || !strings.Contains(body, "anvil_http_requests_total") {
			t.Fatalf("loopback scrape: %d", st)
		}
		for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			if st, _ := scrape(t, srv.URL, h, "127.0.0.1"); st != 404 {
				t.Errorf("scrape forwarded with %s: %d, want 404", h, st)
			}
		}
	})
	for peer, want := range map[string]bool{"127.0.0.1": true, "::1": true, "::ffff:127.0.0.1": true,
		"10.0.0.5": false, "192.0.2.1": false, "2001:db8::1": false, "0.0.0.0": false} {
		if got := obs.LocalScrape(netip.MustParseAddr(peer), false); got != want {
			t.Errorf("LocalScrape(%s) = %v, want %v", peer, got, want)
		}
	}
	if obs.LocalScrape(netip.MustParseAddr("127.0.0.1"), true) {
		t.Error("a forwarded request from a local proxy may scrape")
	}
}

func scrape(t *testing.T, base, header, value string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if header != "" && value != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPprofGuarded: --pprof serves the heap profile to whoever may read
// /metrics (here: the metrics token) and nobody else; without --pprof
// there are no profiles. The live heap is in /metrics either way.
func TestPprofGuarded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		get := func(base, auth string) (int, string) {
			req, _ := http.NewRequest("GET", base+"/debug/pprof/heap?debug=1", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		on := servertest.Start(t, server.Options{Database: setting, MetricsToken: "scrape-secret", Pprof: true})
		if st, body := get(on.URL, "Bearer scrape-secret"); st != 200 || !strings.Contains(body, "heap profile") {
			t.Errorf("heap profile with the metrics token: %d %.80q", st, body)
		}
		if st, body := get(on.URL, "Bearer wrong"); st != 401 || strings.Contains(body, "heap profile") {
			t.Errorf("heap profile with a wrong token: %d %.80q", st, body)
		}
		off := servertest.Start(t, server.Options{Database: setting})
		if st, body := get(off.URL, ""); strings.Contains(body, "heap profile") {
			t.Errorf("heap profile without --pprof: %d %.80q", st, body)
		}
		if st, body := scrape(t, off.URL, "", ""); st != 200 || !strings.Contains(body, "go_gc_heap_live_bytes") {
			t.Errorf("/metrics without the live heap: %d", st)
		}
	})
}
