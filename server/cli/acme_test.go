package cli_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/tlscert/tlscerttest"
)

// pebble is the ACME test server TestServeACME issues from: Let's
// Encrypt's Pebble, built from the module proxy into the test's own
// directory, so it is not a dependency of Anvil's module.
const pebble = "github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3"

// acmeName is the name Anvil asks a certificate for; the test's DNS
// server tells Pebble it is 127.0.0.1. (autocert wants a name with a
// dot, so not localhost.)
const acmeName = "anvil.test"

// TestServeACME runs `anvil serve --acme-domain` against a real ACME CA,
// Pebble, which validates the challenge for real (PEBBLE_VA_ALWAYS_VALID
// is not set): TLS-ALPN-01 on Anvil's TLS listener; and, with Pebble
// told to try TLS-ALPN-01 on a port where nothing listens, HTTP-01 on the
// --tls-redirect-listen listener, which autocert falls back to. Anvil
// then serves a certificate for the name that Pebble's root verifies;
// after a restart, with Pebble stopped, it serves the same one from its
// cache.
func TestServeACME(t *testing.T) {
	bin := buildPebble(t, t.TempDir())
	t.Run("tls-alpn-01", func(t *testing.T) { serveACME(t, bin, false) })
	t.Run("http-01", func(t *testing.T) { serveACME(t, bin, true) })
}

// serveACME is one run of TestServeACME: HTTP-01 only when http01.
func serveACME(t *testing.T, bin string, http01 bool) {
	dir := t.TempDir()

	// Pebble's own HTTPS, from a throwaway CA that --acme-ca names.
	ca := tlscerttest.NewCA(t, "pebble listener CA")
	pcert, pkey, caFile := filepath.Join(dir, "pebble.crt"), filepath.Join(dir, "pebble.key"), filepath.Join(dir, "ca.pem")
	ca.Issue(t, pcert, pkey)
	var caPEM []byte
	for _, c := range ca.Certs() {
		caPEM = append(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	anvilPort, plainPort, acmePort, mgmtPort := testport.TCP(t), testport.TCP(t), testport.TCP(t), testport.TCP(t)
	alpnPort := anvilPort
	if http01 {
		alpnPort = testport.TCP(t) // reserved, and nothing listens on it
	}
	dns := serveDNS(t)

	conf := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", acmePort),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmtPort),
		"certificate":             pcert, "privateKey": pkey,
		// Where its validation authority connects to the name's address.
		"httpPort": plainPort, "tlsPort": alpnPort,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	cb, _ := json.Marshal(conf)
	cfg := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfg, cb, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg, "-dnsserver", dns)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	caPool := x509.NewCertPool()
	caPool.AppendCertsFromPEM(caPEM)
	pc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}}}
	directory := fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort)
	waitOK(t, pc, directory, out)

	// The root Pebble made at start, which a client of Anvil trusts.
	resp, err := pc.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmtPort))
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("Pebble's root: %s", rootPEM)
	}

	db := filepath.Join(dir, "anvil.db")
	flags := []string{"--listen", fmt.Sprintf("127.0.0.1:%d", anvilPort), "--tls-redirect-listen", fmt.Sprintf("127.0.0.1:%d", plainPort),
		"--acme-domain", acmeName, "--acme-directory", directory, "--acme-ca", caFile, "--acme-email", "ops@example.com"}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", anvilPort))
		},
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	served := func(logs *syncbuf.Buffer) *x509.Certificate {
		t.Helper()
		var last error
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			r, err := client.Get("https://" + acmeName + "/healthz")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == 200 {
					return r.TLS.PeerCertificates[0]
				}
				err = fmt.Errorf("status %d", r.StatusCode)
			}
			last = err
		}
		t.Fatalf("Anvil did not serve a certificate from Pebble for %s: %v\nAnvil:\n%s\nPebble:\n%s", acmeName, last, logs.String(), out.String())
		return nil
	}

	logs, stop := startServe(t, db, flags...)
	leaf := served(logs)
	if !slices.Contains(leaf.DNSNames, acmeName) {
		t.Errorf("served certificate names %v, want %s", leaf.DNSNames, acmeName)
	}
	// Issued because a challenge was validated, not waved through.
	if !strings.Contains(out.String(), "set VALID by completed challenge") {
		t.Errorf("Pebble did not log a validated challenge:\n%s", out.String())
	}
	if http01 && !strings.Contains(out.String(), "Attempting to validate w/ HTTP: http://"+acmeName+fmt.Sprintf(":%d/.well-known/acme-challenge/", plainPort)) {
		t.Errorf("Pebble did not validate HTTP-01 on the redirect listener:\n%s", out.String())
	}
	// Logged by serve's own request at start, which may finish just
	// after the client's handshake that waited on the same order.
	ready := `msg="ACME certificate ready" domain=` + acmeName
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), ready) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), ready) {
		t.Errorf("no ready line logged:\n%s", logs.String())
	}
	// The plain listener still redirects, to the name.
	nr := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/v1/nodes", plainPort), nil)
	req.Host = acmeName
	if r, err := nr.Do(req); err != nil {
		t.Error(err)
	} else {
		r.Body.Close()
		if want := fmt.Sprintf("https://%s:%d/v1/nodes", acmeName, anvilPort); r.StatusCode != 308 || r.Header.Get("Location") != want {
			t.Errorf("plain listener: %d to %q, want 308 to %q", r.StatusCode, r.Header.Get("Location"), want)
		}
	}
	stop()
	if http01 {
		return
	}

	// A restart serves the cached certificate: Pebble issues each
	// certificate with a new serial, so the same one means no new order.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP) // Pebble cannot answer now
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT) }()
	logs, stop = startServe(t, db, flags...)
	defer stop()
	if again := served(logs); again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("after a restart, serial %v, want the cached %v", again.SerialNumber, leaf.SerialNumber)
	}
}

// TestACMEFlagsRefused: ACME settings are checked before serve listens,
// each error naming its flag.
func TestACMEFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--acme-domain", "anvil.example.com", "--tls-cert", "a.crt", "--tls-key", "a.key"}, "--acme-domain and --tls-cert/--tls-key both choose the certificate"},
		{[]string{"--acme-email", "ops@example.com"}, "--acme-email configures ACME: give --acme-domain too"},
		{[]string{"--acme-directory", "https://acme.example.com/dir"}, "--acme-directory configures ACME: give --acme-domain too"},
		{[]string{"--acme-domain", "localhost"}, `--acme-domain "localhost": give a fully qualified DNS name`},
		{[]string{"--acme-domain", "*.example.com"}, `--acme-domain "*.example.com": a wildcard needs the DNS-01 challenge`},
		{[]string{"--acme-domain", "192.0.2.7"}, `--acme-domain "192.0.2.7": an IP address`},
		{[]string{"--acme-domain", "anvil.example.com,a_b.example.com"}, `--acme-domain "a_b.example.com": '_' is not a letter`},
		{[]string{"--acme-domain", "anvil.example.com", "--acme-domain", "Anvil.example.com"}, `--acme-domain "Anvil.example.com": given twice`},
		{[]string{"--acme-domain", "anvil.example.com", "--acme-directory", "http://acme.example.com/dir"}, `--acme-directory "http://acme.example.com/dir": give the CA's https:// directory URL`},
		{[]string{"--acme-domain", "anvil.example.com", "--acme-email", "ops at example"}, `--acme-email "ops at example": give a bare e-mail address`},
		{[]string{"--acme-domain", "anvil.example.com", "--acme-ca", notPEM}, "--acme-ca " + notPEM + ": no PEM certificate in it"},
		{[]string{"--acme-domain", "anvil.example.com", "--acme-ca", filepath.Join(dir, "none.pem")}, "--acme-ca: open " + filepath.Join(dir, "none.pem")},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := run(t, "", append([]string{"serve", "--listen", "127.0.0.1:0", "--database", db}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve %v: %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
	// From the environment too.
	t.Setenv("ANVIL_ACME_CACHE_DIR", dir)
	if _, err := run(t, "", "serve", "--listen", "127.0.0.1:0", "--database", db); err == nil || !strings.Contains(err.Error(), "--acme-cache-dir configures ACME: give --acme-domain too") {
		t.Errorf("ANVIL_ACME_CACHE_DIR without a domain: %v", err)
	}
}

// buildPebble builds Pebble's command into dir with the go command (from
// the module cache once downloaded); without the go command or the
// module proxy the test skips outside CI and fails in it.
func buildPebble(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err == nil {
		cmd := exec.Command(goBin, "install", pebble)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=-trimpath")
		var out []byte
		if out, err = cmd.CombinedOutput(); err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("building %s is required in CI: %v", pebble, err)
		}
		t.Skipf("skipping: cannot build %s: %v", pebble, err)
	}
	return filepath.Join(dir, "pebble")
}

// serveDNS answers DNS over TCP (as Pebble's -dnsserver asks) on a
// loopback port until the test ends: 127.0.0.1 for an A query of any
// name, no records for anything else. It returns its address.
func serveDNS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if err := answerDNS(c); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// answerDNS reads one length-prefixed query from c and writes its answer.
func answerDNS(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var n uint16
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		return err
	}
	q := make([]byte, n)
	if _, err := io.ReadFull(c, q); err != nil {
		return err
	}
	var m dnsmessage.Message
	if err := m.Unpack(q); err != nil {
		return err
	}
	if len(m.Questions) != 1 {
		return errors.New("one question expected")
	}
	m.Header.Response, m.Header.Authoritative, m.Header.RCode = true, true, dnsmessage.RCodeSuccess
	if qq := m.Questions[0]; qq.Type == dnsmessage.TypeA {
		m.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
			Body: &dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}}}
	}
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...))
	return err
}

// waitOK waits for url to answer 200.
func waitOK(t *testing.T, c *http.Client, url string, out *syncbuf.Buffer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r, err := c.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer:\n%s", url, out.String())
		}
	}
}
