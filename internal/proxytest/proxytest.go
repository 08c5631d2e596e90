// Package proxytest runs the reverse-proxy recipes of deploy/ — Debian's
// nginx with deploy/nginx/anvil.conf, Caddy with deploy/caddy/Caddyfile —
// in front of a test's Anvil, as child processes on loopback ports, with
// TLS from a throwaway CA. Each recipe runs unchanged but for its
// addresses and certificate paths, so a test through it tests the file an
// operator copies.
package proxytest

import (
	"bufio"
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
	"github.com/anvilproject/anvil/server/tlscert/tlscerttest"
)

// Proxy is a running proxy in front of an Anvil.
type Proxy struct {
	// URL is the proxy's https:// address, 127.0.0.1 and a port.
	URL string
	// Cert and Key are the files it serves; CAFile, PEM, and Pool hold
	// the CA that signed them, for clients that verify it.
	Cert, Key, CAFile string
	Pool              *x509.CertPool

	out       *lockedLog
	accessLog string
}

// Log is the proxy's output and error log so far, for failure messages.
func (p *Proxy) Log() string { return p.out.String() }

// Requests counts the requests the proxy logged as forwarded (nginx's
// access log); -1 when the proxy keeps no such log.
func (p *Proxy) Requests(t testing.TB) int {
	t.Helper()
	if p.accessLog == "" {
		return -1
	}
	f, err := os.Open(p.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// AccessLog is the proxy's access log, for failure messages.
func (p *Proxy) AccessLog(t testing.TB) string {
	t.Helper()
	b, _ := os.ReadFile(p.accessLog)
	return string(b)
}

// Client is an HTTP client trusting the proxy's CA whose connections come
// from the loopback address source (127.0.0.2, …), so that a test can be
// several clients; it does not follow redirects.
func (p *Proxy) Client(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: p.Pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// CheckHandedOutURLs asks Anvil, through the proxy as user with password
// pw, for the answers that carry URLs (the version documents' links, a
// page's next marker, a created node's Location) and checks that each
// names the proxy: a client that follows them stays on it, over TLS. It
// creates two nodes, url-check-1 and url-check-2.
func (p *Proxy) CheckHandedOutURLs(t testing.TB, user, pw string) {
	t.Helper()
	c, base := p.Client("127.0.0.1"), p.URL
	do := func(method, path, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.SetBasicAuth(user, pw)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s through the proxy: %v", method, path, err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp, v
	}
	var urls []string
	var collect func(v any)
	collect = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				// Links to Ironic's documentation are not Anvil's.
				if s, ok := x.(string); ok && (k == "href" && v["rel"] != "describedby" || k == "next") {
					urls = append(urls, s)
				}
				collect(x)
			}
		case []any:
			for _, x := range v {
				collect(x)
			}
		}
	}
	for _, name := range []string{"url-check-1", "url-check-2"} {
		resp, _ := do("POST", "/v1/nodes", `{"driver": "fake-hardware", "name": "`+name+`"}`)
		if resp.StatusCode != 201 {
			t.Fatalf("node create through the proxy: %d", resp.StatusCode)
		}
		urls = append(urls, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/", "/v1", "/v1/nodes?limit=1", "/v1/nodes/detail?limit=1"} {
		_, v := do("GET", path, "")
		collect(v)
	}
	nexts := 0
	for _, u := range urls {
		if !strings.HasPrefix(u, base+"/") {
			t.Errorf("Anvil handed out %q through the proxy, want a URL under %s", u, base)
		}
		if strings.Contains(u, "marker=") {
			nexts++
		}
	}
	if nexts < 2 || len(urls) < 8 {
		t.Errorf("too few URLs to check (%d, %d next markers): %v", len(urls), nexts, urls)
	}
}

// Need skips the test outside CI when the proxy's binary is missing, and
// fails it in CI, where .ci/run installs it; it returns the binary's path.
func Need(t testing.TB, binary, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(binary)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (Debian %s) is required in CI", binary, pkg)
		}
		t.Skipf("skipping: %s (Debian %s) is not installed", binary, pkg)
	}
	return path
}

// Nginx runs deploy/nginx/anvil.conf in Debian's nginx, forwarding to the
// plain-HTTP Anvil at upstream (host:port), until the test ends. Its
// access log counts the requests it forwarded (Requests).
func Nginx(t testing.TB, upstream string) *Proxy {
	t.Helper()
	nginx := Need(t, "nginx", "nginx-light")
	p, dir, port := newProxy(t)
	recipe := readRecipe(t, "deploy/nginx/anvil.conf")
	site := strings.NewReplacer(
		"listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port),
		"server 127.0.0.1:6385;", "server "+upstream+";",
		"/etc/ssl/anvil/anvil.crt", p.Cert, "/etc/ssl/anvil/anvil.key", p.Key,
	).Replace(recipe)
	if site == recipe || strings.Contains(site, "6385") {
		t.Fatal("the nginx recipe's listen, upstream or certificate lines changed: update proxytest's replacements")
	}
	// What Debian's /etc/nginx/nginx.conf gives the file, with paths a
	// test may write.
	p.accessLog = filepath.Join(dir, "access.log")
	main := fmt.Sprintf(`daemon off; pid %[1]s/nginx.pid; error_log %[1]s/error.log; worker_processes 1;
events {}
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, site)
	if os.Geteuid() == 0 {
		main = "user root root;\n" + main // its workers read the test's files
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	p.out.errorLog = filepath.Join(dir, "error.log")
	start(t, p, exec.Command(nginx, "-c", conf, "-p", dir, "-e", p.out.errorLog))
	return p
}

// Caddy runs deploy/caddy/Caddyfile in Debian's caddy (`caddy run`, not
// its service), forwarding to the plain-HTTP Anvil at upstream
// (host:port), until the test ends. Its admin endpoint is off and its
// state is in the test's directory, so several run beside each other and
// beside a caddy service.
func Caddy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	caddy := Need(t, "caddy", "caddy")
	p, dir, port := newProxy(t)
	recipe := readRecipe(t, "deploy/caddy/Caddyfile")
	site := strings.NewReplacer(
		"anvil.example.com {", fmt.Sprintf("https://127.0.0.1:%d {", port),
		"reverse_proxy 127.0.0.1:6385", "reverse_proxy "+upstream,
		"/etc/ssl/anvil/anvil.crt", p.Cert, "/etc/ssl/anvil/anvil.key", p.Key,
	).Replace(recipe)
	if site == recipe || strings.Contains(site, "6385") || strings.Contains(site, "anvil.example.com") {
		t.Fatal("the Caddyfile recipe's site address, upstream or certificate lines changed: update proxytest's replacements")
	}
	// Global options an installed caddy takes from its service: no admin
	// endpoint (its default, localhost:2019, is one per machine) and no
	// listener on port 80 for HTTP-to-HTTPS redirects.
	conf := filepath.Join(dir, "Caddyfile")
	global := "{\n\tadmin off\n\tauto_https disable_redirects\n}\n\n"
	if err := os.WriteFile(conf, []byte(global+site), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--config", conf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	start(t, p, cmd)
	return p
}

// newProxy makes the proxy's certificate, signed by a new CA, in a
// temporary directory, and picks its port.
func newProxy(t testing.TB) (*Proxy, string, int) {
	t.Helper()
	dir := t.TempDir()
	p := &Proxy{Cert: filepath.Join(dir, "anvil.crt"), Key: filepath.Join(dir, "anvil.key"), CAFile: filepath.Join(dir, "ca.pem"),
		Pool: x509.NewCertPool(), out: &lockedLog{}}
	ca := tlscerttest.NewCA(t, "proxy test CA")
	ca.Issue(t, p.Cert, p.Key)
	var pemCA []byte
	for _, c := range ca.Certs() {
		p.Pool.AddCert(c)
		pemCA = append(pemCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(p.CAFile, pemCA, 0o600); err != nil {
		t.Fatal(err)
	}
	port := testport.TCP(t)
	p.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	return p, dir, port
}

// start runs the proxy in a process group of its own, so that the cleanup
// ends its workers too (they hold the output pipe open), and waits until
// it forwards /healthz.
func start(t testing.TB, p *Proxy, cmd *exec.Cmd) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited })
	c := p.Client("127.0.0.1")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("%s exited: %v\n%s", filepath.Base(cmd.Path), err, p.Log())
		default:
		}
		if resp, err := c.Get(p.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not forward /healthz within 20 s:\n%s", filepath.Base(cmd.Path), p.Log())
		}
	}
}

// readRecipe reads a file of the repository by its path from the root,
// found as the directory above the test's holding go.mod.
func readRecipe(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatalf("no go.mod above the test's directory to find %s from", rel)
		}
		dir = up
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lockedLog is the proxy's output, read while it writes, and its error
// log file when it keeps one.
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
	s := l.b.String()
	if l.errorLog != "" {
		errs, _ := os.ReadFile(l.errorLog)
		s += string(errs)
	}
	return s
}
