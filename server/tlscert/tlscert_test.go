package tlscert_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/tlscert"
	"github.com/anvilproject/anvil/server/tlscert/tlscerttest"
)

// TestReload: a renewed pair is served after SIGHUP; a half-written
// renewal (a new certificate beside the old key) keeps the pair in use;
// files that cannot be served refuse the start.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlscerttest.NewCA(t, "test CA")
	first := ca.Issue(t, cert, key)
	p, err := tlscert.Load(cert, key, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if p.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatalf("serving serial %v, want %v", p.Leaf().SerialNumber, first)
	}

	// A renewal tool wrote the certificate and not yet the key.
	oldKey, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	ca.Issue(t, cert, key)
	if err := os.WriteFile(key, oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Reload(); changed || err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("mismatched pair: changed %v, err %v; want kept, with an error naming the flag", changed, err)
	}
	if p.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatalf("after a failed reload serving %v, want still %v", p.Leaf().SerialNumber, first)
	}

	// SIGHUP, once both files are the new pair.
	second := ca.Issue(t, cert, key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	go p.Watch(ctx, time.Hour, hup)
	hup <- os.Interrupt
	for deadline := time.Now().Add(10 * time.Second); p.Leaf().SerialNumber.Cmp(second) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP serving %v, want %v", p.Leaf().SerialNumber, second)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "bad.crt"), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tlscert.Load(filepath.Join(dir, "bad.crt"), key, nil); err == nil {
		t.Fatal("a certificate that is not PEM was loaded")
	}
	if _, err := tlscert.Load(filepath.Join(dir, "missing.crt"), key, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("a missing certificate: %v, want an error naming --tls-cert", err)
	}
}
