package clientsuites_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/identity"
)

// The source trees of CCI-MOC's ESI-Leap clients and of the openstacksdk
// they need (>= 1.1, newer than Debian's 0.101), run on Debian's python3
// with Debian's packages for everything else. .ci/run exports them from
// this workplace's mirrors.
const (
	esisdkEnv        = "ANVIL_ESISDK"
	esileapclientEnv = "ANVIL_ESILEAPCLIENT"
	openstacksdkEnv  = "ANVIL_OPENSTACKSDK"
)

// esiPersona is one account of the ESI-Leap client runs: ESI-Leap's
// owner, lessee and admin mapped onto Anvil's personas (docs/leases.md).
type esiPersona struct {
	cloud, user, project, role string // project "" for the system
}

var esiPersonas = []esiPersona{
	{"esi-owner", "esi-owner-user", "esi-owner", "member"},
	{"esi-lessee", "esi-lessee-user", "esi-lessee", "member"},
	{"esi-admin", "esi-admin-user", "", "admin"},
}

// esiTrees returns the three source trees, or skips (fails in CI) when
// one is not named.
func esiTrees(t *testing.T) (esisdk, esileapclient, openstacksdk string) {
	t.Helper()
	dirs := map[string]string{}
	for env, probe := range map[string]string{esisdkEnv: "esi/lease/v1/_proxy.py", esileapclientEnv: "esileapclient/osc/plugin.py", openstacksdkEnv: "openstack/connection.py"} {
		dir := os.Getenv(env)
		if dir == "" {
			need(t, "a source tree of the ESI-Leap clients", fmt.Errorf("%s is not set (.ci/run exports %s, %s and %s from /work/.mirror)", env, esisdkEnv, esileapclientEnv, openstacksdkEnv))
		}
		if _, err := os.Stat(filepath.Join(dir, probe)); err != nil {
			t.Fatalf("%s=%s holds no %s: %v", env, dir, probe, err)
		}
		dirs[env] = dir
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import keystoneauth1, osc_lib, cliff, openstackclient, oslotest, appdirs, netifaces").CombinedOutput(); err != nil {
		need(t, "Debian's python3-openstackclient, python3-oslotest, python3-appdirs and python3-netifaces", fmt.Errorf("%v: %s", err, out))
	}
	return dirs[esisdkEnv], dirs[esileapclientEnv], dirs[openstacksdkEnv]
}

// pluginMetadata writes, under dir, the .dist-info python-esileapclient's
// installation would have made: stevedore finds the openstack CLI's
// plugins (openstack.cli.extension) and their commands
// (openstack.lease.v1) only through installed entry points, and a source
// tree on PYTHONPATH has none. The entry points are the tree's own, from
// its setup.cfg.
func pluginMetadata(t *testing.T, dir, tree string) {
	t.Helper()
	f, err := os.Open(filepath.Join(tree, "setup.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var eps strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "["):
			in = line == "[entry_points]"
		case !in || strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(strings.TrimSpace(line), "="):
			fmt.Fprintf(&eps, "[%s]\n", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "=")))
		default:
			eps.WriteString(strings.TrimSpace(line) + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(eps.String(), "[openstack.lease.v1]") {
		t.Fatalf("%s/setup.cfg declares no openstack.lease.v1 entry points:\n%s", tree, eps.String())
	}
	info := filepath.Join(dir, "python_esileapclient-0.0.0.dist-info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"METADATA":         "Metadata-Version: 2.1\nName: python-esileapclient\nVersion: 0.0.0\n",
		"entry_points.txt": eps.String(),
	} {
		if err := os.WriteFile(filepath.Join(info, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// esiClouds is the clouds.yaml of the personas, signing in through
// Anvil's Identity v3 endpoint (whose catalog names the lease service);
// devstack, devstack-alt and devstack-admin are the clouds openstacksdk's
// functional base class opens besides OS_CLOUD's.
func esiClouds(url string) string {
	var b strings.Builder
	b.WriteString("clouds:\n")
	for _, p := range esiPersonas {
		fmt.Fprintf(&b, "  %s:\n    auth_type: password\n    identity_api_version: 3\n    region_name: RegionOne\n    auth:\n      auth_url: %s/identity/v3\n      username: %s\n      password: %s-password\n      user_domain_name: Default\n",
			p.cloud, url, p.user, p.user)
		if p.project == "" {
			b.WriteString("      system_scope: all\n")
		} else {
			fmt.Fprintf(&b, "      project_name: %s\n      project_domain_name: Default\n", p.project)
		}
	}
	b.WriteString("  devstack: &owner\n    auth_type: password\n    identity_api_version: 3\n    region_name: RegionOne\n    auth:\n      auth_url: " + url + "/identity/v3\n      username: esi-owner-user\n      password: esi-owner-user-password\n      user_domain_name: Default\n      project_name: esi-owner\n      project_domain_name: Default\n")
	b.WriteString("  devstack-alt: *owner\n  devstack-admin: *owner\n")
	return b.String()
}

// esiNode is a node the runs lease: owned by the owner persona's project.
type esiNode struct{ uuid, name string }

// seedESINodes enrolls n fake-hardware nodes owned by the owner project,
// as the system admin.
func seedESINodes(t *testing.T, a *anvil, n int) []esiNode {
	t.Helper()
	c := a.Client()
	c.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(identity.BootstrapUser+":"+adminPassword)))
	var nodes []esiNode
	for i := range n {
		name := fmt.Sprintf("esi-node-%d", i+1)
		r := c.Do(t, http.MethodPost, "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "owner": "esi-owner", "resource_class": "baremetal"})
		if r.Status != http.StatusCreated {
			t.Fatalf("enrolling %s: %d %s", name, r.Status, r.Body)
		}
		nodes = append(nodes, esiNode{uuid: r.JSON(t)["uuid"].(string), name: name})
	}
	return nodes
}

// esiAnvil starts Anvil with the personas' accounts and returns the
// clouds.yaml path beside it.
func esiAnvil(t *testing.T) (*anvil, string) {
	t.Helper()
	a := startAnvil(t, false)
	ctx := context.Background()
	for _, p := range esiPersonas {
		if err := a.IDs.CreateUser(ctx, p.user, p.user+"-password"); err != nil {
			t.Fatal(err)
		}
		if err := a.IDs.Grant(ctx, p.user, identity.Assignment{Scope: identity.Scope{System: p.project == "", Project: p.project}, Role: p.role}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(cfg, []byte(esiClouds(a.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	return a, cfg
}

// TestESILeapClients runs CCI-MOC's ESI-Leap clients, unmodified, against
// Anvil's /leasing API: esisdk's own functional tests (as the owner
// persona, the one that owns the nodes they lease, as ESI-Leap's CI runs
// them as its admin), then python-esileapclient's openstack CLI commands
// as owner, lessee and admin with the answers ESI-Leap's functional tests
// check. Its functional suite itself cannot run here: it creates Keystone
// projects, users and roles, and leases ESI-Leap's dummy nodes.
func TestESILeapClients(t *testing.T) {
	esisdk, esileapclient, openstacksdk := esiTrees(t)
	meta := t.TempDir()
	pluginMetadata(t, meta, esileapclient)
	// openstacksdk's tree comes before Debian's dist-packages, whose
	// openstacksdk 0.101 it replaces.
	pythonPath := "PYTHONPATH=" + strings.Join([]string{meta, openstacksdk, esisdk, esileapclient}, ":")

	t.Run("esisdk", func(t *testing.T) {
		a, cfg := esiAnvil(t)
		nodes := seedESINodes(t, a, 3)
		dir := filepath.Dir(cfg)
		rs := runUnittest(t, "esisdk", filepath.Join(esisdk, "esi", "tests", "functional"), esisdk, "esi.tests.functional.", dir,
			pythonPath, "OS_CLIENT_CONFIG_FILE="+cfg, "HOME="+dir, "OS_CLOUD=esi-owner",
			"NODE_1_UUID="+nodes[0].uuid, "NODE_1_TYPE=ironic_node", "NODE_2_UUID="+nodes[1].uuid, "NODE_2_TYPE=ironic_node",
			"NODE_3_NAME="+nodes[2].name, "LAST_EVENT_ID=0")
		report(t, "esisdk functional", rs, a)
		var bad []string
		for _, r := range rs {
			if r.status != "pass" {
				bad = append(bad, r.status+" "+r.name)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%d of %d must pass and do not (reasons above):\n  %s", len(bad), len(rs), strings.Join(bad, "\n  "))
		}
	})

	t.Run("esileapclient", func(t *testing.T) {
		a, cfg := esiAnvil(t)
		nodes := seedESINodes(t, a, 2)
		cli := &esiCLI{t: t, env: env(pythonPath, "OS_CLIENT_CONFIG_FILE="+cfg, "HOME="+filepath.Dir(cfg))}
		esiCLIJourney(t, cli, nodes)
		if t.Failed() {
			t.Logf("Anvil refused:\n  %s", strings.Join(a.refusals(), "\n  "))
		}
	})
}

// esiCLI runs `openstack esi …` (Debian's openstackclient with the
// plugin) as one persona.
type esiCLI struct {
	t   *testing.T
	env []string
}

// run returns the command's JSON output (-f json), failing the test if
// the command fails.
func (c *esiCLI) run(cloud string, args ...string) any {
	c.t.Helper()
	out, err := c.exec(cloud, append(args, "-f", "json")...)
	if err != nil {
		c.t.Fatalf("%s: openstack esi %s: %v\n%s", cloud, strings.Join(args, " "), err, out)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		c.t.Fatalf("%s: openstack esi %s: not JSON: %v\n%s", cloud, strings.Join(args, " "), err, out)
	}
	return v
}

// exec runs the command and returns its combined output.
func (c *esiCLI) exec(cloud string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", append([]string{"-m", "openstackclient.shell", "--os-cloud", cloud, "esi"}, args...)...)
	cmd.Env = c.env
	return cmd.CombinedOutput()
}

// obj is a show or create command's output; list a list command's.
func (c *esiCLI) obj(cloud string, args ...string) map[string]any {
	c.t.Helper()
	m, ok := c.run(cloud, args...).(map[string]any)
	if !ok {
		c.t.Fatalf("openstack esi %s: not an object", strings.Join(args, " "))
	}
	return m
}

func (c *esiCLI) list(cloud string, args ...string) []map[string]any {
	c.t.Helper()
	raw, ok := c.run(cloud, args...).([]any)
	if !ok {
		c.t.Fatalf("openstack esi %s: not a list", strings.Join(args, " "))
	}
	var out []map[string]any
	for _, r := range raw {
		out = append(out, r.(map[string]any))
	}
	return out
}

// column is one column of a list's rows.
func column(rows []map[string]any, name string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprint(r[name]))
	}
	return out
}

// esiCLIJourney is ESI-Leap's functional test_basic and test_policy
// journey through the CLI: the owner offers its nodes, the lessee claims
// one, the owner leases the other directly, both read what they hold, the
// admin sees it all and cancels the direct lease, the lessee extends and
// returns the claimed one, and every step is an event.
func esiCLIJourney(t *testing.T, cli *esiCLI, nodes []esiNode) {
	const layout = "2006-01-02T15:04:05"
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	end := start.Add(24 * time.Hour)

	// The owner offers node 1 to the lessee (test_offer_create_basic).
	offer := cli.obj("esi-owner", "offer", "create", nodes[0].uuid, "--lessee", "esi-lessee",
		"--start-time", start.Format(layout), "--end-time", end.Format(layout), "--name", "esi-offer")
	if offer["resource"] != nodes[0].name || offer["status"] != "available" || offer["lessee"] != "esi-lessee" ||
		offer["start_time"] != start.Format(layout) || offer["end_time"] != end.Format(layout) {
		t.Errorf("offer create answered %v", offer)
	}
	offerID, _ := offer["uuid"].(string)
	// test_offer_show_basic: show returns what create did (create shows
	// the plugin's short columns, show every field).
	shown := cli.obj("esi-owner", "offer", "show", offerID)
	for f, v := range offer {
		if fmt.Sprint(shown[f]) != fmt.Sprint(v) {
			t.Errorf("offer show %s = %v, create said %v", f, shown[f], v)
		}
	}
	if shown["resource_uuid"] != nodes[0].uuid || shown["name"] != "esi-offer" || shown["project"] != "esi-owner" || shown["resource_type"] != "ironic_node" {
		t.Errorf("offer show answered %v", shown)
	}
	// test_offer_list_basic, as the owner and as the lessee it is for.
	for _, who := range []string{"esi-owner", "esi-lessee", "esi-admin"} {
		if ids := column(cli.list(who, "offer", "list"), "UUID"); !slices.Contains(ids, offerID) {
			t.Errorf("%s's offer list %v lacks %s", who, ids, offerID)
		}
	}
	// test_policy: a lessee may not offer or lease the owner's node. ESI-Leap
	// answers 403 naming its rule; to Anvil a node the project neither
	// owns nor leases is not found, as in its Ironic API (docs/leases.md,
	// what differs).
	for _, args := range [][]string{{"offer", "create", nodes[1].uuid}, {"lease", "create", nodes[1].uuid, "esi-lessee"}} {
		if out, err := cli.exec("esi-lessee", args...); err == nil || !strings.Contains(string(out), "could not be found") {
			t.Errorf("the lessee's %s of the owner's node: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
	// test_offer_claim_basic: the lessee claims part of the window.
	lease := cli.obj("esi-lessee", "offer", "claim", offerID,
		"--start-time", start.Add(time.Hour).Format(layout), "--end-time", start.Add(3*time.Hour).Format(layout))
	leaseID, _ := lease["uuid"].(string)
	if lease["project"] != "esi-lessee" || lease["offer_uuid"] != offerID || lease["status"] != "created" || lease["resource"] != nodes[0].name {
		t.Errorf("offer claim answered %v", lease)
	}
	// test_lease_create_basic: the owner leases node 2 directly.
	direct := cli.obj("esi-owner", "lease", "create", nodes[1].uuid, "esi-lessee",
		"--start-time", start.Format(layout), "--end-time", end.Format(layout))
	directID, _ := direct["uuid"].(string)
	if direct["status"] != "created" || direct["project"] != "esi-lessee" || direct["resource"] != nodes[1].name || direct["offer_uuid"] != nil {
		t.Errorf("lease create answered %v", direct)
	}
	// test_lease_show_basic and test_lease_list_basic, per persona.
	shownLease := cli.obj("esi-lessee", "lease", "show", leaseID)
	for f, v := range lease {
		if fmt.Sprint(shownLease[f]) != fmt.Sprint(v) {
			t.Errorf("lease show %s = %v, claim said %v", f, shownLease[f], v)
		}
	}
	if shownLease["resource_uuid"] != nodes[0].uuid || shownLease["owner"] != "esi-owner" || shownLease["resource_type"] != "ironic_node" {
		t.Errorf("lease show answered %v", shownLease)
	}
	for _, who := range []string{"esi-owner", "esi-lessee", "esi-admin"} {
		args := []string{"lease", "list"}
		if who == "esi-admin" {
			args = append(args, "--all")
		}
		ids := column(cli.list(who, args...), "UUID")
		if !slices.Contains(ids, leaseID) || !slices.Contains(ids, directID) {
			t.Errorf("%s's lease list %v lacks %s or %s", who, ids, leaseID, directID)
		}
	}
	// The filter by node.
	if ids := column(cli.list("esi-owner", "lease", "list", "--resource-uuid", nodes[1].uuid), "UUID"); !slices.Equal(ids, []string{directID}) {
		t.Errorf("lease list --resource-uuid %s = %v, want [%s]", nodes[1].uuid, ids, directID)
	}
	// The admin reads any offer and lease, and cancels the direct lease.
	if got := cli.obj("esi-admin", "offer", "show", offerID)["uuid"]; got != offerID {
		t.Errorf("the admin's offer show answered uuid %v", got)
	}
	if got := cli.obj("esi-admin", "lease", "show", directID); got["project"] != "esi-lessee" || got["owner"] != "esi-owner" || got["status"] != "created" {
		t.Errorf("the admin's lease show answered %v", got)
	}
	if out, err := cli.exec("esi-admin", "lease", "delete", directID); err != nil {
		t.Errorf("the admin's lease delete: %v\n%s", err, out)
	}
	if got := cli.obj("esi-owner", "lease", "show", directID)["status"]; got != "deleted" {
		t.Errorf("the lease the admin deleted shows status %v, want deleted", got)
	}
	// An extension within the offer (esisdk's test_lease_update_valid).
	newEnd := start.Add(5 * time.Hour).Format(layout)
	updated := cli.obj("esi-lessee", "lease", "update", leaseID, "--end-time", newEnd)
	if updated["end_time"] != newEnd {
		t.Errorf("lease update end_time = %v, want %s", updated["end_time"], newEnd)
	}
	// test_lease_delete: the lessee returns it; it is gone from the
	// default list and shows deleted.
	if out, err := cli.exec("esi-lessee", "lease", "delete", leaseID); err != nil {
		t.Errorf("lease delete: %v\n%s", err, out)
	}
	if got := cli.obj("esi-lessee", "lease", "show", leaseID)["status"]; got != "deleted" {
		t.Errorf("a deleted lease shows status %v, want deleted", got)
	}
	if ids := column(cli.list("esi-lessee", "lease", "list"), "UUID"); slices.Contains(ids, leaseID) {
		t.Errorf("the lessee's lease list %v still has the deleted lease", ids)
	}
	// test_lease_show_offer_deleted: deleting the offer deletes its leases.
	second := cli.obj("esi-lessee", "offer", "claim", offerID,
		"--start-time", start.Add(6*time.Hour).Format(layout), "--end-time", start.Add(7*time.Hour).Format(layout))
	if out, err := cli.exec("esi-owner", "offer", "delete", offerID); err != nil {
		t.Errorf("offer delete: %v\n%s", err, out)
	}
	if got := cli.obj("esi-lessee", "lease", "show", second["uuid"].(string))["status"]; got != "deleted" {
		t.Errorf("a lease of a deleted offer shows status %v, want deleted", got)
	}
	// test_offer_show_invalid_id: an unknown offer is an error.
	if out, err := cli.exec("esi-owner", "offer", "show", "no-such-offer"); err == nil {
		t.Errorf("offer show of an unknown offer succeeded: %s", out)
	}
	// Events name the nodes leased, for the admin (every event), the owner
	// and the lessee (those naming their project).
	for _, who := range []string{"esi-admin", "esi-owner", "esi-lessee"} {
		nodesSeen := column(cli.list(who, "event", "list"), "Resource UUID")
		if !slices.Contains(nodesSeen, nodes[0].uuid) || !slices.Contains(nodesSeen, nodes[1].uuid) {
			t.Errorf("%s's event list names %v, not both nodes", who, nodesSeen)
		}
	}
}
