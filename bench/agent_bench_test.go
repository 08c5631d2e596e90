package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkAgentHeartbeat: 10,000 nodes in clean wait, each with its
// agent token and a port, served by `anvil serve` in its own process as
// shipped (authentication on, the access log on at info level, written to
// a file; the per-address agent rate limit on). Each fake agent speaks
// Ironic's agent protocol from its own loopback address (127.1.x.y, which
// Linux routes to lo) over its own kept-alive connection, with its
// callback_url on that address, as a ramdisk on a provisioning network
// does. Every agent looks its node up once by MAC and sends its first
// heartbeat (the audited one), untimed; then b.N routine heartbeats come
// from 64 concurrent clients, round-robin over the agents.
//
// Reports heartbeats/s, the server process's CPU time per heartbeat
// (user + system from /proc, which other load on the machine affects far
// less than the rate), lookups/s and the 1-minute load average at the
// end. Issue 40 asks ≥ 3,000 heartbeats/s on SQLite and ≥ 2,000 on
// PostgreSQL.
//
//	go test -run '^$' -bench AgentHeartbeat -benchtime 50000x ./bench/
func BenchmarkAgentHeartbeat(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := agentSetup(b, backend)
			var next atomic.Int64
			cpu0 := f.srv.cpuTime()
			b.ResetTimer()
			start := time.Now()
			spread(agentClients, agentClients, func(int) {
				for {
					k := int(next.Add(1)) - 1
					if k >= b.N {
						return
					}
					if err := f.agents[k%fleet].heartbeat(f.url); err != nil {
						b.Error(err)
						return
					}
				}
			})
			el := time.Since(start)
			b.StopTimer()
			cpu := f.srv.cpuTime() - cpu0
			b.ReportMetric(float64(b.N)/el.Seconds(), "heartbeats/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/heartbeat")
			b.ReportMetric(f.lookups, "lookups/s")
			b.ReportMetric(loadAvg(), "load1")
			f.check(b)
		})
	}
}

const agentClients = 64

// agentFixture is a served fleet whose agents have looked up and sent
// their first heartbeat: once per backend per run, since the benchmark
// function runs more than once.
type agentFixture struct {
	srv     *server
	url     string
	db      *store.DB
	agents  []*fakeAgent
	lookups float64
}

var agentFixtures = map[string]*agentFixture{}

func agentSetup(b *testing.B, backend string) *agentFixture {
	fixMu.Lock()
	defer fixMu.Unlock()
	if f, ok := agentFixtures[backend]; ok {
		return f
	}
	// One fleet at a time: the previous backend's is done with, and the
	// agents' 10,000 connections to it count against this process's open
	// files.
	for _, f := range agentFixtures {
		f.stop()
	}
	setting := storetest.Setting(&keepAlive{b}, backend)
	db := storetest.Open(&keepAlive{b}, setting)
	macs, toks := agentFleet(b, db.Client, fleet)
	f := &agentFixture{db: db, agents: make([]*fakeAgent, fleet)}
	f.srv = agentServer(b, setting)
	f.url = f.srv.url
	agentFixtures[backend] = f
	for i := range f.agents {
		f.agents[i] = newFakeAgent(i, toks[i])
	}
	start := time.Now()
	spread(fleet, agentClients, func(i int) {
		if err := f.agents[i].lookup(f.url, macs[i]); err != nil {
			b.Error(err)
		}
	})
	f.lookups = float64(fleet) / time.Since(start).Seconds()
	spread(fleet, agentClients, func(i int) {
		if err := f.agents[i].heartbeat(f.url); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		b.FailNow()
	}
	return f
}

// stop closes the agents' connections and stops the server.
func (f *agentFixture) stop() {
	for _, a := range f.agents {
		if a != nil {
			a.hc.CloseIdleConnections()
		}
	}
	if f.srv.cmd.ProcessState == nil {
		f.srv.cmd.Process.Kill()
		f.srv.cmd.Wait()
	}
}

// agentServer starts `anvil serve` as an operator would run it, with the
// agents' network given and the power sync (which would call 10,000 fake
// BMCs) off; its log goes to a file, as to a journal.
func agentServer(b *testing.B, setting string) *server {
	port := freePort(b)
	logf, err := os.Create(filepath.Join((&keepAlive{b}).TempDir(), "anvil.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(binary(b), "serve", "--listen", "127.0.0.1:"+port, "--database", setting,
		"--agent-networks", "127.0.0.0/8", "--power-sync", "0",
		// Every fake agent keeps its connection open, as a requests
		// session does between heartbeats: 10,000 of them are past the
		// default bound.
		"--max-connections", fmt.Sprint(2*fleet))
	cmd.Stderr, cmd.Stdout = logf, logf
	// On PostgreSQL the first admin's password file goes to the working
	// directory: the run's own, not the source tree.
	cmd.Dir = filepath.Dir(logf.Name())
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// The server outlives the sub-benchmark that starts it.
	s := &server{url: "http://127.0.0.1:" + port, cmd: cmd}
	waitReady(b, s.url)
	return s
}

// check reads every node back: each must still be in clean wait with its
// agent's callback URL and a heartbeat time recorded, so that the
// heartbeats measured were written, not refused or ignored.
func (f *agentFixture) check(b *testing.B) {
	ctx := context.Background()
	ns, err := f.db.Client.Node.Query().Select(node.FieldName, node.FieldProvisionState, node.FieldDriverInternalInfo).All(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(ns) != fleet {
		b.Fatalf("%d nodes, want %d", len(ns), fleet)
	}
	for _, n := range ns {
		i, _ := strconv.Atoi(strings.TrimPrefix(*n.Name, "agent-"))
		if n.ProvisionState != "clean wait" || n.DriverInternalInfo["agent_url"] != f.agents[i].callback ||
			n.DriverInternalInfo["agent_last_heartbeat"] == nil {
			b.Fatalf("node %s after the heartbeats: %s, %v", *n.Name, n.ProvisionState, n.DriverInternalInfo)
		}
	}
}

// agentFleet puts n nodes with one port and an agent token each straight
// into the database in clean wait: a benchmark-only shortcut, since the
// conductor's in-band cleaning, with a real agent, is what puts nodes
// there. It returns the ports' MACs and the tokens.
func agentFleet(b *testing.B, db *ent.Client, n int) (macs, toks []string) {
	ctx := context.Background()
	macs, toks = make([]string, n), make([]string, n)
	for lo := 0; lo < n; lo += 1000 {
		hi := min(n, lo+1000)
		nb := make([]*ent.NodeCreate, 0, hi-lo)
		for i := lo; i < hi; i++ {
			toks[i] = fmt.Sprintf("bench-token-%05d-%032x", i, i*7919)
			nb = append(nb, db.Node.Create().SetUUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)).
				SetName(fmt.Sprintf("agent-%05d", i)).SetDriver("fake-hardware").SetProvisionState("clean wait").
				SetDriverInternalInfo(map[string]any{"agent_secret_token": toks[i]}))
		}
		made, err := db.Node.CreateBulk(nb...).Save(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pb := make([]*ent.PortCreate, 0, len(made))
		for j, nd := range made {
			i := lo + j
			macs[i] = fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)
			pb = append(pb, db.Port.Create().SetUUID(fmt.Sprintf("00000000-0000-4000-9000-%012d", i)).SetAddress(macs[i]).SetNodeID(nd.ID))
		}
		if err := db.Port.CreateBulk(pb...).Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if c, err := db.Node.Query().Where(node.ProvisionState("clean wait")).Count(ctx); err != nil || c != n {
		b.Fatalf("%d nodes in clean wait (%v)", c, err)
	}
	return macs, toks
}

// fakeAgent is one machine's agent: its own source address, connection,
// node and token.
type fakeAgent struct {
	i        int
	hc       *http.Client
	id, tok  string
	callback string
	body     []byte
}

func newFakeAgent(i int, tok string) *fakeAgent {
	ip := net.IPv4(127, 1, byte(i/250), byte(i%250+1))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
	a := &fakeAgent{i: i, tok: tok, callback: "http://" + ip.String() + ":9999",
		id: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		hc: &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}}}
	a.body, _ = json.Marshal(map[string]any{"callback_url": a.callback, "agent_version": "9.4.1", "agent_token": tok})
	return a
}

// lookup finds the agent's node by MAC, as the agent does when it starts.
func (a *fakeAgent) lookup(base, mac string) error {
	var out struct {
		Node struct{ UUID string }
	}
	raw, st, err := a.call("GET", base+"/v1/lookup?addresses="+mac, nil)
	if err == nil && st == 200 {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil || st != 200 || out.Node.UUID != a.id {
		return fmt.Errorf("agent %d: lookup: %d %v %s", a.i, st, err, raw)
	}
	return nil
}

func (a *fakeAgent) heartbeat(base string) error {
	raw, st, err := a.call("POST", base+"/v1/heartbeat/"+a.id, a.body)
	if err != nil || st != 202 {
		return fmt.Errorf("agent %d: heartbeat: %d %v %s", a.i, st, err, raw)
	}
	return nil
}

func (a *fakeAgent) call(method, url string, body []byte) ([]byte, int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.68")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return raw, resp.StatusCode, err
}

// loadAvg is the machine's 1-minute load average, reported beside the
// rates since the machine may be shared.
func loadAvg() float64 {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	l, _ := strconv.ParseFloat(f[0], 64)
	return l
}

// spread runs fn(0..n-1) on workers goroutines.
func spread(n, workers int, fn func(int)) {
	var wg sync.WaitGroup
	ch := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range ch {
				fn(i)
			}
		})
	}
	for i := range n {
		ch <- i
	}
	close(ch)
	wg.Wait()
}
