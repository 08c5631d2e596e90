package bmctest

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/reference"
	"github.com/anvilproject/anvil/internal/testport"
)

// Redfish simulator credentials (redfish-sim's defaults).
const (
	RedfishUser     = "admin"
	RedfishPassword = "password"
)

// Redfish is a running redfish-sim: OpenStack sushy-tools' emulator, the
// BMC Ironic's own CI tests against, on HTTPS with a self-signed cert.
type Redfish struct {
	URL     string // https://127.0.0.1:PORT
	Port    int
	Dir     string
	Systems []RedfishSystem
	// CAPEM is the simulator's certificate, as an inline PEM bundle.
	CAPEM string
	lock  *os.File
}

// RedfishSystem is one simulated machine.
type RedfishSystem struct {
	ID, Name, UUID string
	MACs           []string // its NICs, which an agent it boots carries
}

// simScript is start.sh of the shared reference copy.
func simScript() string {
	return reference.Path("redfish-sim", "start.sh")
}

// NeedRedfish skips the test when the simulator or its Debian packages are
// missing, except in CI where their absence is a failure.
func NeedRedfish(t testing.TB) {
	t.Helper()
	fail := func(why string) {
		msg := "redfish-sim: " + why + " (Debian packages python3-flask python3-requests python3-tenacity python3-bcrypt python3-webob openssl curl)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("skipping: " + msg)
	}
	if _, err := os.Stat(simScript()); err != nil {
		fail("the simulator is not at " + simScript())
	}
	if !pythonModules() {
		fail("python modules missing")
	}
	for _, bin := range []string{"openssl", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			fail(bin + " missing")
		}
	}
}

// pythonModules says whether Debian's python3 has the simulator's
// modules. It is asked once per test process: importing them costs
// about 0.4 CPU-seconds, and the suite starts about a hundred simulators.
var pythonModules = sync.OnceValue(func() bool {
	return exec.Command("/usr/bin/python3", "-c", "import flask, requests, tenacity, bcrypt, webob").Run() == nil
})

// portBase spreads test packages over 7750-7799 (blocks of five, chosen
// by the package directory) so parallel packages rarely probe the same
// ports; a lock file per port settles the rest.
func portBase() int {
	wd, _ := os.Getwd()
	h := fnv.New32a()
	h.Write([]byte(wd))
	return 7750 + int(h.Sum32()%10)*5
}

// StartRedfish runs a simulator of its own until the test ends, for
// tests that need a particular machine (env sets its knobs:
// SIM_SYSTEMS=2, SIM_POWER_STATE=On, ...). Power changes take 0.2-0.5 s
// unless SIM_POWER_DELAY says otherwise.
func StartRedfish(t testing.TB, env ...string) *Redfish {
	t.Helper()
	NeedRedfish(t)
	r, err := startRedfish(t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	return r
}

var shared struct {
	sync.Mutex
	r   *Redfish
	err error
}

// SharedRedfish is the test package's simulator (one system, default
// knobs), started on first use; the package's TestMain calls StopShared
// after m.Run. Tests leave it as they found it where others depend on it.
func SharedRedfish(t testing.TB) *Redfish {
	t.Helper()
	NeedRedfish(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.r == nil && shared.err == nil {
		dir, err := os.MkdirTemp("", "anvil-redfish-sim-")
		if err == nil {
			shared.r, err = startRedfish(dir, nil)
		}
		shared.err = err
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.r
}

// StopShared stops the package's simulator, if one was started.
func StopShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.r != nil {
		shared.r.stop()
		_ = os.RemoveAll(filepath.Dir(shared.r.Dir)) // the MkdirTemp parent
		shared.r = nil
	}
}

func (r *Redfish) stop() {
	_ = exec.Command(simScript(), "stop", r.Dir).Run()
	_ = r.lock.Close()
}

func startRedfish(dir string, env []string) (*Redfish, error) {
	base := portBase()
	var last string
	for i := range 50 {
		port := 7750 + (base-7750+i)%50
		lock, ok := testport.Hold("tcp", port)
		if !ok {
			continue
		}
		sub := filepath.Join(dir, strconv.Itoa(port))
		r, out, err := startOn(sub, port, env)
		if err == nil {
			r.lock = lock
			return r, nil
		}
		_ = lock.Close()
		last = fmt.Sprintf("port %d: %v\n%s", port, err, out)
	}
	return nil, fmt.Errorf("redfish-sim: no free port in 7750-7799; last attempt: %s", last)
}

var systemLine = regexp.MustCompile(`system id=(\S+) name=(\S+) uuid=(\S+)(?: power=\S+ macs=(\S*))?`)

func startOn(dir string, port int, env []string) (*Redfish, []byte, error) {
	cmd := exec.Command(simScript(), "start", dir, strconv.Itoa(port))
	cmd.Env = append(os.Environ(), append([]string{"SIM_POWER_DELAY=0.2 0.5"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, out, err
	}
	// A port another simulator took between our check and its bind
	// leaves our emulator dead while the other one answered the probe.
	time.Sleep(300 * time.Millisecond)
	if exec.Command(simScript(), "status", dir).Run() != nil {
		_ = exec.Command(simScript(), "stop", dir).Run()
		return nil, out, fmt.Errorf("emulator exited after start")
	}
	r := &Redfish{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Port: port, Dir: dir}
	ca, err := os.ReadFile(r.CA())
	if err != nil {
		_ = exec.Command(simScript(), "stop", dir).Run()
		return nil, out, err
	}
	r.CAPEM = string(ca)
	for _, m := range systemLine.FindAllStringSubmatch(string(out), -1) {
		sys := RedfishSystem{ID: m[1], Name: m[2], UUID: m[3]}
		if m[4] != "" {
			sys.MACs = strings.Split(m[4], ",")
		}
		r.Systems = append(r.Systems, sys)
	}
	return r, out, nil
}

// CA is the simulator's self-signed certificate, usable as a CA bundle.
func (r *Redfish) CA() string { return filepath.Join(r.Dir, "bmc.crt") }

// SystemPath is Ironic's redfish_system_id for system id.
func (r *Redfish) SystemPath(id string) string { return "/redfish/v1/Systems/" + id }

// DriverInfo is a redfish driver_info for system id of this simulator,
// trusting its certificate given inline: a path is for system-scope
// callers under the operator's CA directory only.
func (r *Redfish) DriverInfo(id string) map[string]any {
	return map[string]any{"redfish_address": r.URL, "redfish_system_id": r.SystemPath(id),
		"redfish_username": RedfishUser, "redfish_password": RedfishPassword, "redfish_verify_ca": r.CAPEM}
}

// get reads a resource straight from the simulator, bypassing Anvil.
func (r *Redfish) get(t testing.TB, path string) map[string]any {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own simulator
	req, _ := http.NewRequest("GET", r.URL+path, nil)
	req.SetBasicAuth(RedfishUser, RedfishPassword)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("redfish-sim GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("redfish-sim GET %s: %d %v", path, resp.StatusCode, err)
	}
	return m
}

// Power is system id's PowerState as the simulator reports it ("On", "Off").
func (r *Redfish) Power(t testing.TB, id string) string {
	s, _ := r.get(t, r.SystemPath(id))["PowerState"].(string)
	return s
}

// Boot is system id's boot override: target, mode and enabled.
func (r *Redfish) Boot(t testing.TB, id string) (target, mode, enabled string) {
	b, _ := r.get(t, r.SystemPath(id))["Boot"].(map[string]any)
	target, _ = b["BootSourceOverrideTarget"].(string)
	mode, _ = b["BootSourceOverrideMode"].(string)
	enabled, _ = b["BootSourceOverrideEnabled"].(string)
	return
}

var accessLine = regexp.MustCompile(`"([A-Z]+) (\S+) HTTP/1\.[01]" (\d+)`)

// Requests lists every request the simulator served, as "METHOD PATH
// STATUS", oldest first.
func (r *Redfish) Requests(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "emulator.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range accessLine.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1]+" "+m[2]+" "+m[3])
	}
	return out
}

// Bodies lists every POST/PATCH body the simulator received, as
// "METHOD PATH JSON", oldest first.
func (r *Redfish) Bodies(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(r.Dir, "emulator.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "BODY "); i >= 0 {
			out = append(out, sc.Text()[i+5:])
		}
	}
	return out
}
