package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	anvilcli "github.com/anvilproject/anvil/server/cli"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// cli runs Debian's baremetal client (python3-ironicclient) against url.
type cli struct {
	t    *testing.T
	base []string
}

func newCLI(t *testing.T, url string, auth ...string) *cli {
	t.Helper()
	if _, err := exec.LookPath("baremetal"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the baremetal CLI (python3-ironicclient) is required in CI")
		}
		t.Skip("skipping: the baremetal CLI (Debian python3-ironicclient) is not installed")
	}
	if len(auth) == 0 {
		auth = []string{"--os-auth-type", "none"}
	}
	return &cli{t: t, base: append([]string{"--os-endpoint", url}, auth...)}
}

// cliEnv is the CLI's environment: this process's, with no clouds.yaml
// entry chosen and Python's warnings silenced.
func cliEnv() []string {
	return append(os.Environ(), "OS_CLOUD=", "PYTHONWARNINGS=ignore")
}

// run executes one command (through the fork server, runBaremetal) and
// returns stdout; a failure is fatal unless
// the caller expects it.
func (c *cli) run(wantErr bool, args ...string) string {
	c.t.Helper()
	var out, errb bytes.Buffer
	start := time.Now()
	err := runBaremetal(append(c.base, args...), cliEnv(), &out, &errb)
	if (err != nil) != wantErr {
		c.t.Fatalf("baremetal %s: err=%v (after %s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, time.Since(start), out.String(), errb.String())
	}
	if wantErr {
		return errb.String()
	}
	return out.String()
}

func (c *cli) json(args ...string) any {
	c.t.Helper()
	out := c.run(false, append(args, "-f", "json")...)
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Fatalf("baremetal %s: not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

func names(rows any) []string {
	var out []string
	for _, r := range rows.([]any) {
		out = append(out, r.(map[string]any)["Name"].(string))
	}
	return out
}

// TestBaremetalCLI drives the real python3-ironicclient through the node
// life cycle and checks each result.
func TestBaremetalCLI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := start(t, setting)
		bm := newCLI(t, srv.URL)

		n := bm.json("node", "create", "--driver", "fake", "--name", "cli-n1", "--property", "cpus=8", "--property", "memory_mb=4096").(map[string]any)
		if n["name"] != "cli-n1" || n["provision_state"] != "enroll" || n["properties"].(map[string]any)["cpus"] != float64(8) {
			t.Fatalf("create: %v", n)
		}
		bm.json("node", "create", "--driver", "fake", "--name", "cli-n2")
		bm.run(false, "node", "set", "cli-n1", "--owner", "proj-owner", "--lessee", "proj-lessee")
		bm.run(false, "node", "set", "cli-n2", "--owner", "proj-other")

		if got := names(bm.json("node", "list")); len(got) != 2 {
			t.Fatalf("list: %v", got)
		}
		long := bm.json("node", "list", "--long").([]any)
		if len(long) != 2 || long[0].(map[string]any)["Owner"] == nil {
			t.Fatalf("list --long: %v", long)
		}
		if got := names(bm.json("node", "list", "--owner", "proj-owner")); strings.Join(got, ",") != "cli-n1" {
			t.Fatalf("list --owner: %v", got)
		}
		if got := names(bm.json("node", "list", "--lessee", "proj-lessee")); strings.Join(got, ",") != "cli-n1" {
			t.Fatalf("list --lessee: %v", got)
		}

		bm.run(false, "node", "set", "cli-n1", "--name", "cli-renamed", "--extra", "rack=r7", "--property", "cpus=16")
		s := bm.json("node", "show", "cli-renamed").(map[string]any)
		if s["owner"] != "proj-owner" || s["lessee"] != "proj-lessee" || s["extra"].(map[string]any)["rack"] != "r7" || s["properties"].(map[string]any)["cpus"] != float64(16) {
			t.Fatalf("show after set: %v", s)
		}
		bm.run(false, "node", "unset", "cli-renamed", "--lessee", "--extra", "rack", "--property", "memory_mb")
		bm.run(false, "node", "unset", "cli-renamed", "--owner")
		s = bm.json("node", "show", "cli-renamed").(map[string]any)
		if s["owner"] != nil || s["lessee"] != nil || len(s["extra"].(map[string]any)) != 0 {
			t.Fatalf("show after unset: %v", s)
		}
		if _, has := s["properties"].(map[string]any)["memory_mb"]; has {
			t.Fatalf("memory_mb not unset: %v", s["properties"])
		}

		bm.run(false, "node", "add", "trait", "cli-renamed", "CUSTOM_FIRMWARE_UPDATE", "CUSTOM_GPU")
		bm.run(false, "node", "remove", "trait", "cli-renamed", "CUSTOM_GPU")
		traits := bm.json("node", "trait", "list", "cli-renamed").([]any)
		if len(traits) != 1 || traits[0].(map[string]any)["Traits"] != "CUSTOM_FIRMWARE_UPDATE" {
			t.Fatalf("traits: %v", traits)
		}
		if errOut := bm.run(true, "node", "add", "trait", "cli-renamed", "bad-trait"); !strings.Contains(errOut, "bad-trait") {
			t.Fatalf("bad trait error does not name it: %s", errOut)
		}

		bm.run(false, "node", "maintenance", "set", "cli-renamed", "--reason", "fan noise")
		s = bm.json("node", "show", "cli-renamed").(map[string]any)
		if s["maintenance"] != true || s["maintenance_reason"] != "fan noise" {
			t.Fatalf("maintenance set: %v", s)
		}
		bm.run(false, "node", "maintenance", "unset", "cli-renamed")
		if s = bm.json("node", "show", "cli-renamed").(map[string]any); s["maintenance"] != false {
			t.Fatalf("maintenance unset: %v", s)
		}

		if errOut := bm.run(true, "node", "show", "no-such-node"); !strings.Contains(errOut, "could not be found") {
			t.Fatalf("show missing: %s", errOut)
		}
		bm.run(false, "node", "delete", "cli-renamed", "cli-n2")
		if got := bm.json("node", "list").([]any); len(got) != 0 {
			t.Fatalf("after delete: %v", got)
		}
	})
}

// TestBaremetalCLIAsTenant mints a project member's token with the anvil
// command, as an operator would, and hands it to the real client: the
// member sees its project's owned and leased nodes and nothing else.
func TestBaremetalCLIAsTenant(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		for _, n := range []map[string]any{
			{"name": "mine", "driver": "fake", "owner": "own"},
			{"name": "leased", "driver": "fake", "owner": "oth", "lessee": "own"},
			{"name": "theirs", "driver": "fake", "owner": "oth"},
		} {
			mustStatus(t, admin.Do(t, "POST", "/v1/nodes", n), 201)
		}
		var out, errOut bytes.Buffer
		root := anvilcli.NewRoot(&out, &errOut)
		root.SetArgs([]string{"token", "create", "--database", setting, "--user", "owner-member", "--project", "own", "--roles", "member", "--expires", "1h"})
		if err := root.Execute(); err != nil {
			t.Fatalf("anvil token create: %v\n%s", err, errOut.String())
		}
		token := strings.TrimSpace(out.String())
		if !strings.HasPrefix(token, "anvil_") || strings.Contains(token, "\n") {
			t.Fatalf("anvil token create printed %q, want only the token", out.String())
		}

		// The same token with curl, as a script would use it.
		if _, err := exec.LookPath("curl"); err == nil {
			out, err := exec.Command("curl", "-sS", "-f", "-H", "X-Auth-Token: "+token, "-H", "X-OpenStack-Ironic-API-Version: latest", srv.URL+"/v1/nodes?sort_key=name").Output()
			if err != nil {
				t.Fatalf("curl with the token: %v", err)
			}
			if !strings.Contains(string(out), `"leased"`) || !strings.Contains(string(out), `"mine"`) || strings.Contains(string(out), `"theirs"`) {
				t.Errorf("curl lists %s", out)
			}
		} else if os.Getenv("CI") != "" {
			t.Fatal("curl is required in CI")
		}

		for _, auth := range [][]string{
			{"--os-auth-type", "admin_token", "--os-token", token},
			{"--os-auth-type", "http_basic", "--os-username", "owner-member", "--os-password", "password-owner-member"},
		} {
			bm := newCLI(t, srv.URL, append(auth, "--os-baremetal-api-version", "1.78")...)
			got := names(bm.json("node", "list", "--sort", "name"))
			if strings.Join(got, ",") != "leased,mine" {
				t.Errorf("%s: node list = %v, want leased,mine", auth[1], got)
			}
			if msg := bm.run(true, "node", "show", "theirs"); !strings.Contains(msg, "could not be found") {
				t.Errorf("%s: node show theirs: %s", auth[1], msg)
			}
		}
	})
}

// TestBaremetalCLIPorts drives the real client through ports, port groups
// and VIFs, as the README's walk-through does.
func TestBaremetalCLIPorts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := start(t, setting)
		flatVIFs(srv)
		bm := newCLI(t, srv.URL, "--os-auth-type", "none", "--os-baremetal-api-version", "1.78")
		bm.json("node", "create", "--driver", "fake", "--name", "cli-p1")

		g := bm.json("port", "group", "create", "--node", "cli-p1", "--name", "bond0", "--address", "52:54:00:12:34:50", "--mode", "802.3ad").(map[string]any)
		if g["name"] != "bond0" || g["mode"] != "802.3ad" {
			t.Fatalf("port group create: %v", g)
		}
		p := bm.json("port", "create", "52:54:00:12:34:56", "--node", "cli-p1", "--local-link-connection", "switch_id=0a:1b:2c:3d:4e:5f",
			"--local-link-connection", "port_id=Eth1/7", "--physical-network", "physnet1", "--extra", "rack=r7").(map[string]any)
		if p["address"] != "52:54:00:12:34:56" || p["physical_network"] != "physnet1" || p["pxe_enabled"] != true {
			t.Fatalf("port create: %v", p)
		}
		id := p["uuid"].(string)
		bm.json("port", "create", "52:54:00:12:34:57", "--node", "cli-p1", "--port-group", "bond0", "--pxe-enabled", "false")

		rows := bm.json("port", "list", "--node", "cli-p1", "--sort", "address").([]any)
		if len(rows) != 2 || rows[0].(map[string]any)["Address"] != "52:54:00:12:34:56" {
			t.Fatalf("port list --node: %v", rows)
		}
		if rows := bm.json("port", "list", "--address", "52:54:00:12:34:57").([]any); len(rows) != 1 {
			t.Fatalf("port list --address: %v", rows)
		}
		if rows := bm.json("port", "list", "--port-group", "bond0", "--long").([]any); len(rows) != 1 || rows[0].(map[string]any)["Portgroup UUID"] != g["uuid"] {
			t.Fatalf("port list --port-group --long: %v", rows)
		}
		if rows := bm.json("port", "group", "list").([]any); len(rows) != 1 || rows[0].(map[string]any)["Name"] != "bond0" {
			t.Fatalf("port group list: %v", rows)
		}

		bm.run(false, "port", "set", id, "--extra", "rack=r8", "--physical-network", "physnet2")
		s := bm.json("port", "show", id).(map[string]any)
		if s["extra"].(map[string]any)["rack"] != "r8" || s["physical_network"] != "physnet2" {
			t.Fatalf("port show after set: %v", s)
		}
		if errOut := bm.run(true, "port", "create", "52:54:00:12:34:56", "--node", "cli-p1"); !strings.Contains(errOut, "already exists") {
			t.Fatalf("duplicate MAC: %s", errOut)
		}
		if errOut := bm.run(true, "port", "create", "not-a-mac", "--node", "cli-p1"); !strings.Contains(errOut, "not-a-mac") {
			t.Fatalf("bad MAC error does not name it: %s", errOut)
		}

		// With the flat network interface VIFs land on the port group
		// first, then on the PXE port.
		bm.run(false, "node", "vif", "attach", "cli-p1", "vif-one")
		bm.run(false, "node", "vif", "attach", "cli-p1", "vif-two")
		vifs := bm.json("node", "vif", "list", "cli-p1").([]any)
		if len(vifs) != 2 {
			t.Fatalf("vif list: %v", vifs)
		}
		if errOut := bm.run(true, "node", "vif", "attach", "cli-p1", "vif-three"); !strings.Contains(errOut, "not enough free physical ports") {
			t.Fatalf("third vif: %s", errOut)
		}
		bm.run(false, "node", "vif", "detach", "cli-p1", "vif-two")
		if vifs := bm.json("node", "vif", "list", "cli-p1").([]any); len(vifs) != 1 || vifs[0].(map[string]any)["ID"] != "vif-one" {
			t.Fatalf("vif list after detach: %v", vifs)
		}

		bm.run(false, "node", "vif", "detach", "cli-p1", "vif-one")
		bm.run(false, "port", "delete", id)
		if rows := bm.json("port", "list").([]any); len(rows) != 1 {
			t.Fatalf("port list after delete: %v", rows)
		}
	})
}

// TestBaremetalCLIDeploy: node deploy, rebuild and undeploy as the CLI
// sends them, each waited for with --wait.
func TestBaremetalCLIDeploy(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := start(t, setting)
		bm := newCLI(t, srv.URL, "--os-auth-type", "none", "--os-baremetal-api-version", "1.78")
		bm.json("node", "create", "--driver", "fake-hardware", "--name", "cli-d1")
		bm.run(false, "node", "manage", "cli-d1", "--wait", "30")
		bm.run(false, "node", "provide", "cli-d1", "--wait", "30")
		bm.run(false, "node", "deploy", "cli-d1", "--config-drive", `{"user_data": "#cloud-config"}`, "--wait", "30")
		n := bm.json("node", "show", "cli-d1").(map[string]any)
		if n["provision_state"] != "active" || n["power_state"] != "power on" || n["instance_info"].(map[string]any)["configdrive"] != "******" {
			t.Fatalf("after deploy: %v, %v, %v", n["provision_state"], n["power_state"], n["instance_info"])
		}
		bm.run(false, "node", "rebuild", "cli-d1", "--wait", "30")
		if out := bm.run(true, "node", "deploy", "cli-d1"); !strings.Contains(out, `"active"`) {
			t.Errorf("deploy of an active node: %s", out)
		}
		bm.run(false, "node", "undeploy", "cli-d1", "--wait", "30")
		if n := bm.json("node", "show", "cli-d1").(map[string]any); n["provision_state"] != "available" || n["power_state"] != "power off" {
			t.Fatalf("after undeploy: %v, %v", n["provision_state"], n["power_state"])
		}
	})
}
