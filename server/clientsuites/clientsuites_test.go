package clientsuites_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

const (
	gophercloud = "github.com/gophercloud/gophercloud/v2@v2.15.0"
	// The Debian package's tests, run from where it installs them.
	sdkTop    = "/usr/lib/python3/dist-packages"
	sdkSuite  = sdkTop + "/openstack/tests/functional/baremetal"
	sdkPrefix = "openstack.tests.functional.baremetal."
	// adminPassword is the local admin's, for the Basic-auth runs.
	adminPassword = "clientsuites-admin-password"
	// The bar: the rest must be listed, each with its reason.
	sdkMinPassRate = 0.95
)

// need skips the test outside CI when a prerequisite is missing, and fails
// it in CI, where every suite must run.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI: %v", what, err)
	}
	t.Skipf("skipping: %s is missing: %v", what, err)
}

// env is this process's environment without anything that would steer a
// client elsewhere (OS_*, IRONIC_*, Go module settings), plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OS_") || strings.HasPrefix(kv, "IRONIC_") || strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOWORK=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

type anvil struct {
	*servertest.Server
	log *syncbuf.Buffer
}

// startAnvil serves Anvil on a loopback port over a SQLite file, with
// authentication off or with local accounts (the bootstrap admin's
// password set to adminPassword). Its request log is kept for the report.
func startAnvil(t *testing.T, authNone bool) *anvil {
	t.Helper()
	return startAnvilWith(t, server.Options{AuthNone: authNone})
}

// startAnvilWith is startAnvil with more options (TrustedProxies).
func startAnvilWith(t *testing.T, o server.Options) *anvil {
	t.Helper()
	authNone := o.AuthNone
	buf := &syncbuf.Buffer{}
	o.Log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o.Database = storetest.Setting(t, "sqlite")
	srv := servertest.Start(t, o)
	if !authNone {
		if err := srv.IDs.SetPassword(context.Background(), identity.BootstrapUser, adminPassword); err != nil {
			t.Fatal(err)
		}
	}
	return &anvil{srv, buf}
}

var (
	requestLine = regexp.MustCompile(`msg=request .*method=(\S+) path=(\S+) status=(\d+)`)
	uuidish     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
)

// refusals summarises the requests Anvil answered with 4xx or 5xx, in
// order of first appearance with their counts, and its error log lines:
// the first place to look when a client test fails.
func (a *anvil) refusals() []string {
	var order []string
	count := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(a.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "level=ERROR") {
			order = append(order, line)
			continue
		}
		m := requestLine.FindStringSubmatch(line)
		if m == nil || m[3] < "400" {
			continue
		}
		key := m[1] + " " + uuidish.ReplaceAllString(m[2], "{uuid}") + " → " + m[3]
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	for i, k := range order {
		if count[k] > 1 {
			order[i] = fmt.Sprintf("%s (×%d)", k, count[k])
		}
	}
	return order
}

// result is one test of a client's suite.
type result struct {
	name, status, message string // status: pass, fail or skip
}

func tally(rs []result) (pass, fail, skip int) {
	for _, r := range rs {
		switch r.status {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return
}

// report logs a suite's counts, each test that did not pass with its first
// error line, and what Anvil refused meanwhile.
func report(t *testing.T, suite string, rs []result, a *anvil) {
	t.Helper()
	pass, fail, skip := tally(rs)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d pass, %d fail, %d skip of %d\n", suite, pass, fail, skip, len(rs))
	for _, r := range rs {
		if r.status != "pass" {
			fmt.Fprintf(&b, "  %s %s: %s\n", strings.ToUpper(r.status), r.name, r.message)
		}
	}
	if refused := a.refusals(); len(refused) > 0 {
		fmt.Fprintf(&b, "Anvil refused:\n  %s\n", strings.Join(refused, "\n  "))
	}
	t.Log(b.String())
}

// gophercloudDir downloads the module through the module proxy (a no-op
// when cached) and returns its directory in the module cache.
func gophercloudDir(t *testing.T) (goBin, dir string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	need(t, "the go command", err)
	cmd := exec.Command(goBin, "mod", "download", "-json", gophercloud)
	cmd.Dir = t.TempDir()
	cmd.Env = env("GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err == nil && jerr != nil {
		err = jerr
	}
	if m.Error != "" {
		err = errors.New(m.Error)
	}
	need(t, gophercloud+" (go mod download)", err)
	return goBin, m.Dir
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// firstError picks, from a Go test's output, the first line that reports
// a failure (gophercloud's th.Assert* print "Failure in file, line N: …").
func firstError(output []string) string {
	var last string
	for _, l := range output {
		l = strings.TrimSpace(ansi.ReplaceAllString(l, ""))
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if strings.Contains(l, "Failure in") || strings.Contains(l, "panic:") || strings.Contains(strings.ToLower(l), "error") {
			return l
		}
		last = l
	}
	return last
}

// runGophercloud runs one package of gophercloud's baremetal acceptance
// tests, unmodified, from the module cache.
func runGophercloud(t *testing.T, goBin, dir, pkg string, vars ...string) []result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "test", "-count=1", "-tags", "acceptance", "-json", "./internal/acceptance/openstack/baremetal/"+pkg+"/")
	cmd.Dir = dir
	cmd.Env = env(append(vars, "GOFLAGS=-mod=mod", "GOWORK=off")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	output := map[string][]string{}
	var rs []result
	for _, line := range bytes.Split(out, []byte("\n")) {
		var e struct{ Action, Test, Output string }
		if json.Unmarshal(line, &e) != nil || e.Test == "" {
			continue
		}
		switch e.Action {
		case "output":
			output[e.Test] = append(output[e.Test], e.Output)
		case "pass", "fail", "skip":
			r := result{name: e.Test, status: e.Action}
			if e.Action != "pass" {
				r.message = firstError(output[e.Test])
			}
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		t.Fatalf("gophercloud %s: no test ran: %v\n%s\n%s", pkg, err, out, stderr.String())
	}
	return rs
}

// checkGophercloud fails on any failure, and on a skip other than the
// suite's own release gates (clients.SkipRelease*: "not supported …").
func checkGophercloud(t *testing.T, rs []result) {
	t.Helper()
	var bad []string
	for _, r := range rs {
		if r.status == "fail" || r.status == "skip" && !strings.Contains(r.message, "not supported") {
			bad = append(bad, r.status+" "+r.name)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d must pass and do not (reasons above): %s", len(bad), len(rs), strings.Join(bad, ", "))
	}
}

// ironicReleases are Ironic's releases from Anvil's oldest maximum on, in
// gophercloud's spelling, with the API version each serves at most
// (ironic/common/release_mappings.py).
var ironicReleases = []struct {
	name  string
	minor int // of 1.x
}{
	{"yoga", 78}, {"zed", 80}, {"2023.1", 82}, {"2023.2", 87}, {"2024.1", 90},
	{"2024.2", 93}, {"2025.1", 96}, {"2025.2", 101}, {"2026.1", 111},
}

// branches are the OS_BRANCHes the suites run as: the newest Ironic
// release whose API Anvil serves in full, so the suite's own release gates
// (clients.SkipReleasesBelow) skip what came after it, as they would on
// that Ironic; and, once Anvil serves more than the newest release's API,
// master too, which the issue requires to pass as well.
func branches(t *testing.T, a *anvil) []string {
	t.Helper()
	resp, err := http.Get(a.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var root struct {
		DefaultVersion struct{ Version string } `json:"default_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
		t.Fatal(err)
	}
	var minor int
	if _, err := fmt.Sscanf(root.DefaultVersion.Version, "1.%d", &minor); err != nil {
		t.Fatalf("maximum version %q: %v", root.DefaultVersion.Version, err)
	}
	bs := releasesFor(minor)
	if len(bs) == 0 {
		t.Fatalf("Anvil serves up to 1.%d, older than Ironic %s", minor, ironicReleases[0].name)
	}
	return bs
}

// releasesFor names the branches for a maximum version 1.minor: the newest
// stable branch it covers, then master when it is above every release;
// none when it is older than every release known.
func releasesFor(minor int) []string {
	var out []string
	for _, r := range ironicReleases {
		if r.minor <= minor {
			out = []string{"stable/" + r.name}
		}
	}
	if last := ironicReleases[len(ironicReleases)-1]; minor > last.minor {
		out = append(out, "master")
	}
	return out
}

func TestReleasesFor(t *testing.T) {
	for minor, want := range map[int]string{70: "", 78: "stable/yoga", 86: "stable/2023.1", 87: "stable/2023.2", 111: "stable/2026.1",
		115: "stable/2026.1 master"} {
		if got := strings.Join(releasesFor(minor), " "); got != want {
			t.Errorf("releasesFor(%d) = %q, want %q", minor, got, want)
		}
	}
}

// TestGophercloudAcceptance runs gophercloud's baremetal acceptance suites
// against Anvil, once per branch (a fresh Anvil each time): noauth/ and
// httpbasic/ as they are, and v1/, whose client authenticates through
// Keystone: Anvil's own Identity v3 endpoint (server/keystone).
func TestGophercloudAcceptance(t *testing.T) {
	goBin, dir := gophercloudDir(t)
	each := func(t *testing.T, authNone bool, run func(t *testing.T, a *anvil, branch string)) {
		for _, b := range branches(t, startAnvil(t, authNone)) {
			t.Run(strings.ReplaceAll(b, "/", "-"), func(t *testing.T) { run(t, startAnvil(t, authNone), b) })
		}
	}
	t.Run("noauth", func(t *testing.T) {
		each(t, true, func(t *testing.T, a *anvil, b string) {
			rs := runGophercloud(t, goBin, dir, "noauth", "OS_BRANCH="+b, "IRONIC_ENDPOINT="+a.URL+"/v1", "OS_USERNAME=admin")
			report(t, "gophercloud noauth "+b, rs, a)
			checkGophercloud(t, rs)
		})
	})
	t.Run("httpbasic", func(t *testing.T) {
		each(t, false, func(t *testing.T, a *anvil, b string) {
			rs := runGophercloud(t, goBin, dir, "httpbasic", "OS_BRANCH="+b, "IRONIC_ENDPOINT="+a.URL+"/v1", "OS_USERNAME="+identity.BootstrapUser, "OS_PASSWORD="+adminPassword)
			report(t, "gophercloud httpbasic "+b, rs, a)
			checkGophercloud(t, rs)
		})
	})
	t.Run("v1", func(t *testing.T) {
		each(t, false, func(t *testing.T, a *anvil, b string) {
			rs := runGophercloud(t, goBin, dir, "v1", "OS_BRANCH="+b, "OS_AUTH_URL="+a.URL+"/identity/v3/", "OS_USERNAME="+identity.BootstrapUser, "OS_PASSWORD="+adminPassword, "OS_DOMAIN_NAME=Default")
			report(t, "gophercloud v1 "+b, rs, a)
			checkGophercloud(t, rs)
		})
	})
}

// sdkClouds is a clouds.yaml; the three cloud names the functional tests
// use (operator, user, alternate user) all point at the same Anvil. The
// auth endpoint is given even for none: the tests' require_service asks
// the session, which knows only the auth plugin's endpoint, for the
// service's version range.
//
// cacert, when not empty, is the CA bundle that verifies url's certificate.
func sdkClouds(authType, url, cacert string) string {
	auth := "      endpoint: " + url + "/\n"
	if authType == "http_basic" {
		auth += "      username: " + identity.BootstrapUser + "\n      password: " + adminPassword + "\n"
	}
	if cacert != "" {
		auth += "    cacert: " + cacert + "\n"
	}
	return `clouds:
  devstack-admin: &anvil
    auth_type: ` + authType + `
    auth:
` + auth + `    baremetal_endpoint_override: ` + url + `/
    has_compute: false
    has_image: false
    has_network: false
    has_volume: false
    has_identity: false
  devstack: *anvil
  devstack-alt: *anvil
`
}

// runSDK runs openstacksdk's functional baremetal tests with clouds.yaml.
func runSDK(t *testing.T, clouds string) []result {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(cfg, []byte(clouds), 0o600); err != nil {
		t.Fatal(err)
	}
	// OS_TEST_TIMEOUT is the per-test limit (openstacksdk's base test case
	// defaults it to 5 s, meant for its unit tests; its tox functional
	// environment raises it); one minute is ample for fake hardware, and a
	// test past it fails with fixtures' TimeoutException.
	return runUnittest(t, "openstacksdk", sdkSuite, sdkTop, sdkPrefix, dir,
		"OS_CLIENT_CONFIG_FILE="+cfg, "HOME="+dir, "OS_TEST_TIMEOUT=60", "OPENSTACKSDK_FUNC_TEST_TIMEOUT=60")
}

// runUnittest runs the unittest suite below suite (packages from top)
// through testdata/unittestrun.py with Debian's interpreter, in dir with
// extra environment, and returns each test's result named without
// prefix. The whole run has a limit, reported as the test it was in not
// finishing.
func runUnittest(t *testing.T, what, suite, top, prefix, dir string, extra ...string) []result {
	t.Helper()
	rows := filepath.Join(dir, "results.jsonl")
	runner, err := filepath.Abs("testdata/unittestrun.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", runner, rows, suite, top)
	cmd.Dir = dir
	cmd.Env = env(extra...)
	out, runErr := cmd.CombinedOutput()
	data, err := os.ReadFile(rows)
	if err != nil {
		t.Fatalf("%s: no results: %v (%v)\n%s", what, err, runErr, out)
	}
	var rs []result
	running := ""
	for _, line := range bytes.Split(data, []byte("\n")) {
		var row struct{ ID, Status, Message string }
		if json.Unmarshal(line, &row) != nil {
			continue
		}
		name := strings.TrimPrefix(row.ID, prefix)
		if row.Status == "start" {
			running = name
			continue
		}
		running = ""
		rs = append(rs, result{name: name, status: row.Status, message: row.Message})
	}
	if running != "" {
		rs = append(rs, result{name: running, status: "fail", message: fmt.Sprintf("did not finish: %v", ctx.Err())})
	}
	if len(rs) == 0 {
		t.Fatalf("%s: no test ran (%v)\n%s", what, runErr, out)
	}
	return rs
}

// allowedFailures reads a list of the failures a suite may have
// (sdk-allowed-failures.txt, tempest-allowed-failures.txt): one test a
// line (its id below the suite's prefix), then the reason.
func allowedFailures(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			t.Fatalf("%s:%d: %s has no reason", file, i+1, name)
		}
		allowed[name] = strings.TrimSpace(reason)
	}
	return allowed
}

// TestOpenstackSDKFunctional runs Debian's python3-openstacksdk functional
// baremetal tests against Anvil without authentication and with HTTP
// Basic. Each run must pass at least 95% of them, and every failure must
// be in sdk-allowed-failures.txt with its reason; an entry whose test
// passes in both runs is stale and fails the test too.
func TestOpenstackSDKFunctional(t *testing.T) {
	needSDK(t)
	allowed := allowedFailures(t, "sdk-allowed-failures.txt")
	failed := map[string]bool{}
	complete := 0
	for _, auth := range []string{"none", "http_basic"} {
		t.Run(auth, func(t *testing.T) {
			a := startAnvil(t, auth == "none")
			rs := runSDK(t, sdkClouds(auth, a.URL, ""))
			complete++
			report(t, "openstacksdk "+auth, rs, a)
			checkSDK(t, rs, allowed, failed)
		})
	}
	if complete < 2 {
		return
	}
	names := make([]string, 0, len(allowed))
	for name := range allowed {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !failed[name] {
			t.Errorf("sdk-allowed-failures.txt lists %s, which passes: remove it", name)
		}
	}
}

// needSDK skips or fails (in CI) the test without Debian's openstacksdk
// and its functional baremetal tests.
func needSDK(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		need(t, "Debian's /usr/bin/python3", err)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import openstack, oslotest").CombinedOutput(); err != nil {
		need(t, "python3-openstacksdk and python3-oslotest", fmt.Errorf("%v: %s", err, bytes.TrimSpace(out)))
	}
	_, err := os.Stat(sdkSuite)
	need(t, "openstacksdk's functional baremetal tests", err)
}

// checkSDK holds one openstacksdk run to the bar: at least 95% pass, and
// every failure is in sdk-allowed-failures.txt (allowed); it records the
// failures in failed.
func checkSDK(t *testing.T, rs []result, allowed map[string]string, failed map[string]bool) {
	t.Helper()
	pass, _, _ := tally(rs)
	if rate := float64(pass) / float64(len(rs)); rate < sdkMinPassRate {
		t.Errorf("%d of %d pass (%.0f%%), below %.0f%%", pass, len(rs), 100*rate, 100*sdkMinPassRate)
	}
	var unlisted []string
	for _, r := range rs {
		if r.status != "fail" {
			continue
		}
		failed[r.name] = true
		if _, ok := allowed[r.name]; !ok {
			unlisted = append(unlisted, r.name)
		}
	}
	if len(unlisted) > 0 {
		t.Errorf("%d failures not in sdk-allowed-failures.txt (reasons above):\n  %s", len(unlisted), strings.Join(unlisted, "\n  "))
	}
}
