package clientsuites_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/identity"
)

const (
	// Debian's ironic-tempest-plugin package, and tempest's, installed
	// where Debian's python3 finds them.
	tempestTop    = "/usr/lib/python3/dist-packages"
	tempestPlugin = "ironic_tempest_plugin"
	tempestPrefix = tempestPlugin + ".tests.api."
	// TempestPluginEnv names a source tree of ironic-tempest-plugin (a
	// newer commit than Debian's package) to run as well.
	tempestPluginEnv = "ANVIL_IRONIC_TEMPEST_PLUGIN"
)

// tempestAccount is one pre-provisioned tempest credential: a local
// account with one role on a project or the system.
type tempestAccount struct {
	user    string
	project string // "" for the system
	role    string
}

// tempestAccounts are the credentials the plugin's API tests ask for:
// admin, system_admin, and the system and project personas of its RBAC
// tests; tempest picks each by role and scope from the accounts file.
// Its admin is any account with the admin role, the system's included,
// so there are two system admins (system_admin always finds one free)
// and one project admin, the RBAC tests' project_admin.
var tempestAccounts = []tempestAccount{
	{"tempest-sysadmin", "", "admin"},
	{"tempest-sysadmin2", "", "admin"},
	{"tempest-sysmember", "", "member"},
	{"tempest-sysreader", "", "reader"},
	// One project, as tempest's dynamic credentials give a class's
	// project personas: the RBAC tests expect its member to see what its
	// admin made.
	{"tempest-padmin", "tempest-project", "admin"},
	{"tempest-pmember", "tempest-project", "member"},
	{"tempest-preader", "tempest-project", "reader"},
}

// tempestConfig writes tempest.conf and accounts.yaml into dir for an
// Anvil at url: Anvil's own Identity v3 endpoint, pre-provisioned
// accounts (tempest creates no users or projects: Anvil has no Keystone
// admin API), Ironic's new defaults enforced (so the plugin's client is
// the system admin's), fake-hardware, and Anvil's microversion range.
//
// cacert, when not empty, is the CA bundle that verifies url's certificate.
func tempestConfig(t *testing.T, dir, url, cacert string) {
	t.Helper()
	var accounts strings.Builder
	for _, a := range tempestAccounts {
		fmt.Fprintf(&accounts, "- username: %s\n  password: %s-password\n  user_domain_name: Default\n  roles: [%s]\n", a.user, a.user, a.role)
		if a.project == "" {
			accounts.WriteString("  system: all\n")
		} else {
			fmt.Fprintf(&accounts, "  project_name: %s\n  project_domain_name: Default\n", a.project)
		}
	}
	conf := `[DEFAULT]
log_file = tempest.log
[oslo_concurrency]
lock_path = ` + filepath.Join(dir, "locks") + `
[auth]
use_dynamic_credentials = false
test_accounts_file = ` + filepath.Join(dir, "accounts.yaml") + `
default_credentials_domain_name = Default
create_isolated_networks = false
[identity]
auth_version = v3
` + tempestCA(cacert) + `uri_v3 = ` + url + `/identity/v3
region = RegionOne
admin_role = admin
[identity-feature-enabled]
api_v2 = false
api_v3 = true
[service_available]
ironic = true
nova = false
cinder = false
glance = false
neutron = false
swift = false
[enforce_scope]
ironic = true
[baremetal]
driver = fake-hardware
min_microversion = ` + api.VerMin.String() + `
max_microversion = ` + api.VerMax.String() + `
enabled_hardware_types = fake-hardware,ipmi,redfish
enabled_deploy_interfaces = fake,direct,ramdisk,custom-agent
enabled_boot_interfaces = fake,pxe,ipxe,redfish-virtual-media
enabled_bios_interfaces = fake,no-bios
enabled_management_interfaces = fake,ipmitool,redfish,noop
enabled_power_interfaces = fake,ipmitool,redfish
enabled_raid_interfaces = fake,no-raid,agent
enabled_rescue_interfaces = fake,no-rescue,agent
power_timeout = 60
unprovision_timeout = 120
`
	for name, body := range map[string]string{"tempest.conf": conf, "accounts.yaml": accounts.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIronicTempestPlugin runs ironic-tempest-plugin's API tests,
// unmodified, on Debian's tempest against a fresh Anvil: Debian's
// package always, and the source tree ANVIL_IRONIC_TEMPEST_PLUGIN names
// (the plugin's newest commit) when set. Tempest signs in through Anvil's
// Identity v3 endpoint as pre-provisioned accounts. Every failure must
// be in tempest-allowed-failures.txt with its reason, and an entry whose
// test passes in every run is stale.
func TestIronicTempestPlugin(t *testing.T) {
	needTempest(t)
	trees := [][2]string{{"debian", tempestTop}}
	if dir := os.Getenv(tempestPluginEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, tempestPlugin, "tests", "api")); err != nil {
			t.Fatalf("%s=%s holds no %s/tests/api: %v", tempestPluginEnv, dir, tempestPlugin, err)
		}
		trees = append(trees, [2]string{"source", dir})
	} else {
		t.Logf("%s is not set: only Debian's package runs", tempestPluginEnv)
	}
	allowed := allowedFailures(t, "tempest-allowed-failures.txt")
	failed := map[string]bool{}
	ran := map[string]bool{}
	complete := 0
	for _, tree := range trees {
		t.Run(tree[0], func(t *testing.T) {
			a := startAnvil(t, false)
			rs := runTempest(t, a, a.URL, "", tree[0], tree[1])
			complete++
			checkTempest(t, rs, allowed, failed, ran)
		})
	}
	if complete < len(trees) {
		return
	}
	names := make([]string, 0, len(allowed))
	for name := range allowed {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if ran[name] && !failed[name] {
			t.Errorf("tempest-allowed-failures.txt lists %s, which passes: remove it", name)
		}
	}
}

// needTempest skips or fails (in CI) the test without Debian's tempest
// and ironic-tempest-plugin.
func needTempest(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("/usr/bin/python3", "-c", "import tempest, "+tempestPlugin).CombinedOutput(); err != nil {
		need(t, "Debian's python3-tempest and ironic-tempest-plugin", fmt.Errorf("%v: %s", err, bytes.TrimSpace(out)))
	}
}

// runTempest gives Anvil a tempest's accounts and runs the plugin's API
// tests of the tree (name, source directory) against url, Anvil's address
// or a proxy's (with cacert, its CA bundle), and reports them.
func runTempest(t *testing.T, a *anvil, url, cacert, name, tree string) []result {
	t.Helper()
	ctx := context.Background()
	for _, acc := range tempestAccounts {
		if err := a.IDs.CreateUser(ctx, acc.user, acc.user+"-password"); err != nil {
			t.Fatal(err)
		}
		if err := a.IDs.Grant(ctx, acc.user, identity.Assignment{Scope: identity.Scope{System: acc.project == "", Project: acc.project}, Role: acc.role}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	tempestConfig(t, dir, url, cacert)
	rs := runUnittest(t, "ironic-tempest-plugin "+name, filepath.Join(tree, tempestPlugin, "tests", "api"), tree, tempestPrefix, dir,
		"TEMPEST_CONFIG_DIR="+dir, "TEMPEST_CONFIG=tempest.conf", "HOME="+dir)
	report(t, "ironic-tempest-plugin "+name, rs, a)
	return rs
}

// checkTempest holds one run to the bar: some test passes, and every
// failure is in tempest-allowed-failures.txt (allowed); it records the
// tests run and failed.
func checkTempest(t *testing.T, rs []result, allowed map[string]string, failed, ran map[string]bool) {
	t.Helper()
	var unlisted []string
	for _, r := range rs {
		ran[r.name] = true
		if r.status != "fail" {
			continue
		}
		failed[r.name] = true
		if _, ok := allowed[r.name]; !ok {
			unlisted = append(unlisted, r.name)
		}
	}
	if pass, _, _ := tally(rs); pass == 0 {
		t.Errorf("no test passed")
	}
	if len(unlisted) > 0 {
		t.Errorf("%d failures not in tempest-allowed-failures.txt (reasons above):\n  %s", len(unlisted), strings.Join(unlisted, "\n  "))
	}
}

// tempestCA is tempest.conf's [identity] lines for a CA bundle: tempest's
// clients, the baremetal one included, verify the certificate with it.
func tempestCA(cacert string) string {
	if cacert == "" {
		return ""
	}
	return "ca_certificates_file = " + cacert + "\ndisable_ssl_certificate_validation = false\n"
}
