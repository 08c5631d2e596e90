package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/oidctest"
	"github.com/anvilproject/anvil/internal/testport"
)

// TestServeWithIssuerDown: `anvil serve` whose OpenID provider does not
// answer at start keeps serving — local accounts work, /readyz says SSO
// is degraded, SSO sign-in says it is unavailable in a sentence, a
// bearer JWT gets a 503 — and once the provider answers, SSO sign-in
// leads to it, without a restart.
func TestServeWithIssuerDown(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	if _, err := run(t, "", "db", "init", "--database", db); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "local-password-1\n", "user", "create", "alice", "--password-stdin", "--database", db); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "", "user", "grant", "alice", "--system", "--role", "reader", "--database", db); err != nil {
		t.Fatal(err)
	}

	opAddr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	issuer := "http://" + opAddr
	// Only the start of a sign-in is followed here, so the callback
	// need not be serve's own address.
	const callback = "http://anvil.test/auth/oidc/callback"
	url, logs, stop := serveLogged(t, db, "--oidc-issuer", issuer, "--oidc-client-id", "anvil-portal",
		"--oidc-client-secret", "portal-secret", "--oidc-redirect-url", callback)
	defer stop()
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ready := func() map[string]any {
		t.Helper()
		r, err := noFollow.Get(url + "/readyz")
		if err != nil {
			return nil
		}
		defer r.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		return m
	}
	m := ready()
	if s, _ := m["oidc"].(string); m["ready"] != true || !strings.HasPrefix(s, "degraded") {
		t.Fatalf("/readyz with the issuer down: %v; want ready, oidc degraded", m)
	}

	req, _ := http.NewRequest("GET", url+"/v1/nodes", nil)
	req.SetBasicAuth("alice", "local-password-1")
	if r, err := noFollow.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("a local account with the issuer down: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	req, _ = http.NewRequest("GET", url+"/v1/nodes", nil)
	req.Header.Set("Authorization", "Bearer aaa.bbb.ccc")
	if r, err := noFollow.Do(req); err != nil || r.StatusCode != 503 {
		t.Fatalf("a bearer JWT with the issuer down: %v %v; want 503", r, err)
	} else {
		r.Body.Close()
	}
	r, err := noFollow.Get(url + "/auth/oidc/login")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if loc := r.Header.Get("Location"); r.StatusCode != 303 || loc != "/login?error=unavailable" {
		t.Fatalf("SSO sign-in with the issuer down: %d to %q", r.StatusCode, loc)
	}
	page, err := noFollow.Get(url + "/login?error=unavailable")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(body), "Single sign-on is unavailable") {
		t.Fatalf("the login page does not say SSO is unavailable:\n%s", body)
	}

	// The provider comes up.
	ln, err := net.Listen("tcp", opAddr)
	if err != nil {
		t.Fatal(err)
	}
	op := &http.Server{Handler: oidctest.Handler(issuer, "anvil-portal", "portal-secret", callback,
		[]string{"anvil:system:reader"}, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	go op.Serve(ln)
	defer op.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if m = ready(); m != nil && m["oidc"] == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the issuer came back: %v\n%s", m, logs.String())
		}
	}
	r, err = noFollow.Get(url + "/auth/oidc/login")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if loc := r.Header.Get("Location"); r.StatusCode != 303 || !strings.HasPrefix(loc, issuer+"/") || !strings.Contains(loc, "code_challenge=") {
		t.Fatalf("SSO sign-in after the issuer came back: %d to %q", r.StatusCode, loc)
	}
}
