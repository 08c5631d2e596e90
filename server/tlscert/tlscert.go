// Package tlscert serves the certificate and key of --tls-cert and
// --tls-key, and picks up a renewed pair without a restart: on SIGHUP,
// and when the files' contents change. Every handshake asks for the
// current pair, so connections opened after a renewal get the new one
// while open ones keep theirs: no request fails during a rotation.
//
// The files are polled, by content, rather than watched with inotify:
// certbot, cert-manager and Kubernetes' Secret volumes replace them by
// renaming a directory or swapping a symlink, which a watch on the files
// misses and a watch on their directories reports in bursts of partial
// states (a new certificate beside the old key). Reading two small files
// every few seconds costs nothing, and a pair is taken only once the
// certificate and the key match.
package tlscert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultPoll is how often the files are read for a change.
const DefaultPoll = 5 * time.Second

// Pair is the certificate and key a server presents, reloadable.
type Pair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu        sync.RWMutex
	cur       *tls.Certificate
	cert, key []byte // the files' contents cur was made from
}

// Load reads and checks the pair: a server must not start on files it
// cannot serve.
func Load(certFile, keyFile string, log *slog.Logger) (*Pair, error) {
	p := &Pair{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := p.Reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads both files and, when they changed and hold a matching
// certificate and key, serves them from the next handshake on. On an
// error the pair in use stays. It reports whether the pair changed.
func (p *Pair) Reload() (bool, error) {
	cert, err := os.ReadFile(p.certFile)
	if err != nil {
		return false, fmt.Errorf("--tls-cert: %w", err)
	}
	key, err := os.ReadFile(p.keyFile)
	if err != nil {
		return false, fmt.Errorf("--tls-key: %w", err)
	}
	p.mu.RLock()
	same := p.cur != nil && bytes.Equal(cert, p.cert) && bytes.Equal(key, p.key)
	p.mu.RUnlock()
	if same {
		return false, nil
	}
	c, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return false, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", p.certFile, p.keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return false, fmt.Errorf("--tls-cert %s: %w", p.certFile, err)
		}
	}
	p.mu.Lock()
	p.cur, p.cert, p.key = &c, cert, key
	p.mu.Unlock()
	return true, nil
}

// Leaf is the certificate served now.
func (p *Pair) Leaf() *x509.Certificate {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cur.Leaf
}

// GetCertificate is tls.Config's: the pair in use at each handshake.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cur, nil
}

// Config is the server's TLS configuration: TLS 1.2 or newer, HTTP/1.1
// (the server speaks no HTTP/2), the pair from each handshake.
func (p *Pair) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: p.GetCertificate}
}

// Watch reloads the pair on every value from hup (SIGHUP) and every poll
// until ctx ends, logging each change and each failure; a failed reload
// keeps the pair in use, and a SIGHUP that fails is logged as an error.
func (p *Pair) Watch(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		asked := false
		select {
		case <-ctx.Done():
			return
		case <-hup:
			asked = true
		case <-t.C:
		}
		changed, err := p.Reload()
		switch {
		case err != nil && asked:
			p.log.Error("TLS certificate not reloaded; still serving the previous one", "err", err)
		case err != nil:
			// Mid-renewal the certificate may already be new and the key
			// not yet: the next poll sees both.
			p.log.Warn("TLS certificate files unreadable or mismatched; still serving the previous one", "err", err)
		case changed:
			l := p.Leaf()
			p.log.Info("TLS certificate reloaded", "subject", l.Subject.String(), "not_after", l.NotAfter.UTC().Format(time.RFC3339), "serial", l.SerialNumber.String())
		case asked:
			p.log.Info("TLS certificate unchanged (SIGHUP)")
		}
	}
}
