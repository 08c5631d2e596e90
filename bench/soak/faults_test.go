package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// faultsDuring injects the faults at fixed points of the load and returns
// when the load's time is up: a replica killed at 15 % (started again 5 s
// later), a BMC stopped for 30 s at 30 %, PostgreSQL restarted at 55 %.
func (s *soak) faultsDuring(t *testing.T, d time.Duration) {
	at := func(frac float64) { time.Sleep(time.Until(s.start.Add(time.Duration(frac * float64(d))))) }
	done := make(chan struct{}, 3)

	at(0.15)
	go func() { s.killReplica(t, 2); done <- struct{}{} }()
	at(0.30)
	go func() { s.stopBMC(t, 0); done <- struct{}{} }()
	at(0.55)
	if why := pgRestartUnavailable(); why != "" {
		t.Logf("PostgreSQL restart skipped: %s", why)
		done <- struct{}{}
	} else {
		go func() { s.restartPostgres(t); done <- struct{}{} }()
	}
	at(1)
	for range 3 {
		<-done
	}
}

func (s *soak) addFault(f fault) {
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
}

// killReplica sends SIGKILL to replica i, waits 5 s and starts it again;
// its recovery is done when every node it held is released.
func (s *soak) killReplica(t *testing.T, i int) {
	ctx := context.Background()
	p := s.procs[i]
	p.up.Store(false)
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	held, _ := s.db.Node.Query().Where(node.Reservation(p.name)).IDs(ctx)
	time.Sleep(5 * time.Second)
	s.startReplica(t, i)
	back := time.Now()
	for len(held) > 0 && time.Since(start) < 2*time.Minute {
		n, _ := s.db.Node.Query().Where(node.IDIn(held...), node.Reservation(p.name),
			node.ProvisionStateIn("cleaning", "clean wait")).Count(ctx)
		if n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.addFault(fault{what: fmt.Sprintf("kill -9 %s (held %d nodes); serving again after %.1fs", p.name, len(held), back.Sub(start).Seconds()),
		start: start, end: back, replica: i})
	s.addFault(fault{what: fmt.Sprintf("  its interrupted nodes released %.1fs after the kill", time.Since(start).Seconds()), replica: -1})
}

// stopBMC stops ipmi_sim i for 30 s; recovery is the first power action
// on its node that completes after the BMC is back.
func (s *soak) stopBMC(t *testing.T, i int) {
	start := time.Now()
	s.sims[i].Stop()
	time.Sleep(30 * time.Second)
	if err := s.sims[i].Restart(); err != nil {
		t.Errorf("restarting ipmi_sim: %v", err)
		return
	}
	back := time.Now()
	id := s.ipmiIDs[i]
	for time.Since(back) < 2*time.Minute {
		st, _ := s.do("admin", s.live(), "PUT /v1/nodes/{node}/states/power", "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"})
		if st != 202 {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			st, b := s.do("admin", s.live(), "GET /v1/nodes/{node}", "GET", "/v1/nodes/"+id+"?fields=power_state,target_power_state,last_error", nil)
			var n struct {
				Power  *string `json:"power_state"`
				Target *string `json:"target_power_state"`
				Err    *string `json:"last_error"`
			}
			if st != 200 || json.Unmarshal(b, &n) != nil || n.Target != nil {
				continue
			}
			if n.Err == nil && n.Power != nil && *n.Power == "power on" {
				s.addFault(fault{what: fmt.Sprintf("ipmi_sim of ipmi-%d stopped 30s; power action works %.1fs after it is back", i, time.Since(back).Seconds()),
					start: start, end: time.Now(), replica: -1})
				return
			}
			break
		}
	}
	t.Errorf("no power action on ipmi-%d completed within 2 minutes of its BMC coming back", i)
}

// pgRestartUnavailable says why PostgreSQL cannot be restarted here, or "".
func pgRestartUnavailable() string {
	if !*pgRestart {
		return "-soak.pg-restart=false"
	}
	if v := os.Getenv("ANVIL_TEST_PG"); v != "" && v != storetest.DefaultPG && *pgCluster == "main" {
		return "ANVIL_TEST_PG names another server than the local cluster; name its cluster with -soak.pg-cluster"
	}
	if _, err := os.Stat(filepath.Join("/etc/postgresql", pgVersion, *pgCluster)); err != nil {
		return "no local cluster " + pgVersion + "/" + *pgCluster
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		return "pg_ctlcluster is not installed"
	}
	if os.Geteuid() != 0 {
		return "pg_ctlcluster needs root here"
	}
	return ""
}

// restartPostgres restarts the cluster; 5xx answers are allowed from
// then until every replica answers again (plus 5 s).
func (s *soak) restartPostgres(t *testing.T) {
	start := time.Now()
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", pgVersion, *pgCluster, "restart").CombinedOutput()
	if err != nil {
		t.Errorf("pg_ctlcluster restart: %v\n%s", err, out)
		return
	}
	down := time.Since(start)
	var worst time.Duration
	for i := range s.procs {
		for time.Since(start) < 2*time.Minute {
			if !s.procs[i].up.Load() {
				break
			}
			if st, _ := s.do("admin", i, "GET /v1/nodes?limit=1", "GET", "/v1/nodes?limit=1", nil); st == 200 {
				worst = max(worst, time.Since(start))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.addFault(fault{what: fmt.Sprintf("PostgreSQL restart (pg_ctlcluster took %.1fs); every replica answers %.1fs after it began", down.Seconds(), worst.Seconds()),
		start: start, end: start.Add(worst + 5*time.Second), dbDown: true, replica: -1})
}
