package api_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// anvilBinary builds the anvil command once per test binary.
func anvilBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "anvil")
	out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is an anvil serve subprocess.
type process struct {
	cmd *exec.Cmd
	url string
}

func serveProcess(t *testing.T, bin, setting, name string) *process {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	cmd := exec.Command(bin, "serve", "--database", setting, "--listen", addr, "--conductor-name", name,
		"--heartbeat", "200ms", "--heartbeat-timeout", "1s", "--power-sync", "0", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, url: "http://" + addr}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	for i := 0; i < 200; i++ {
		if r, err := http.Get(p.url + "/healthz"); err == nil {
			r.Body.Close()
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("anvil serve did not start")
	return nil
}

func runAnvil(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("anvil %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// TestConductorCrash kills -9 a conductor in the middle of a long wait
// step. On PostgreSQL a second replica notices the silence and fails the
// node cleanly; on SQLite the restarted process recovers its own work.
func TestConductorCrash(t *testing.T) {
	bin := anvilBinary(t)
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			setting := storetest.Setting(t, backend)
			runAnvil(t, bin, "migrate", "--database", setting)
			runAnvil(t, bin, "user", "create", "op", "--database", setting)
			runAnvil(t, bin, "user", "grant", "op", "--system", "--role", "admin", "--database", setting)
			token := runAnvil(t, bin, "token", "create", "--user", "op", "--system", "--roles", "admin", "--database", setting)

			a := serveProcess(t, bin, setting, "crash-a")
			c := &servertest.Client{Base: a.url, Version: "latest", Header: http.Header{"X-Auth-Token": {token}}}
			r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "crash-1", "driver": "fake"})
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			provision(t, c, id, map[string]any{"target": "manage"}, 202)
			waitState(t, c, id, "manageable")
			provision(t, c, id, map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "wait", map[string]any{"seconds": 120}))}, 202)
			deadline := time.Now().Add(10 * time.Second)
			for c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"] != "clean wait" {
				if time.Now().After(deadline) {
					t.Fatal("never reached clean wait")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown path runs
				t.Fatal(err)
			}
			_, _ = a.cmd.Process.Wait()

			name, want := "crash-b", "crash-a was lost"
			if backend == "sqlite" {
				name, want = "crash-a", "crash-a was restarted"
			}
			b := serveProcess(t, bin, setting, name)
			c.Base = b.url
			n := waitState(t, c, id, "clean failed")
			le, _ := n["last_error"].(string)
			if !strings.Contains(le, want) || !strings.Contains(le, "deploy.wait") {
				t.Errorf("last_error %q, want it to say %q and name the step", le, want)
			}
			if n["reservation"] != nil {
				t.Errorf("lock left behind: %v", n["reservation"])
			}
			// The node is usable again.
			provision(t, c, id, map[string]any{"target": "manage"}, 202)
			waitState(t, c, id, "manageable")
		})
	}
}
