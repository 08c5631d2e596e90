package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAuthNoneHost: --auth none acts as a system admin for whoever
// reaches it, so it answers only requests addressed to loopback (by
// address or localhost) or the listen name. A page that rebinds its own
// name to 127.0.0.1 sends that name as Host and is refused before
// anything happens.
func TestAuthNoneHost(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		s := servertest.Start(t, server.Options{Database: setting, AuthNone: true, ListenName: "anvil.dev.internal"})
		send := func(host, method, path, body string) (int, string) {
			t.Helper()
			req, err := http.NewRequest(method, s.URL+path, bytes.NewReader([]byte(body)))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		port := s.URL[strings.LastIndex(s.URL, ":"):]
		for _, host := range []string{"attacker.example", "attacker.example" + port, "10.0.0.1" + port, "127.0.0.1.attacker.example"} {
			if st, b := send(host, "POST", "/v1/nodes", `{"name":"rebound","driver":"fake-hardware"}`); st != 403 || !strings.Contains(b, "loopback") {
				t.Errorf("Host %s: %d %s, want 403", host, st, b)
			}
			if st, _ := send(host, "GET", "/v1/nodes", ""); st != 403 {
				t.Errorf("Host %s: list %d, want 403", host, st)
			}
		}
		for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "[::1]" + port, "anvil.dev.internal" + port, "LOCALHOST"} {
			if st, b := send(host, "GET", "/v1/nodes", ""); st != 200 {
				t.Errorf("Host %s: %d %s, want 200", host, st, b)
			} else if strings.Contains(b, "rebound") {
				t.Errorf("a refused request created a node: %s", b)
			}
		}
	})
}
