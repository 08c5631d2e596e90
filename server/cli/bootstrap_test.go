package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/cli"
)

// TestBootstrapPasswordFile: the first admin's generated password goes to
// a 0600 file beside the database, and not to the log. The API refuses it
// (403, saying how to change it) until an operator resets it with anvil
// user set-password, which clears the mark: the API then takes the new
// password and refuses the generated one.
func TestBootstrapPasswordFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	var logs syncbuf.Buffer
	root := cli.NewRoot(&logs, &logs)
	addr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	root.SetArgs([]string{"serve", "--listen", addr, "--database", db, "--log-level", "info"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	file := filepath.Join(dir, cli.BootstrapFile)
	var pw []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			pw = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after start:\n%s", file, logs.String())
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", file, fi.Mode().Perm())
	}
	secret := strings.TrimSpace(string(pw))
	if len(secret) < 12 {
		t.Errorf("password %q too short", secret)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), file) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if out := logs.String(); strings.Contains(out, secret) || !strings.Contains(out, file) {
		t.Errorf("the log shows the password or does not name the file:\n%s", out)
	}

	status := func(pw string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+addr+"/v1/nodes", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("admin", pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := status(secret); st != 403 || !strings.Contains(body, "must be changed") || !strings.Contains(body, "anvil user set-password admin") {
		t.Errorf("the generated password on the API: %d %s; want 403 saying it must be changed and how", st, body)
	}
	const chosen = "operator-chose-1"
	if _, err := run(t, chosen+"\n", "user", "set-password", "admin", "--password-stdin", "--database", db); err != nil {
		t.Fatalf("anvil user set-password: %v", err)
	}
	if st, body := status(chosen); st != 200 {
		t.Errorf("the operator's password on the API: %d %s", st, body)
	}
	if st, _ := status(secret); st != 401 {
		t.Errorf("the generated password after the reset: %d; want 401", st)
	}
}
