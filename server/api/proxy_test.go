package api_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/internal/proxytest"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestBehindNginx runs the reverse-proxy recipe (deploy/nginx/anvil.conf)
// in Debian's nginx in front of Anvil with --trusted-proxies naming it:
// see behindProxy for what it checks.
func TestBehindNginx(t *testing.T) {
	proxytest.Need(t, "nginx", "nginx-light")
	srv := startBehindProxy(t)
	behindProxy(t, srv, proxytest.Nginx(t, strings.TrimPrefix(srv.URL, "http://")))
}

// TestBehindCaddy runs the Caddy recipe (deploy/caddy/Caddyfile) in
// Debian's caddy in front of Anvil with --trusted-proxies naming it, and
// checks what TestBehindNginx does.
func TestBehindCaddy(t *testing.T) {
	proxytest.Need(t, "caddy", "caddy")
	srv := startBehindProxy(t)
	behindProxy(t, srv, proxytest.Caddy(t, strings.TrimPrefix(srv.URL, "http://")))
}

// startBehindProxy serves Anvil trusting 127.0.0.1/32 as its proxy, with
// a system reader pat besides startLocal's personas.
func startBehindProxy(t *testing.T) *servertest.Server {
	t.Helper()
	_, lo, _ := net.ParseCIDR("127.0.0.1/32")
	srv, _ := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{TrustedProxies: []net.IPNet{*lo}})
	ctx := context.Background()
	if err := srv.IDs.CreateUser(ctx, "pat", "pat-password-12"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{System: true}, Role: "reader"}); err != nil {
		t.Fatal(err)
	}
	return srv
}

// behindProxy checks Anvil through a proxy recipe: the portal's cookie
// is Secure; login throttling sees each client's own address through
// X-Forwarded-For, so one address's failed guesses do not lock out a
// colleague who comes through the same proxy from another (without
// --trusted-proxies every client looks like the proxy, and this fails);
// the URLs Anvil hands out name the proxy, https; and Debian's
// baremetal CLI works through it verifying its certificate.
func behindProxy(t *testing.T, srv *servertest.Server, p *proxytest.Proxy) {
	t.Helper()
	get := func(c *http.Client, path, user, pw string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", p.URL+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s through the proxy: %v\n%s", path, err, p.Log())
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	a, b := p.Client("127.0.0.2"), p.Client("127.0.0.3")

	// The portal's cookie is Secure: the proxy said https.
	resp, err := a.Get(p.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "Secure") {
		t.Errorf("the portal's cookie through the proxy is not Secure: %q", ck)
	}

	// Guesses from one address throttle that address only.
	for range 6 {
		if st := get(a, "/v1/nodes", "pat", "wrong-password-1"); st != 401 && st != 429 {
			t.Fatalf("a wrong password: %d", st)
		}
	}
	if st := get(a, "/v1/nodes", "pat", "pat-password-12"); st == 200 {
		t.Error("the guessing address was not throttled: the proxy's X-Forwarded-For was not read, or throttling is off")
	}
	if st := get(b, "/v1/nodes", "pat", "pat-password-12"); st != 200 {
		t.Errorf("another address through the same proxy: %d, want 200 (all clients look like the proxy)", st)
	}

	// Debian's baremetal CLI through the proxy, verifying its certificate.
	cl := newCLI(t, p.URL, "--os-auth-type", "http_basic", "--os-username", "system-admin", "--os-password", "password-system-admin", "--os-cacert", p.CAFile)
	cl.run(false, "node", "create", "--driver", "fake-hardware", "--name", "via-proxy")
	cl.run(false, "node", "create", "--driver", "fake-hardware", "--name", "via-proxy-2")
	if got := names(cl.json("node", "list")); len(got) != 2 {
		t.Errorf("node list through the proxy: %v", got)
	}
	p.CheckHandedOutURLs(t, "system-admin", "password-system-admin")
}

// TestForwardedSchemeFromTrustedProxiesOnly: X-Forwarded-Proto and
// X-Forwarded-Host change the URLs Anvil hands out and the portal
// cookie's Secure flag only from a peer in --trusted-proxies; from
// anyone else the connection's own scheme and Host stand.
func TestForwardedSchemeFromTrustedProxiesOnly(t *testing.T) {
	_, lo, _ := net.ParseCIDR("127.0.0.1/32")
	_, other, _ := net.ParseCIDR("192.0.2.0/24")
	for _, tc := range []struct {
		name    string
		trusted net.IPNet
		want    string
	}{{"trusted", *lo, "https://proxy.example.com/v1/"}, {"untrusted", *other, "http://127.0.0.1"}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), TrustedProxies: []net.IPNet{tc.trusted}})
			req, _ := http.NewRequest("GET", srv.URL+"/v1", nil)
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "proxy.example.com")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var v struct{ Links []struct{ Href string } }
			if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Links) == 0 {
				t.Fatalf("GET /v1: %v %+v", err, v)
			}
			if h := v.Links[0].Href; !strings.HasPrefix(h, tc.want) {
				t.Errorf("link %q, want it to start %q", h, tc.want)
			}
			lreq, _ := http.NewRequest("GET", srv.URL+"/login", nil)
			lreq.Header.Set("X-Forwarded-Proto", "https")
			fr, err := http.DefaultClient.Do(lreq)
			if err != nil {
				t.Fatal(err)
			}
			fr.Body.Close()
			if secure := strings.Contains(fr.Header.Get("Set-Cookie"), "Secure"); secure != (tc.name == "trusted") {
				t.Errorf("portal cookie Secure=%v with X-Forwarded-Proto https from a %s peer: %q", secure, tc.name, fr.Header.Get("Set-Cookie"))
			}
		})
	}
}
