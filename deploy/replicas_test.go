package deploy_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestThreeReplicasBehindHAProxy runs what the chart deploys with
// replicas > 1, on one machine: three `anvil serve` processes on one
// PostgreSQL database, sharing one state directory (their working
// directory, as the pods share /var/lib/anvil on a ReadWriteMany
// volume), behind Debian's HAProxy balancing round robin, with
// --firmware-url and --agent-api-url naming the balancer. Every object
// one replica writes is served byte-identical by each replica directly
// and through the balancer (each answer names the replica that served
// it, so the test knows all three did): an agent ISO built by one
// replica for a redfish-virtual-media node at the URL its BMC is given,
// and a firmware image uploaded through another, which a firmware.update
// a third runs names to its BMC. The real agent (where
// it can run) cleans from an ISO one replica built and the BMC fetched
// through the balancer, calling back through it, then deploys an image
// another replica cached, which the balancer has the agent fetch from a
// third. A console enabled by one replica is reached through the
// portal's WebSocket of each of the others and of the balancer.
func TestThreeReplicasBehindHAProxy(t *testing.T) {
	haproxy := needHAProxy(t)
	bmctest.Need(t)
	bmctest.NeedRedfish(t)
	setting := storetest.Setting(t, "postgres")
	bin := filepath.Join(t.TempDir(), "anvil")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	anvil := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--database", setting)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	anvil("root-password-1\n", "user", "create", "root", "--password-stdin")
	anvil("", "user", "grant", "root", "--system", "--role", "admin")
	token := anvil("", "token", "create", "--user", "root", "--system", "--roles", "admin")

	// The operator's agent media: the ISOs are built of these.
	media := t.TempDir()
	for name, n := range map[string]int{"vmlinuz": 1<<20 + 3, "initrd": 2<<20 + 5, "esp.img": 1 << 20} {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(media, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := httptest.NewServer(http.FileServer(http.Dir(media)))
	t.Cleanup(files.Close)

	lb := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	state := t.TempDir() // the shared volume
	names := []string{"rep-a", "rep-b", "rep-c"}
	addrs := map[string]string{}
	for _, name := range names {
		addrs[name] = fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	}
	for _, name := range names {
		// Each replica's console listeners take a port of their own: on
		// one host they would collide, as pods with one IP each do not.
		p := testport.TCP(t)
		startReplica(t, bin, state, name, addrs[name],
			"--database", setting, "--session-secret", "replicas-share-this-secret",
			"--firmware-url", "http://"+lb, "--agent-api-url", "http://"+lb, "--agent-image-url", "http://"+lb+"/images",
			// The reference machine hook gives the agent the ISO's API
			// URL but not a pregenerated token: its lookup issues one.
			"--image-source-networks", "127.0.0.0/8", "--wipe", "metadata", "--agent-token-on-media=false",
			"--deploy-kernel", files.URL+"/vmlinuz", "--deploy-ramdisk", files.URL+"/initrd", "--bootloader", files.URL+"/esp.img",
			"--console-port-range", fmt.Sprintf("%d:%d", p, p), "--heartbeat", "1s", "--bmc-timeout", "5s",
			"--log-level", "warn", "--access-log", "off", "--db-max-open", "8")
	}
	startHAProxy(t, haproxy, lb, names, addrs)

	api := &apiClient{t: t, token: token}
	// servedEverywhere fetches path (with header h, if any) from each
	// replica and three times through the balancer, wanting status and
	// the same body from all, and every replica behind the balancer.
	servedEverywhere := func(path string, status int, h ...string) []byte {
		t.Helper()
		var first []byte
		check := func(via string, body []byte, st int) {
			t.Helper()
			if st != status {
				t.Fatalf("GET %s via %s: %d, want %d: %.300s", path, via, st, status, body)
			}
			if first == nil {
				first = body
			} else if !bytes.Equal(body, first) {
				t.Fatalf("GET %s via %s: %d bytes unlike the first answer's %d", path, via, len(body), len(first))
			}
		}
		for _, name := range names {
			st, body, _ := fetch(t, "http://"+addrs[name]+path, h...)
			check(name, body, st)
		}
		behind := map[string]bool{}
		for range names {
			st, body, hdr := fetch(t, "http://"+lb+path, h...)
			check("haproxy", body, st)
			behind[hdr.Get("X-Served-By")] = true
		}
		for _, name := range names {
			if !behind[name] {
				t.Fatalf("GET %s through haproxy: served by %v, want each of %v (round robin)", path, behind, names)
			}
		}
		return first
	}

	t.Run("boot ISO", func(t *testing.T) {
		sim := bmctest.StartRedfish(t)
		sys := sim.Systems[0]
		r := api.do(addrs["rep-a"], "POST", "/v1/nodes", map[string]any{"name": "iso", "driver": "redfish",
			"boot_interface": "redfish-virtual-media", "driver_info": sim.DriverInfo(sys.ID)})
		r.want(201)
		id := r.json()["uuid"].(string)
		api.do(addrs["rep-a"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"}).want(202)
		api.wait(addrs["rep-a"], id, func(n map[string]any) bool { return n["provision_state"] == "manageable" })
		// provide through rep-b: its conductor runs the cleaning, and
		// builds and inserts the agent's ISO.
		api.do(addrs["rep-b"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "provide"}).want(202)
		var isoURL string
		for deadline := time.Now().Add(2 * time.Minute); isoURL == ""; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no ISO inserted: %v", api.do(addrs["rep-a"], "GET", "/v1/nodes/"+id, nil).json())
			}
			if img, inserted := sim.CD(t, sys.ID); inserted && img != "" {
				isoURL = img
			}
		}
		path, ok := strings.CutPrefix(isoURL, "http://"+lb)
		if !ok || !regexp.MustCompile(`^/boot-iso/[0-9a-f]{64}\.iso$`).MatchString(path) {
			t.Fatalf("the BMC was given %s, want the balancer's /boot-iso/ URL", isoURL)
		}
		iso := servedEverywhere(path, 200)
		if len(iso) < 18*2048 || !bytes.HasPrefix(iso[17*2048+7:], []byte("EL TORITO SPECIFICATION")) {
			t.Fatalf("the ISO (%d bytes) has no El Torito boot record", len(iso))
		}
		// A BMC reading the CD in pieces.
		if part := servedEverywhere(path, 206, "Range", "bytes=32768-32773"); string(part) != "\x01CD001" {
			t.Errorf("range of the ISO: %q", part)
		}
		built := ""
		for _, e := range api.do(addrs["rep-c"], "GET", "/v1/nodes/"+id+"/history?detail=true", nil).json()["history"].([]any) {
			if ev := e.(map[string]any); strings.HasPrefix(ev["event"].(string), "Built the ramdisk agent's ISO") {
				built, _ = ev["conductor"].(string)
			}
		}
		if built != "rep-b" {
			t.Errorf("the ISO was built by %q, want rep-b, which took the provide", built)
		}
		// The run ends; its ISO is gone from every replica.
		api.do(addrs["rep-c"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "abort"}).want(202)
		api.wait(addrs["rep-c"], id, func(n map[string]any) bool { return n["provision_state"] == "clean failed" })
		servedEverywhere(path, 404)
	})

	t.Run("agent", func(t *testing.T) {
		agenttest.Need(t)
		rack := agenttest.NewRack(t, "http://"+lb)
		// The agent tries a failed download once (oslo.config reads
		// OS_<group>__<option>): an image token one replica does not
		// serve fails the deploy rather than being retried elsewhere.
		sim := bmctest.StartRedfish(t, append(rack.Env(), "OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRIES=0",
			"OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRY_INTERVAL=1")...)
		sys := sim.Systems[0]
		disk := rack.Machine(t, sys.ID)
		im := agenttest.ServeImage(t, "ANVIL-REPLICAS-MARKER")
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.ServeContent(w, r, "disk.raw", time.Time{}, bytes.NewReader(im.RawData))
		}))
		t.Cleanup(origin.Close)
		r := api.do(addrs["rep-a"], "POST", "/v1/nodes", map[string]any{"name": "agent", "driver": "redfish",
			"boot_interface": "redfish-virtual-media", "driver_info": sim.DriverInfo(sys.ID)})
		r.want(201)
		id := r.json()["uuid"].(string)
		for _, mac := range sys.MACs {
			api.do(addrs["rep-a"], "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}).want(201)
		}
		api.do(addrs["rep-a"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"}).want(202)
		api.wait(addrs["rep-a"], id, func(n map[string]any) bool { return n["provision_state"] == "manageable" })
		settled := func(want string) {
			t.Helper()
			var n map[string]any
			for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
				n = api.do(addrs["rep-a"], "GET", "/v1/nodes/"+id, nil).json()
				if n["provision_state"] == want && n["target_provision_state"] == nil {
					return
				}
				if st, _ := n["provision_state"].(string); strings.HasSuffix(st, "failed") || time.Now().After(deadline) {
					t.Fatalf("node %s, want %s: %v\n%s", st, want, n["last_error"], rack.Log(sys.ID, 5000))
				}
			}
		}
		// provide through rep-b: it builds the ISO, which the BMC (the
		// rack's hook) downloads through the balancer, and the agent it
		// boots calls back through the balancer to whichever replica.
		if out, err := exec.Command("sgdisk", "-o", "-n", "1:2048:+16M", disk).CombinedOutput(); err != nil {
			t.Fatalf("sgdisk: %v\n%s", err, out)
		}
		api.do(addrs["rep-b"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "provide"}).want(202)
		settled("available")
		if out, _ := exec.Command("sgdisk", "-p", disk).CombinedOutput(); regexp.MustCompile(`(?m)^\s+1\s`).Match(out) {
			t.Errorf("after cleaning the disk still has its partition:\n%s", out)
		}
		// Deploy through rep-c with image_download_source=local: rep-c
		// caches the image and gives the agent a token, and the balancer
		// sends every /images/ request to rep-a (startHAProxy), so the
		// image is written only if rep-a serves rep-c's token.
		api.do(addrs["rep-c"], "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info", "value": map[string]any{
			"image_source": origin.URL + "/disk.raw", "image_os_hash_algo": "sha256", "image_os_hash_value": im.RawSum, "image_download_source": "local"}}}).want(200)
		api.do(addrs["rep-c"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "active"}).want(202)
		settled("active")
		f, err := os.Open(disk)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got := make([]byte, 8<<20)
		if _, err := f.ReadAt(got, 2048*512); err != nil || !bytes.Contains(got, []byte(im.Marker)) {
			t.Errorf("the disk does not hold the image (%v)", err)
		}
		// Who did what: rep-b built the cleaning's ISO and cleaned,
		// rep-c built the deploy's and deployed.
		did := map[string]bool{}
		for _, e := range api.do(addrs["rep-a"], "GET", "/v1/nodes/"+id+"/history?detail=true", nil).json()["history"].([]any) {
			ev := e.(map[string]any)
			did[fmt.Sprint(ev["conductor"])+": "+strings.Join(strings.Fields(fmt.Sprint(ev["event"]))[:2], " ")] = true
		}
		for _, want := range []string{"rep-b: Built the", "rep-b: All 1", "rep-c: Built the", "rep-c: All 5"} {
			if !did[want] {
				t.Errorf("history lacks %q: %v", want, did)
			}
		}
	})

	t.Run("firmware image", func(t *testing.T) {
		img := make([]byte, 3<<20+7)
		_, _ = rand.Read(img)
		r := api.doRaw(addrs["rep-a"], "POST", "/v1/anvil/firmware-images?name=bios-2.0.bin", img, "application/octet-stream")
		r.want(201)
		sum := sha256.Sum256(img)
		want := "http://" + lb + "/firmware/" + hex.EncodeToString(sum[:]) + "/bios-2.0.bin"
		if got := r.json()["url"]; got != want {
			t.Fatalf("upload answered url %v, want %s", got, want)
		}
		// A firmware.update that rep-c runs names rep-a's upload to the
		// BMC, which fetches it through the balancer (below).
		fake := bmctest.StartFirmwareBMC(t, "location", "pending")
		r = api.do(addrs["rep-a"], "POST", "/v1/nodes", map[string]any{"name": "fw", "driver": "redfish", "driver_info": fake.DriverInfo()})
		r.want(201)
		id := r.json()["uuid"].(string)
		api.do(addrs["rep-a"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"}).want(202)
		api.wait(addrs["rep-a"], id, func(n map[string]any) bool { return n["provision_state"] == "manageable" })
		api.do(addrs["rep-c"], "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "clean_steps": []any{
			map[string]any{"interface": "firmware", "step": "update", "args": map[string]any{"settings": []any{
				map[string]any{"component": "bmc", "url": want, "wait": 1}}}}}}).want(202)
		api.wait(addrs["rep-a"], id, func(n map[string]any) bool {
			if n["provision_state"] == "clean failed" {
				t.Fatalf("firmware.update: %v", n["last_error"])
			}
			return n["provision_state"] == "manageable" && n["target_provision_state"] == nil
		})
		if !slices.ContainsFunc(fake.Bodies(), func(b string) bool {
			return strings.Contains(b, "SimpleUpdate") && strings.Contains(b, `"ImageURI":"`+want+`"`)
		}) {
			t.Errorf("the BMC was not given %s: %v", want, fake.Bodies())
		}
		if !bytes.Equal(servedEverywhere(strings.TrimPrefix(want, "http://"+lb), 200), img) {
			t.Fatal("the replicas serve other bytes than were uploaded")
		}
		list := api.do(addrs["rep-c"], "GET", "/v1/anvil/firmware-images", nil)
		list.want(200)
		if !strings.Contains(string(list.body), want) {
			t.Errorf("rep-c does not list rep-a's upload: %s", list.body)
		}
		// Deleted through one replica, it is gone from all.
		api.do(addrs["rep-b"], "DELETE", "/v1/anvil/firmware-images/"+hex.EncodeToString(sum[:]), nil).want(204)
		servedEverywhere(strings.TrimPrefix(want, "http://"+lb), 404)
	})

	t.Run("console", func(t *testing.T) {
		sim := bmctest.StartSOL(t)
		serial := sim.Serial(t)
		r := api.do(addrs["rep-a"], "POST", "/v1/nodes", map[string]any{"name": "sol", "driver": "ipmi",
			"driver_info": sim.DriverInfo(bmctest.Password), "console_interface": "ipmitool-socat"})
		r.want(201)
		id := r.json()["uuid"].(string)
		// Enabled through rep-a: its conductor listens.
		api.do(addrs["rep-a"], "PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}).want(202)
		api.wait(addrs["rep-a"], id, func(n map[string]any) bool { return n["console_enabled"] == true })
		st := api.do(addrs["rep-c"], "GET", "/v1/nodes/"+id+"/states/console", nil).json()
		if info, _ := st["console_info"].(map[string]any); info == nil || !strings.HasPrefix(fmt.Sprint(info["url"]), "tcp://127.0.0.1:") {
			t.Fatalf("console state: %v", st)
		}
		for _, via := range []string{addrs["rep-b"], addrs["rep-c"], lb} {
			consoleThrough(t, via, id, serial)
		}
	})
}

// needHAProxy finds Debian's haproxy (in /usr/sbin, which a user's PATH
// may lack); without it the test skips, except in CI.
func needHAProxy(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("haproxy (Debian haproxy) is required in CI")
	}
	t.Skip("skipping: haproxy (Debian haproxy) is not installed")
	return ""
}

// startReplica runs `anvil serve` in dir, the state directory all
// replicas share, until the test ends.
func startReplica(t *testing.T, bin, dir, name, addr string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr, "--conductor-name", name}, args...)...)
	cmd.Dir = dir
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, log.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, err := http.Get("http://" + addr + "/healthz"); err == nil {
			r.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s did not start:\n%s", name, log.String())
		}
	}
}

// startHAProxy balances lb over the replicas, round robin, each request
// on its own (no stickiness); X-Served-By names the replica that served.
func startHAProxy(t *testing.T, haproxy, lb string, names []string, addrs map[string]string) {
	t.Helper()
	var servers strings.Builder
	for _, n := range names {
		fmt.Fprintf(&servers, "    server %s %s\n", n, addrs[n])
	}
	cfg := fmt.Sprintf(`global
    maxconn 512
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend anvil
    bind %s
    default_backend replicas
    # Images for agents go to the first replica only: a deploy another
    # replica runs then has its token served by one that did not give it.
    use_backend images if { path_beg /images/ }
backend replicas
    balance roundrobin
    http-response set-header X-Served-By %%s
%s
backend images
    http-response set-header X-Served-By %%s
    server %s %s
`, lb, servers.String(), names[0], addrs[names[0]])
	dir := t.TempDir()
	file := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxy, "-c", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
	cmd := exec.Command(haproxy, "-db", "-f", file)
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that the cleanup ends any worker too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r, err := http.Get("http://" + lb + "/healthz"); err == nil {
			r.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not answer:\n%s", log.String())
		}
	}
}

// fetch GETs u on a connection of its own, so that the balancer places
// each request afresh, with header pairs h.
func fetch(t *testing.T, u string, h ...string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode, b, resp.Header
}

// apiClient calls the API of one replica or the balancer with a token.
type apiClient struct {
	t     *testing.T
	token string
}

type apiResponse struct {
	t      *testing.T
	what   string
	status int
	body   []byte
}

func (r apiResponse) want(status int) {
	r.t.Helper()
	if r.status != status {
		r.t.Fatalf("%s: %d, want %d: %s", r.what, r.status, status, r.body)
	}
}

func (r apiResponse) json() map[string]any {
	r.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		r.t.Fatalf("%s: %v: %s", r.what, err, r.body)
	}
	return m
}

func (c *apiClient) do(addr, method, path string, body any) apiResponse {
	c.t.Helper()
	var raw []byte
	ct := ""
	if body != nil {
		raw, _ = json.Marshal(body)
		ct = "application/json"
	}
	return c.doRaw(addr, method, path, raw, ct)
}

func (c *apiClient) doRaw(addr, method, path string, body []byte, ct string) apiResponse {
	c.t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
	req.Header.Set("X-Auth-Token", c.token)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		c.t.Fatalf("%s %s on %s: %v", method, path, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{t: c.t, what: method + " " + path + " on " + addr, status: resp.StatusCode, body: b}
}

// wait polls the node through addr until ok, for at most two minutes.
func (c *apiClient) wait(addr, id string, ok func(map[string]any) bool) {
	c.t.Helper()
	var n map[string]any
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if n = c.do(addr, "GET", "/v1/nodes/"+id, nil).json(); ok(n) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s: provision_state %v, console_enabled %v, last_error %v", id, n["provision_state"], n["console_enabled"], n["last_error"])
		}
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consoleThrough signs in to the portal at addr and opens the node's
// console through its WebSocket: what is typed reaches the machine's
// serial port, and what the machine writes reaches the browser.
func consoleThrough(t *testing.T, addr, id string, serial bmctest.Port) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get("http://" + addr + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field on the login page via %s: %d", addr, resp.StatusCode)
	}
	resp, err = c.PostForm("http://"+addr+"/login", url.Values{"csrf": {string(m[1])}, "username": {"root"}, "password": {"root-password-1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 303 {
		t.Fatalf("sign in via %s: %d", addr, resp.StatusCode)
	}
	h := http.Header{}
	for _, ck := range jar.Cookies(&url.URL{Scheme: "http", Host: addr}) {
		h.Add("Cookie", ck.Name+"="+ck.Value)
	}
	h.Set("Origin", "http://"+addr)
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/nodes/"+id+"/console/ws", h)
	if err != nil {
		st := 0
		if resp != nil {
			st = resp.StatusCode
		}
		t.Fatalf("console WebSocket via %s: %d %v", addr, st, err)
	}
	defer ws.Close()

	// Typed in the browser, seen on the serial port, and back.
	bmctest.RoundTrip(t, "via "+addr, bmctest.WebSocket(ws), serial, 30*time.Second)
	// Leaving frees the console (one viewer at a time) for the next.
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
}
