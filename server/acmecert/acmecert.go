// Package acmecert obtains and renews the server's certificate from an
// ACME certificate authority (Let's Encrypt, or a private one such as
// step-ca or Pebble) with golang.org/x/crypto/acme/autocert, for
// --acme-domain. It answers the CA's TLS-ALPN-01 challenge on the TLS
// listener itself, and HTTP-01 on the plain-HTTP redirect listener when
// there is one; certificates and the account key are kept in a cache
// directory, so a restart does not ask the CA again.
package acmecert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// DefaultDirectory is Let's Encrypt's production directory.
const DefaultDirectory = autocert.DefaultACMEDirectory

// Config is what the --acme-* flags give.
type Config struct {
	// Domains are the names the certificate is for; the first is the one
	// Anvil's URLs name by default.
	Domains []string
	// Directory is the CA's ACME directory URL.
	Directory string
	// Email is the account's contact, for the CA's expiry notices; may
	// be empty.
	Email string
	// CacheDir keeps the account key and certificates.
	CacheDir string
	// CAFile, when set, is a PEM bundle of the CAs trusted for the
	// directory's own HTTPS instead of the system's.
	CAFile string
}

// Enabled reports whether ACME was asked for.
func (c Config) Enabled() bool { return len(c.Domains) > 0 }

// Validate checks the flags before anything starts, naming the flag at
// fault.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for i, d := range c.Domains {
		d = strings.ToLower(strings.TrimSpace(d))
		if err := checkDomain(d); err != nil {
			return fmt.Errorf("--acme-domain %q: %w", c.Domains[i], err)
		}
		if seen[d] {
			return fmt.Errorf("--acme-domain %q: given twice", c.Domains[i])
		}
		seen[d] = true
		c.Domains[i] = d
	}
	u, err := url.Parse(c.Directory)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || strings.ContainsAny(c.Directory, " \t\r\n") {
		return fmt.Errorf("--acme-directory %q: give the CA's https:// directory URL, such as %s", c.Directory, DefaultDirectory)
	}
	if c.Email != "" {
		if a, err := mail.ParseAddress(c.Email); err != nil || a.Address != c.Email {
			return fmt.Errorf("--acme-email %q: give a bare e-mail address such as ops@example.com", c.Email)
		}
	}
	if c.CacheDir == "" {
		return errors.New("--acme-cache-dir: give a directory")
	}
	if c.CAFile != "" {
		if _, err := c.pool(); err != nil {
			return err
		}
	}
	return nil
}

// checkDomain accepts a DNS name an ACME CA can validate over HTTP-01 or
// TLS-ALPN-01: at least two labels of letters, digits and hyphens, no
// wildcard (those need DNS-01) and no IP address.
func checkDomain(d string) error {
	switch {
	case d == "":
		return errors.New("empty")
	case strings.Contains(d, "*"):
		return errors.New("a wildcard needs the DNS-01 challenge, which Anvil does not answer: list each name")
	case net.ParseIP(d) != nil:
		return errors.New("an IP address: give the DNS name clients use")
	case len(d) > 253 || !strings.Contains(d, "."):
		return errors.New("give a fully qualified DNS name such as anvil.example.com")
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return errors.New("give a fully qualified DNS name such as anvil.example.com")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("%q is not a letter, digit or hyphen (give an internationalised name in its xn-- form)", r)
			}
		}
	}
	return nil
}

// pool reads CAFile.
func (c Config) pool() (*x509.CertPool, error) {
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--acme-ca: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--acme-ca %s: no PEM certificate in it", c.CAFile)
	}
	return p, nil
}

// Manager obtains, serves and renews the certificates.
type Manager struct {
	m   *autocert.Manager
	cfg Config
	log *slog.Logger
}

// New makes the manager of a validated Config; it creates the cache
// directory (0700: it holds private keys).
func New(c Config, log *slog.Logger) (*Manager, error) {
	if err := os.MkdirAll(c.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("--acme-cache-dir: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.CAFile != "" {
		p, err := c.pool()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: p, MinVersion: tls.VersionTLS12}
	}
	allowed := autocert.HostWhitelist(c.Domains...)
	m := &autocert.Manager{
		Prompt: autocert.AcceptTOS,
		Cache:  autocert.DirCache(c.CacheDir),
		// autocert asks the policy with an HTTP-01 request's Host as it
		// came, which names the port when the CA's request did (a
		// forwarded or test port): the name alone is what was listed.
		HostPolicy: func(ctx context.Context, host string) error {
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			return allowed(ctx, strings.ToLower(host))
		},
		Email:  c.Email,
		Client: &acme.Client{DirectoryURL: c.Directory, HTTPClient: &http.Client{Transport: tr, Timeout: time.Minute}},
	}
	return &Manager{m: m, cfg: c, log: log}, nil
}

// Config is the TLS listener's configuration: TLS 1.2 or newer,
// HTTP/1.1 (the server speaks no HTTP/2) and the ACME TLS-ALPN-01
// protocol, certificates from the CA by each handshake's server name.
// A handshake without a server name, or with another name, fails.
func (m *Manager) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1", acme.ALPNProto}, GetCertificate: m.m.GetCertificate}
}

// HTTPHandler answers the CA's HTTP-01 challenges on the plain-HTTP
// listener and passes every other request to fallback.
func (m *Manager) HTTPHandler(fallback http.Handler) http.Handler { return m.m.HTTPHandler(fallback) }

// Obtain asks for each domain's certificate now, from the cache or the
// CA, rather than at its first handshake, and logs the outcome; the
// certificates are renewed before they expire from then on. It returns
// when every domain has been tried or ctx ends.
func (m *Manager) Obtain(ctx context.Context) {
	for _, d := range m.cfg.Domains {
		for attempt := 0; ; attempt++ {
			c, err := m.m.GetCertificate(&tls.ClientHelloInfo{ServerName: d, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
				SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256}, SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12}})
			if err == nil {
				l := c.Leaf
				if l == nil {
					l, _ = x509.ParseCertificate(c.Certificate[0])
				}
				if l != nil {
					m.log.Info("ACME certificate ready", "domain", d, "issuer", l.Issuer.String(), "not_after", l.NotAfter.UTC().Format(time.RFC3339), "serial", l.SerialNumber.String())
				}
				break
			}
			// Retried with a growing wait: the CA may be down, or the
			// name not yet pointing here.
			wait := min(time.Duration(1<<min(attempt, 6))*time.Minute, time.Hour)
			m.log.Error("ACME certificate not obtained; retrying", "domain", d, "directory", m.cfg.Directory, "retry_in", wait.String(), "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}
