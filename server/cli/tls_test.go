package cli_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/tlscert/tlscerttest"
)

// TestServeTLS runs `anvil serve --tls-cert --tls-key` as an operator
// would: it answers HTTPS with HSTS, its plain-HTTP listener redirects
// to it, and a renewed certificate written over the files is served
// without a restart while a client keeps opening new connections, none
// of which fails.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	oldCA, newCA := tlscerttest.NewCA(t, "old CA"), tlscerttest.NewCA(t, "new CA")
	first := oldCA.Issue(t, cert, key)

	addr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	plain := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	logs, stopServe := startServe(t, filepath.Join(dir, "anvil.db"), "--listen", addr,
		"--tls-cert", cert, "--tls-key", key, "--tls-reload-interval", "100ms", "--tls-redirect-listen", plain)
	defer stopServe()

	// Trusts both CAs, and opens a new connection for every request so
	// that each one is a handshake with the pair served at that moment.
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: bothCAs(oldCA, newCA)}}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	url := "https://" + addr
	get := func() (*http.Response, error) {
		r, err := client.Get(url + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return r, err
	}
	var r *http.Response
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if r, err = get(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer HTTPS: %v\n%s", err, logs.String())
		}
	}
	if r.StatusCode != 200 || r.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatalf("first answer: status %d, serial %v; want 200 and %v", r.StatusCode, r.TLS.PeerCertificates[0].SerialNumber, first)
	}
	if h := r.Header.Get("Strict-Transport-Security"); h != "max-age=31536000" {
		t.Errorf("Strict-Transport-Security %q, want max-age=31536000", h)
	}
	// Plain HTTP on the TLS port is no way in.
	if pr, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz"); err == nil {
		pr.Body.Close()
		if pr.StatusCode == 200 {
			t.Error("plain HTTP on the TLS listener answered 200")
		}
	}
	// The redirect keeps the path and query.
	rr, err := client.Get("http://" + plain + "/v1/nodes?limit=2")
	if err != nil {
		t.Fatal(err)
	}
	rr.Body.Close()
	_, port, _ := strings.Cut(addr, ":")
	if want := "https://127.0.0.1:" + port + "/v1/nodes?limit=2"; rr.StatusCode != 308 || rr.Header.Get("Location") != want {
		t.Errorf("plain listener: %d to %q, want 308 to %q", rr.StatusCode, rr.Header.Get("Location"), want)
	}

	// Rotation under load: four clients keep connecting while the
	// files are replaced by a certificate from another CA.
	var failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, err := get(); err != nil || r.StatusCode != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err, r))
				}
			}
		})
	}
	second := newCA.Issue(t, cert, key)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := get()
		if err == nil && r.TLS.PeerCertificates[0].SerialNumber.Cmp(second) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate %v was not served within 20 s\n%s", second, logs.String())
		}
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed during the rotation, the first: %v", n, firstErr.Load())
	}
	// The start line names the scheme served and the build.
	if start := regexp.MustCompile(`msg="anvil serving" listen=(\S+) .*version=\S+ commit=\S+`).FindStringSubmatch(logs.String()); start == nil || start[1] != url {
		t.Errorf("start line %v, want listen=%s with the version and commit:\n%s", start, url, logs.String())
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}

func bothCAs(cas ...*tlscerttest.CA) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		for _, c := range ca.Certs() {
			pool.AddCert(c)
		}
	}
	return pool
}
