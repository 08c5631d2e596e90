// Package inboxtest runs a real SMTP server for the inbox's tests:
// aiosmtpd (Debian's python3-aiosmtpd) delivering into a Maildir, so a
// test reads the messages Anvil's mailer handed over the wire.
package inboxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
)

// Sink is a running SMTP server.
type Sink struct {
	// Addr is its host:port.
	Addr string
	dir  string
}

// Start runs a sink until t ends. Without aiosmtpd the test is skipped,
// except in CI, where it fails.
func Start(t *testing.T) *Sink {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import aiosmtpd").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the SMTP sink is required in CI: Debian's python3-aiosmtpd is not installed")
		}
		t.Skip("skipping the SMTP sink: Debian's python3-aiosmtpd is not installed")
	}
	dir := filepath.Join(t.TempDir(), "Maildir")
	port := testport.TCP(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("/usr/bin/python3", "-m", "aiosmtpd", "-n", "-l", addr, "-c", "aiosmtpd.handlers.Mailbox", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SMTP sink did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Sink{Addr: addr, dir: dir}
}

// Messages are the messages delivered so far, oldest first, raw.
func (s *Sink) Messages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, sub := range []string{"new", "cur"} {
		es, _ := os.ReadDir(filepath.Join(s.dir, sub))
		sort.Slice(es, func(i, j int) bool { return es[i].Name() < es[j].Name() })
		for _, e := range es {
			b, err := os.ReadFile(filepath.Join(s.dir, sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
	}
	return out
}
