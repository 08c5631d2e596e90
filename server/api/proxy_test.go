package api_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/server/tlscert/tlscerttest"
)

// TestBehindNginx runs the reverse-proxy recipe (deploy/nginx/anvil.conf)
// in Debian's nginx in front of Anvil with --trusted-proxies naming it:
// the baremetal CLI works through it over TLS; the portal's cookie is
// Secure; and login throttling sees each client's own address through
// X-Forwarded-For, so one address's failed guesses do not lock out a
// colleague who comes through the same proxy from another.
func TestBehindNginx(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("nginx (Debian nginx-light) is required in CI")
		}
		t.Skip("skipping: nginx (Debian nginx-light) is not installed")
	}
	_, lo, _ := net.ParseCIDR("127.0.0.1/32")
	srv, _ := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{TrustedProxies: []net.IPNet{*lo}})
	ctx := context.Background()
	if err := srv.IDs.CreateUser(ctx, "pat", "pat-password-12"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IDs.Grant(ctx, "pat", identity.Assignment{Scope: identity.Scope{System: true}, Role: "reader"}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cert, key := filepath.Join(dir, "anvil.crt"), filepath.Join(dir, "anvil.key")
	ca := tlscerttest.NewCA(t, "proxy test CA")
	ca.Issue(t, cert, key)
	port := testport.TCP(t)
	recipe, err := os.ReadFile("../../deploy/nginx/anvil.conf")
	if err != nil {
		t.Fatal(err)
	}
	site := strings.NewReplacer(
		"listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port),
		"server 127.0.0.1:6385;", "server "+strings.TrimPrefix(srv.URL, "http://")+";",
		"/etc/ssl/anvil/anvil.crt", cert, "/etc/ssl/anvil/anvil.key", key,
	).Replace(string(recipe))
	if site == string(recipe) || strings.Contains(site, "6385") {
		t.Fatal("the recipe's listen, upstream or certificate lines changed: update this test's replacements")
	}
	// What Debian's /etc/nginx/nginx.conf gives the file, with paths a
	// test may write.
	conf := filepath.Join(dir, "nginx.conf")
	main := fmt.Sprintf(`daemon off; pid %[1]s/nginx.pid; error_log %[1]s/error.log; worker_processes 1;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, site)
	if os.Geteuid() == 0 {
		main = "user root root;\n" + main // its workers read the test's files
	}
	if err := os.WriteFile(conf, []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-c", conf, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	out := &lockedLog{errorLog: filepath.Join(dir, "error.log")}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that the cleanup ends the workers too
	// (they hold the output pipe open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	url := fmt.Sprintf("https://127.0.0.1:%d", port)

	pool := x509.NewCertPool()
	for _, c := range ca.Certs() {
		pool.AddCert(c)
	}
	// from is a client whose connections to nginx come from source.
	from := func(source string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	get := func(c *http.Client, path, user, pw string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s through nginx: %v\n%s", path, err, out.String())
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	a, b := from("127.0.0.2"), from("127.0.0.3")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := a.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer:\n%s", out.String())
		}
	}

	// The portal's cookie is Secure: the proxy said https.
	resp, err := a.Get(url + "/login")
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
	caFile := filepath.Join(dir, "ca.pem")
	var pemCA []byte
	for _, c := range ca.Certs() {
		pemCA = append(pemCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(caFile, pemCA, 0o600); err != nil {
		t.Fatal(err)
	}
	cl := newCLI(t, url, "--os-auth-type", "http_basic", "--os-username", "system-admin", "--os-password", "password-system-admin", "--os-cacert", caFile)
	cl.run(false, "node", "create", "--driver", "fake-hardware", "--name", "via-nginx")
	if got := names(cl.json("node", "list")); len(got) != 1 || got[0] != "via-nginx" {
		t.Errorf("node list through nginx: %v", got)
	}
}

// lockedLog is nginx's output, read while it writes, and its error log.
type lockedLog struct {
	mu       sync.Mutex
	b        strings.Builder
	errorLog string
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs, _ := os.ReadFile(l.errorLog)
	return l.b.String() + string(errs)
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
