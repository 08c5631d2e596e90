package clientsuites_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/proxytest"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
)

// TestClientSuitesBehindNginx runs the clients through the nginx recipe
// (deploy/nginx/anvil.conf, Debian's nginx) over TLS, Anvil trusting the
// proxy in --trusted-proxies as an operator would start it:
// openstacksdk's functional baremetal tests (HTTP Basic), Debian's
// baremetal CLI, and ironic-tempest-plugin's API tests (Debian's
// package), which sign in through Anvil's Identity endpoint and so take
// the baremetal endpoint from a catalog Anvil wrote. Every client
// verifies the proxy's certificate with its CA. Each suite is held to the
// bar of its direct run, with the same allowed-failures lists, on an
// Anvil and an nginx of its own.
//
// The URLs Anvil hands out (links, next markers, Location, the catalog)
// must lead back through the proxy: they are checked to name it, https,
// and nginx must have forwarded at least as many requests as Anvil
// served, so that no client followed one around the proxy.
func TestClientSuitesBehindNginx(t *testing.T) {
	proxytest.Need(t, "nginx", "nginx-light")
	behind := func(t *testing.T) (*anvil, *proxytest.Proxy) {
		t.Helper()
		_, lo, _ := net.ParseCIDR("127.0.0.1/32")
		a := startAnvilWith(t, server.Options{TrustedProxies: []net.IPNet{*lo}})
		direct := served(a) // servertest's own check that it answers
		p := proxytest.Nginx(t, strings.TrimPrefix(a.URL, "http://"))
		// Before nginx stops (cleanups run last first).
		t.Cleanup(func() {
			// nginx logs a request once it has sent the answer, so the
			// last may reach its log just after the client saw it.
			n, fwd := served(a)-direct, p.Requests(t)
			for deadline := time.Now().Add(3 * time.Second); n > fwd && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				n, fwd = served(a)-direct, p.Requests(t)
			}
			if n > fwd {
				t.Errorf("Anvil served %d requests, nginx forwarded %d: a client went around the proxy, following a URL Anvil handed out\nAnvil's log:\n%s\nnginx's access log:\n%s", n, fwd, a.log.String(), p.AccessLog(t))
			}
		})
		return a, p
	}
	t.Run("openstacksdk", func(t *testing.T) {
		needSDK(t)
		a, p := behind(t)
		rs := runSDK(t, sdkClouds("http_basic", p.URL, p.CAFile))
		report(t, "openstacksdk through nginx", rs, a)
		checkSDK(t, rs, allowedFailures(t, "sdk-allowed-failures.txt"), map[string]bool{})
	})
	t.Run("baremetal", func(t *testing.T) {
		bin, err := exec.LookPath("baremetal")
		need(t, "the baremetal CLI (python3-ironicclient)", err)
		a, p := behind(t)
		run := func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"--os-endpoint", p.URL, "--os-auth-type", "http_basic",
				"--os-username", identity.BootstrapUser, "--os-password", adminPassword, "--os-cacert", p.CAFile}, args...)...)
			cmd.Env = env("PYTHONWARNINGS=ignore")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("baremetal %s: %v\n%s\nAnvil refused: %v\nnginx: %s", strings.Join(args, " "), err, stderr.String(), a.refusals(), p.Log())
			}
			return string(out)
		}
		run("node", "create", "--driver", "fake-hardware", "--name", "via-nginx")
		run("node", "set", "via-nginx", "--extra", "rack=r1")
		run("node", "manage", "via-nginx", "--wait", "60")
		run("node", "provide", "via-nginx", "--wait", "60")
		var node map[string]any
		if err := json.Unmarshal([]byte(run("node", "show", "via-nginx", "-f", "json")), &node); err != nil {
			t.Fatal(err)
		}
		if node["provision_state"] != "available" || !strings.Contains(strings.ReplaceAll(string(mustJSON(node["extra"])), " ", ""), `"rack":"r1"`) {
			t.Errorf("node through nginx: provision_state %v, extra %v", node["provision_state"], node["extra"])
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(run("node", "list", "-f", "json")), &rows); err != nil || len(rows) != 1 {
			t.Errorf("node list through nginx: %v %v", rows, err)
		}
		p.CheckHandedOutURLs(t, identity.BootstrapUser, adminPassword)
	})
	t.Run("tempest", func(t *testing.T) {
		needTempest(t)
		a, p := behind(t)
		rs := runTempest(t, a, p.URL, p.CAFile, "debian through nginx", tempestTop)
		checkTempest(t, rs, allowedFailures(t, "tempest-allowed-failures.txt"), map[string]bool{}, map[string]bool{})
	})
}

// served counts the requests Anvil has logged.
func served(a *anvil) int { return strings.Count(a.log.String(), "msg=request ") }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
