// Package bench measures Anvil at the sizes the issues name: 10,000 nodes
// over 500 owner/lessee projects, on SQLite and on PostgreSQL. It builds
// the real binary, enrols through `anvil node import`, serves with
// `anvil serve` in its own process and measures over loopback HTTP, so the
// figures (and the RSS) are the server's, not a test harness's.
//
//	go test -run '^$' -bench . -benchtime 200x ./bench/
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/store/storetest"
)

const (
	fleet    = 10000
	projects = 500
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds anvil once per run.
func binary(b *testing.B) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "anvil-bench")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "anvil")
		// Built as a release builds it (Taskfile.yml's release task): a
		// static binary, as the .deb and the image ship, whose memory is
		// what an operator sees. With cgo the process maps libc as well.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binPath, "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// fleetFile writes an enrolment file of n fake nodes spread over the
// projects: owner p(i%500), lessee p((i+7)%500) for two nodes in three.
func fleetFile(b *testing.B, n int) string {
	path := filepath.Join(b.TempDir(), "fleet.csv")
	var sb strings.Builder
	sb.WriteString("name,driver,owner,lessee,resource_class,traits,properties.cpus,properties.memory_mb\n")
	for i := 0; i < n; i++ {
		lessee := ""
		switch {
		case i%10 == 0:
			// One large tenant leasing 1,000 nodes, for the project-scoped list.
			lessee = "big-tenant"
		case i%3 != 2:
			lessee = fmt.Sprintf("p%03d", (i+7)%projects)
		}
		fmt.Fprintf(&sb, "bench-%05d,fake,p%03d,%s,baremetal,CUSTOM_BENCH;CUSTOM_RACK_%d,%d,%d\n",
			i, i%projects, lessee, i%20, 16<<(i%3), 65536)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// server is a running `anvil serve` process.
type server struct {
	url string
	cmd *exec.Cmd
}

// memMiB reads sizes from one read of the process's /proc status, which
// counts in KiB, so that they add up: VmRSS, and its parts RssAnon (heap,
// stacks, SQLite's caches) and RssFile (the binary's pages the kernel
// mapped in, which it may drop).
func (s *server) memMiB() map[string]float64 {
	m := map[string]float64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m[strings.TrimSuffix(f[0], ":")] = kb / 1024
		}
	}
	return m
}

type fixture struct {
	srv      *server
	authSrv  *server // the same database behind authentication
	token    string  // a member of big-tenant
	enrolSec float64
	showID   string
	setting  string
	// conductor is the first serve process's conductor.
	conductor string
}

var (
	fixMu    sync.Mutex
	fixtures = map[string]*fixture{}
)

// setup enrols the fleet into a fresh database of the backend and starts a
// server on it, once per backend per run.
func setup(b *testing.B, backend string) *fixture {
	fixMu.Lock()
	defer fixMu.Unlock()
	if f, ok := fixtures[backend]; ok {
		return f
	}
	bin := binary(b)
	// The database must outlive the sub-benchmark that first asks for it.
	setting := storetest.Setting(&keepAlive{b}, backend)
	file := fleetFile(b, fleet)
	// Operator commands use a database that exists (issue 41): make it.
	if out, err := exec.Command(bin, "db", "init", "--database", setting).CombinedOutput(); err != nil {
		b.Fatalf("db init: %v\n%s", err, out)
	}
	start := time.Now()
	out, err := exec.Command(bin, "node", "import", "--database", setting, "--log-level", "warn", file).CombinedOutput()
	if err != nil {
		b.Fatalf("import: %v\n%s", err, out)
	}
	f := &fixture{enrolSec: time.Since(start).Seconds(), setting: setting}
	port := freePort(b)
	cmd := exec.Command(bin, "serve", "--auth", "none", "--listen", "127.0.0.1:"+port, "--database", setting, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f.srv = &server{url: "http://127.0.0.1:" + port, cmd: cmd}
	waitReady(b, f.srv.url)

	for _, args := range [][]string{
		{"user", "create", "bench-tenant"},
		{"user", "grant", "bench-tenant", "--project", "big-tenant", "--role", "member"},
	} {
		if out, err := exec.Command(bin, append(args, "--database", setting)...).CombinedOutput(); err != nil {
			b.Fatalf("anvil %v: %v\n%s", args, err, out)
		}
	}
	tok, err := exec.Command(bin, "token", "create", "--user", "bench-tenant", "--project", "big-tenant", "--roles", "member", "--database", setting).Output()
	if err != nil {
		b.Fatalf("token create: %v", err)
	}
	f.token = strings.TrimSpace(string(tok))
	port = freePort(b)
	cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:"+port, "--database", setting, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f.authSrv = &server{url: "http://127.0.0.1:" + port, cmd: cmd}
	waitReady(b, f.authSrv.url)
	var list struct {
		Nodes []struct{ UUID string } `json:"nodes"`
	}
	get(b, f.srv.url+"/v1/nodes?limit=1&sort_key=name", &list)
	f.showID = list.Nodes[0].UUID
	var cs struct {
		Conductors []struct{ Hostname string } `json:"conductors"`
	}
	get(b, f.srv.url+"/v1/conductors?sort_key=hostname", &cs)
	f.conductor = cs.Conductors[0].Hostname
	fixtures[backend] = f
	return f
}

// keepAlive lets storetest register cleanups that run at process exit
// rather than when one sub-benchmark ends.
type keepAlive struct{ *testing.B }

func (k *keepAlive) Cleanup(func())  {}
func (k *keepAlive) TempDir() string { d, _ := os.MkdirTemp("", "anvil-bench-db"); return d }

func freePort(b *testing.B) string {
	for p := 20000 + os.Getpid()%20000; ; p++ {
		if c, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", p)); err == nil {
			c.Body.Close()
			continue
		}
		return strconv.Itoa(p)
	}
}

func waitReady(b *testing.B, url string) {
	for i := 0; i < 200; i++ {
		if r, err := http.Get(url + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("server did not become ready")
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

func get(b *testing.B, url string, into any, token ...string) int {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if len(token) > 0 {
		req.Header.Set("X-Auth-Token", token[0])
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			b.Fatal(err)
		}
	}
	return len(body)
}

// measure runs b.N sequential requests and reports p50 and p95 latency.
func measure(b *testing.B, url string, token ...string) {
	get(b, url, nil, token...) // warm connection and caches
	lat := make([]time.Duration, b.N)
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		size = get(b, url, nil, token...)
		lat[i] = time.Since(t)
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(size), "bytes")
}

func BenchmarkNodes(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			b.Run("enrol", func(b *testing.B) {
				b.ReportMetric(float64(fleet)/f.enrolSec, "nodes/s")
				b.ReportMetric(f.enrolSec, "total-s")
			})
			b.Run("list-detail-1000", func(b *testing.B) { measure(b, f.srv.url+"/v1/nodes?detail=true&limit=1000") })
			b.Run("list-default", func(b *testing.B) { measure(b, f.srv.url+"/v1/nodes") })
			b.Run("list-owner", func(b *testing.B) { measure(b, f.srv.url+"/v1/nodes?owner=p123") })
			b.Run("show", func(b *testing.B) { measure(b, f.srv.url+"/v1/nodes/"+f.showID) })
			// The two serve processes are the default group's ring, so
			// ?conductor= keeps about half the nodes, computed per node.
			b.Run("list-conductor-1000", func(b *testing.B) {
				measure(b, f.srv.url+"/v1/nodes?limit=1000&conductor="+url.QueryEscape(f.conductor))
			})
			b.Run("list-conductor-detail-1000", func(b *testing.B) {
				measure(b, f.srv.url+"/v1/nodes?detail=true&limit=1000&conductor="+url.QueryEscape(f.conductor))
			})
			b.Run("conductors-detail", func(b *testing.B) { measure(b, f.srv.url+"/v1/conductors?detail=true") })
			// A project member's token: authentication, policy and the SQL
			// tenant filter, on a project that leases 1,000 of the 10,000.
			b.Run("project-list-detail-1000", func(b *testing.B) {
				measure(b, f.authSrv.url+"/v1/nodes?detail=true&limit=1000", f.token)
			})
			b.Run("rss", func(b *testing.B) {
				m := f.srv.memMiB()
				b.ReportMetric(m["VmRSS"], "MiB")
				b.ReportMetric(m["RssAnon"], "anon-MiB")
				b.ReportMetric(m["RssFile"], "file-MiB")
			})
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range fixtures {
		for _, s := range []*server{f.srv, f.authSrv} {
			if s != nil {
				s.cmd.Process.Kill()
				s.cmd.Wait()
			}
		}
	}
	for _, f := range agentFixtures {
		f.stop()
	}
	os.Exit(code)
}
