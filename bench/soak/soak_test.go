// Package soak runs Anvil as an operator would at fleet scale — three
// `anvil serve` replicas on one PostgreSQL, 10,000 fake nodes and a few
// IPMI nodes behind ipmi_sim — under a mixed load from several personas
// while things fail: a replica is killed with SIGKILL mid-run and
// started again, PostgreSQL restarts, a BMC goes away for 30 s. It then
// checks what an operator would: every step ran once or the node failed
// naming it, nothing is left locked, every acknowledged write is there,
// 5xx only while the database was down, memory and goroutines flat.
//
//	go test -v -run TestSoak ./bench/soak/ -soak            # CI length (~3 min)
//	go test -v -run TestSoak ./bench/soak/ -soak.full -timeout 30m   # 6 minutes of load
//
// In CI (CI=true) the short run needs no flag; elsewhere it is skipped
// unless asked for, since it restarts the machine's PostgreSQL.
package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var (
	run       = flag.Bool("soak", false, "run the soak-and-fault test outside CI (the CI length)")
	full      = flag.Bool("soak.full", false, "run the full soak: 6 minutes of load")
	pgRestart = flag.Bool("soak.pg-restart", true, "restart PostgreSQL once during the load (pg_ctlcluster; disrupts everything else using it)")
	// A cluster of its own (with ANVIL_TEST_PG naming its port) lets the
	// full soak restart PostgreSQL while other work uses the main one.
	pgCluster = flag.String("soak.pg-cluster", "main", "the local PostgreSQL cluster (of version "+pgVersion+") that ANVIL_TEST_PG points at and the soak restarts")
	fleet     = flag.Int("soak.nodes", 10000, "fake nodes enrolled")
)

const (
	replicas  = 3
	sims      = 3
	runNodes  = 240 // fake nodes the runbook and clean runs use, in owner project soak-p1
	runbook   = "CUSTOM_SOAK"
	owner     = "soak-p1"
	pgVersion = "15"
)

func TestSoak(t *testing.T) {
	if !*run && !*full && os.Getenv("CI") != "true" {
		t.Skip("skipping the soak-and-fault test: it runs for minutes and restarts PostgreSQL; run it with -soak (CI length) or -soak.full, or CI=true")
	}
	load := 90 * time.Second
	window := 30 * time.Second
	if *full {
		load, window = 6*time.Minute, time.Minute
	}
	bmctest.Need(t)
	s := newSoak(t)
	s.setUp(t)
	s.load(t, load, window)
	s.check(t)
}

// soak is the running system and what the load saw.
type soak struct {
	bin, setting string
	db           *store.DB
	procs        [replicas]*replica
	sims         []*bmctest.Sim
	tokens       map[string]string // persona -> token
	fakeIDs      []string          // node uuids, power and read targets
	runIDs       []string          // node uuids the runs use
	ownedIDs     []string          // nodes of soak-p1 (the runs' and a few more)
	ipmiIDs      []string
	start        time.Time

	mu      sync.Mutex
	calls   []call
	runs    map[string][]time.Time // node uuid -> acknowledged run times
	tried   map[string]int         // node uuid -> runs sent, acknowledged or not
	writes  map[string]string      // "uuid extra-key" -> value acknowledged
	faults  []fault
	samples []sample
	window  time.Duration
	loadEnd time.Time
	flat    []string
	// failures counts failed runs by message, node names left out.
	failures map[string]int
}

type replica struct {
	name, addr string
	cmd        *exec.Cmd
	up         atomic.Bool
}

type call struct {
	at      time.Time
	route   string
	replica int
	status  int // 0: no HTTP answer
	kind    string
	took    time.Duration
}

type fault struct {
	what       string
	start, end time.Time
	// dbDown allows 5xx and unanswered requests on every replica in the
	// window; replica >= 0 allows unanswered requests on that one.
	dbDown  bool
	replica int
}

type sample struct {
	at              time.Time
	replica, pid    int
	rss, goroutines float64
}

func newSoak(t *testing.T) *soak {
	dir := t.TempDir()
	bin := filepath.Join(dir, "anvil")
	out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	setting := storetest.Setting(t, "postgres")
	return &soak{bin: bin, setting: setting, tokens: map[string]string{},
		runs: map[string][]time.Time{}, tried: map[string]int{}, writes: map[string]string{}, failures: map[string]int{}}
}

func (s *soak) anvil(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.bin, append(args, "--database", s.setting)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func (s *soak) setUp(t *testing.T) {
	ctx := context.Background()
	s.anvil(t, "", "migrate")
	// Enrolment goes through anvil node import, the bulk path an
	// operator uses; the runs' nodes belong to soak-p1 and carry the
	// runbook's trait.
	var csv strings.Builder
	csv.WriteString("name,driver,owner,traits\n")
	for i := range *fleet {
		if i < runNodes+60 {
			fmt.Fprintf(&csv, "soak-%05d,fake,%s,%s\n", i, owner, runbook)
		} else {
			fmt.Fprintf(&csv, "soak-%05d,fake,,\n", i)
		}
	}
	file := filepath.Join(t.TempDir(), "nodes.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s.anvil(t, "", "node", "import", file)
	s.openDB(t)
	db := s.db
	// Set-up only: verifying 10,000 fake BMCs through "manage" would
	// take the load's time; the runs need manageable nodes.
	if err := db.Node.Update().SetProvisionState("manageable").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := db.Node.Query().Order(ent.Asc(node.FieldName)).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range all {
		switch {
		case i < runNodes:
			s.runIDs = append(s.runIDs, n.UUID)
			s.ownedIDs = append(s.ownedIDs, n.UUID)
		case i < runNodes+60:
			s.ownedIDs = append(s.ownedIDs, n.UUID)
			s.fakeIDs = append(s.fakeIDs, n.UUID)
		default:
			s.fakeIDs = append(s.fakeIDs, n.UUID)
		}
	}
	for _, p := range []struct{ name, scope, role string }{
		{"admin", "--system", "admin"}, {"reader", "--system", "reader"},
		{"p1-member", "--project=" + owner, "member"}, {"p1-reader", "--project=" + owner, "reader"},
	} {
		s.anvil(t, "", "user", "create", p.name)
		s.anvil(t, "", "user", "grant", p.name, p.scope, "--role", p.role)
		s.tokens[p.name] = s.anvil(t, "", "token", "create", "--user", p.name, p.scope, "--roles", p.role)
	}
	for i := range replicas {
		s.procs[i] = &replica{name: fmt.Sprintf("soak-%c", 'a'+i), addr: fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))}
		s.startReplica(t, i)
	}
	t.Cleanup(func() {
		for _, p := range s.procs {
			if p.cmd != nil {
				_ = p.cmd.Process.Kill()
				_, _ = p.cmd.Process.Wait()
			}
		}
	})
	// A public runbook of a long step and BMC steps: long enough that a
	// replica killed at any moment is in the middle of some runs.
	steps := []map[string]any{
		{"interface": "power", "step": "power_on", "order": 1},
		{"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 2}, "order": 2},
		{"interface": "management", "step": "set_boot_device", "args": map[string]any{"device": "pxe"}, "order": 3},
		{"interface": "power", "step": "reboot", "order": 4},
		{"interface": "power", "step": "power_off", "order": 5},
	}
	if st, body := s.must(t, "admin", "POST", "/v1/runbooks", map[string]any{"name": runbook, "public": true, "steps": steps}); st != 201 {
		t.Fatalf("create runbook: %d %s", st, body)
	}
	for i := range sims {
		sim := bmctest.Start(t)
		s.sims = append(s.sims, sim)
		st, body := s.must(t, "admin", "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("ipmi-%d", i), "driver": "ipmi", "driver_info": sim.DriverInfo(bmctest.Password)})
		if st != 201 {
			t.Fatalf("enrol ipmi node: %d %s", st, body)
		}
		var n struct{ UUID string }
		_ = json.Unmarshal(body, &n)
		s.ipmiIDs = append(s.ipmiIDs, n.UUID)
		if st, body := s.must(t, "admin", "PUT", "/v1/nodes/"+n.UUID+"/states/provision", map[string]any{"target": "manage"}); st != 202 {
			t.Fatalf("manage ipmi node: %d %s", st, body)
		}
	}
}

// openDB opens the test's own connection to the database, for set-up
// and checks; check opens it afresh, since a restart of PostgreSQL
// leaves the old pool's connections dead.
func (s *soak) openDB(t *testing.T) {
	// The shared server may be out of connection slots for a moment.
	db, err := store.Open(context.Background(), s.setting)
	for deadline := time.Now().Add(time.Minute); err != nil && store.Unreachable(err) && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		db, err = store.Open(context.Background(), s.setting)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s.db = db
}

func (s *soak) startReplica(t *testing.T, i int) {
	p := s.procs[i]
	cmd := exec.Command(s.bin, "serve", "--database", s.setting, "--listen", p.addr, "--conductor-name", p.name,
		"--heartbeat", "1s", "--heartbeat-timeout", "10s", "--power-sync", "20s", "--power-timeout", "20s", "--bmc-timeout", "5s",
		"--log-level", "warn", "--access-log", "off", "--db-max-open", "16")
	log, err := os.OpenFile(filepath.Join(os.TempDir(), "anvil-soak-"+p.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = cmd.Process.Wait(); log.Close() }()
	p.cmd = cmd
	for range 400 {
		if r, err := http.Get("http://" + p.addr + "/healthz"); err == nil {
			r.Body.Close()
			p.up.Store(true)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("replica %s did not start; see %s", p.name, log.Name())
}

var httpc = &http.Client{Timeout: 30 * time.Second}

// do sends one request to replica i as persona and records it.
func (s *soak) do(persona string, i int, route, method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+s.procs[i].addr+path, rd)
	req.Header.Set("X-Auth-Token", s.tokens[persona])
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if body != nil {
		ct := "application/json"
		if method == "PATCH" {
			ct = "application/json-patch+json"
		}
		req.Header.Set("Content-Type", ct)
	}
	t0 := time.Now()
	resp, err := httpc.Do(req)
	c := call{at: t0, route: route, replica: i}
	var out []byte
	if err != nil {
		c.kind = "no answer: " + errKind(err)
	} else {
		out, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		c.status = resp.StatusCode
		switch {
		case c.status >= 500:
			c.kind = fmt.Sprintf("%d", c.status)
		case c.status == 409:
			c.kind = "409 (node busy, expected)"
		case c.status >= 400:
			c.kind = fmt.Sprintf("%d", c.status)
		}
	}
	c.took = time.Since(t0)
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return c.status, out
}

func errKind(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// must sends a set-up request to the first replica.
func (s *soak) must(t *testing.T, persona, method, path string, body any) (int, []byte) {
	t.Helper()
	st, b := s.do(persona, 0, "setup", method, path, body)
	if st == 0 {
		t.Fatalf("%s %s: no answer", method, path)
	}
	return st, b
}

// live picks a replica that is up.
func (s *soak) live() int {
	for {
		i := rand.IntN(replicas)
		if s.procs[i].up.Load() {
			return i
		}
	}
}

func (s *soak) load(t *testing.T, d, window time.Duration) {
	s.start = time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	every := func(fn func()) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					fn()
				}
			}
		})
	}
	pick := func(ids []string) string { return ids[rand.IntN(len(ids))] }
	// Readers: shows and lists by four personas.
	for _, p := range []string{"admin", "reader", "p1-member", "p1-reader"} {
		ids := s.fakeIDs
		if strings.HasPrefix(p, "p1-") {
			ids = s.ownedIDs
		}
		every(func() {
			i := s.live()
			switch rand.IntN(10) {
			case 0:
				s.do(p, i, "GET /v1/nodes?limit=100", "GET", "/v1/nodes?limit=100", nil)
			case 1:
				s.do(p, i, "GET /v1/nodes/detail?limit=20", "GET", "/v1/nodes/detail?limit=20", nil)
			case 2:
				if strings.HasPrefix(p, "p1-") {
					s.do(p, i, "GET /v1/runbooks", "GET", "/v1/runbooks", nil)
				} else {
					s.do(p, i, "GET /v1/conductors", "GET", "/v1/conductors", nil)
				}
			default:
				s.do(p, i, "GET /v1/nodes/{node}", "GET", "/v1/nodes/"+pick(ids), nil)
			}
		})
	}
	// A writer whose every acknowledged change is checked at the end.
	var seq atomic.Int64
	every(func() {
		id, k := pick(s.fakeIDs), fmt.Sprintf("soak_%d", seq.Add(1))
		v := strconv.FormatInt(time.Now().UnixNano(), 10)
		st, _ := s.do("admin", s.live(), "PATCH /v1/nodes/{node}", "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/extra/" + k, "value": v}})
		if st == 200 {
			s.mu.Lock()
			s.writes[id+" "+k] = v
			s.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	})
	// Power actions on fake and IPMI nodes.
	every(func() {
		id := pick(s.fakeIDs[60:])
		if rand.IntN(4) == 0 {
			id = pick(s.ipmiIDs)
		}
		target := []string{"power on", "power off"}[rand.IntN(2)]
		s.do("admin", s.live(), "PUT /v1/nodes/{node}/states/power", "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": target})
		time.Sleep(100 * time.Millisecond)
	})
	// Runs: project members with the runbook, the admin with explicit
	// clean steps; each runner owns its nodes and runs one at a time.
	const runners = 8
	for r := range runners {
		persona := "p1-member"
		if r%4 == 3 {
			persona = "admin"
		}
		mine := s.runIDs[r*len(s.runIDs)/runners : (r+1)*len(s.runIDs)/runners]
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				s.runOnce(persona, mine[k%len(mine)], stop)
			}
		})
	}
	// Metrics every 5 s from each live replica.
	wg.Go(func() {
		tk := time.NewTicker(5 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				s.scrape()
			}
		}
	})
	s.faultsDuring(t, d)
	close(stop)
	wg.Wait()
	s.window, s.loadEnd = window, time.Now()
}

// runOnce runs the runbook (or explicit steps) on id and waits for it to
// end, bringing a failed node back to manageable for the next run.
func (s *soak) runOnce(persona, id string, stop chan struct{}) {
	body := map[string]any{"target": "clean", "runbook": runbook}
	if persona == "admin" {
		body = map[string]any{"target": "clean", "clean_steps": []map[string]any{
			{"interface": "power", "step": "power_on"}, {"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 1}},
			{"interface": "power", "step": "power_off"}}}
	}
	s.mu.Lock()
	s.tried[id]++
	s.mu.Unlock()
	st, _ := s.do(persona, s.live(), "PUT /v1/nodes/{node}/states/provision", "PUT", "/v1/nodes/"+id+"/states/provision", body)
	if st == 202 {
		s.mu.Lock()
		s.runs[id] = append(s.runs[id], time.Now())
		s.mu.Unlock()
	}
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		st, b := s.do(persona, s.live(), "GET /v1/nodes/{node}", "GET", "/v1/nodes/"+id+"?fields=provision_state,reservation", nil)
		if st != 200 {
			continue
		}
		var n struct {
			ProvisionState string  `json:"provision_state"`
			Reservation    *string `json:"reservation"`
		}
		_ = json.Unmarshal(b, &n)
		if n.Reservation != nil {
			continue
		}
		switch n.ProvisionState {
		case "manageable":
			return
		case "clean failed":
			s.do("admin", s.live(), "PUT /v1/nodes/{node}/states/provision", "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"})
		}
		select {
		case <-stop:
			return
		default:
		}
	}
}

func (s *soak) scrape() {
	for i, p := range s.procs {
		if !p.up.Load() {
			continue
		}
		r, err := httpc.Get("http://" + p.addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		smp := sample{at: time.Now(), replica: i, pid: p.cmd.Process.Pid}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			v, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "process_resident_memory_bytes":
				smp.rss = v
			case "go_goroutines":
				smp.goroutines = v
			}
		}
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
	}
}
