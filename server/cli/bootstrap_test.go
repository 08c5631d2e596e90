package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/cli"
)

// TestBootstrapPasswordFile: the first admin's generated password goes to
// a 0600 file beside the database, and not to the log.
func TestBootstrapPasswordFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	var logs lockedBuffer
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
}
