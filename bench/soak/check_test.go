package soak

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
)

// check settles the system and verifies what the load left.
func (s *soak) check(t *testing.T) {
	ctx := context.Background()
	s.openDB(t)
	// Settle: runs in flight finish, locks are released.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		busy, err := s.db.Node.Query().Where(node.Or(node.ReservationNotNil(),
			node.ProvisionStateIn("cleaning", "clean wait", "verifying"))).Count(ctx)
		if err == nil && busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	locked, err := s.db.Node.Query().Where(node.ReservationNotNil()).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range locked {
		fail("node %s left locked by %s in %s", n.UUID, *n.Reservation, n.ProvisionState)
	}
	runs, failedRuns := s.checkRuns(t, fail)
	s.checkWrites(t, fail)
	s.checkErrors(fail)
	s.checkFlat(fail)

	t.Log("\n" + s.summary(runs, failedRuns))
	for _, p := range problems {
		t.Error(p)
	}
}

var (
	startedRE = regexp.MustCompile(`^Step (\S+) started \((\d+) of (\d+)\)$`)
	doneRE    = regexp.MustCompile(`^Step (\S+) done$`)
	allRE     = regexp.MustCompile(`^All (\d+) clean steps done`)
	uuidRE    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`)
)

// checkRuns reads each run node's history: every run it shows started
// its steps in order, each once, and ended either with all done or with
// an error naming the step in progress; every acknowledged run is there.
func (s *soak) checkRuns(t *testing.T, fail func(string, ...any)) (runs, failed int) {
	ctx := context.Background()
	for _, id := range s.runIDs {
		n, err := s.db.Node.Query().Where(node.UUID(id)).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.db.NodeEvent.Query().Where(nodeevent.NodeID(n.ID), nodeevent.EventTypeIn("clean", "conductor")).
			Order(ent.Asc(nodeevent.FieldID)).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		var inRun bool
		var step string
		var next, total int
		for _, e := range evs {
			msg := e.Event
			if m := startedRE.FindStringSubmatch(msg); m != nil {
				var i int
				fmt.Sscan(m[2], &i)
				if i == 1 {
					if inRun {
						fail("node %s: a run started before the previous one ended (at %q)", id, msg)
					}
					inRun, next = true, 1
					fmt.Sscan(m[3], &total)
				}
				if !inRun || i != next {
					fail("node %s: %q out of order (expected step %d of a run): a step ran twice or was skipped", id, msg, next)
				}
				step, next = m[1], i+1
				continue
			}
			if m := doneRE.FindStringSubmatch(msg); m != nil {
				if !inRun || m[1] != step {
					fail("node %s: %q without its start", id, msg)
				}
				continue
			}
			if allRE.MatchString(msg) {
				if !inRun || next != total+1 {
					fail("node %s: %q after %d steps started", id, msg, next-1)
				}
				inRun, step, ended = false, "", ended+1
				runs++
				continue
			}
			if e.Severity == "ERROR" {
				// A failure names the step it interrupted; a run failed
				// before its first step has none to name.
				if inRun && step != "" && !strings.Contains(msg, step) {
					fail("node %s: failure %q does not name step %s", id, msg, step)
				}
				inRun, step, ended = false, "", ended+1
				runs++
				failed++
				msg = uuidRE.ReplaceAllString(msg, "…")
				if len(msg) > 120 {
					msg = msg[:120] + "…"
				}
				s.failures[msg]++
			}
		}
		if inRun {
			fail("node %s: run still open after settling (state %s)", id, n.ProvisionState)
		}
		s.mu.Lock()
		acked, tried := len(s.runs[id]), s.tried[id]
		s.mu.Unlock()
		if ended < acked || ended > tried {
			fail("node %s: %d runs ended in history; %d were acknowledged of %d sent", id, ended, acked, tried)
		}
		if n.ProvisionState != "manageable" && n.ProvisionState != "clean failed" {
			fail("node %s ended in %s", id, n.ProvisionState)
		}
	}
	return runs, failed
}

// checkWrites finds every acknowledged PATCH in the database.
func (s *soak) checkWrites(t *testing.T, fail func(string, ...any)) {
	ctx := context.Background()
	byNode := map[string]map[string]string{}
	for k, v := range s.writes {
		id, key, _ := strings.Cut(k, " ")
		if byNode[id] == nil {
			byNode[id] = map[string]string{}
		}
		byNode[id][key] = v
	}
	missing := 0
	for id, want := range byNode {
		n, err := s.db.Node.Query().Where(node.UUID(id)).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if got, _ := n.Extra[k].(string); got != v {
				missing++
				if missing <= 5 {
					fail("acknowledged write lost: node %s extra.%s = %q, want %q", id, k, got, v)
				}
			}
		}
	}
	if missing > 5 {
		fail("%d acknowledged writes lost in all", missing)
	}
	if len(s.writes) == 0 {
		fail("no write was acknowledged")
	}
}

// checkErrors allows 5xx and unanswered requests only in a fault's window.
func (s *soak) checkErrors(fail func(string, ...any)) {
	excused := func(c call) bool {
		end := c.at.Add(c.took)
		for _, f := range s.faults {
			if end.Before(f.start) || c.at.After(f.end) {
				continue
			}
			if f.dbDown || (c.status == 0 && c.replica == f.replica) {
				return true
			}
		}
		return false
	}
	bad := map[string]int{}
	for _, c := range s.calls {
		if (c.status == 0 || c.status >= 500) && !excused(c) {
			bad[fmt.Sprintf("%s on replica %d: %s", c.route, c.replica, c.kind)]++
		}
	}
	for k, n := range bad {
		fail("%d × %s outside any fault's window", n, k)
	}
}

// checkFlat fails a replica whose memory or goroutines keep growing
// once warm. Each process (a restarted replica's new one too) is judged
// on its own samples from the end of its warm-up — its first window,
// plus 10 s — in consecutive thirds of a window: it fails when the means
// rise from each to the next by more than the noise (steady growth, a
// leak's signature) and over the run by a margin, or when the last is
// past 1.5 times the first plus a fixed allowance (a jump). Caches filling and pools growing during the warm-up are
// what a process does once; a leak keeps doing it.
func (s *soak) checkFlat(fail func(string, ...any)) {
	type series struct {
		name    string
		rss, gs []point
	}
	var all []*series
	byPid := map[int]*series{}
	for _, m := range s.samples {
		se := byPid[m.pid]
		if se == nil {
			name := s.procs[m.replica].name
			if m.pid != s.procs[m.replica].cmd.Process.Pid {
				name += " (before its restart)"
			} else if s.restarted(m.replica) {
				name += " (since its restart)"
			}
			se = &series{name: name}
			byPid[m.pid] = se
			all = append(all, se)
		}
		se.rss = append(se.rss, point{m.at, m.rss / (1 << 20)})
		se.gs = append(se.gs, point{m.at, m.goroutines})
	}
	// Thirds of a window: the CI-length run's 50 s after the warm-up
	// make five, enough to tell a steady rise from noise.
	third := s.window / 3
	for _, se := range all {
		warm := se.rss[0].at.Add(s.window + 10*time.Second)
		rss := judge(se.rss, warm, third, 1, 8)
		gs := judge(se.gs, warm, third, 2, 12.5)
		if len(rss.means) < 2 {
			continue // too short-lived to judge (stopped for a fault)
		}
		s.flat = append(s.flat, fmt.Sprintf("%s: RSS %s MiB, goroutines %s (means of %s windows after a %s warm-up)",
			se.name, joinMeans(rss.means, "%.0f"), joinMeans(gs.means, "%.0f"), third, warm.Sub(se.rss[0].at).Round(time.Second)))
		if rss.problem != "" {
			fail("%s: RSS %s", se.name, rss.problem)
		}
		if gs.problem != "" {
			fail("%s: goroutines %s", se.name, gs.problem)
		}
	}
}

// restarted says whether replica i ran more than one process.
func (s *soak) restarted(i int) bool {
	for _, m := range s.samples {
		if m.replica == i && m.pid != s.procs[i].cmd.Process.Pid {
			return true
		}
	}
	return false
}

type point struct {
	at time.Time
	v  float64
}

type verdict struct {
	means   []float64
	problem string // empty: flat
}

// judge splits the points from warm on into consecutive windows of
// length w (a last, partial one dropped), and finds a problem when at
// least three windows' means each rise over the one before by more than
// step plus 2 % and the last is more than margin plus 5 % above the
// first; or when the last is past 1.5 times the first plus 4 margins.
func judge(pts []point, warm time.Time, w time.Duration, step, margin float64) verdict {
	var v verdict
	var sum, n float64
	end := warm.Add(w)
	for _, p := range pts {
		if p.at.Before(warm) {
			continue
		}
		for !p.at.Before(end) {
			if n > 0 {
				v.means = append(v.means, sum/n)
			}
			sum, n, end = 0, 0, end.Add(w)
		}
		sum, n = sum+p.v, n+1
	}
	m := v.means
	if len(m) < 2 {
		return v
	}
	first, last := m[0], m[len(m)-1]
	rising := len(m) >= 3
	for i := 1; i < len(m); i++ {
		if m[i] <= m[i-1]*1.02+step {
			rising = false
		}
	}
	switch {
	case rising && last > first*1.05+margin:
		v.problem = fmt.Sprintf("kept growing after the warm-up: %s", joinMeans(m, "%.0f"))
	case last > 1.5*first+4*margin:
		v.problem = fmt.Sprintf("grew from %.0f to %.0f after the warm-up", first, last)
	}
	return v
}

func joinMeans(m []float64, format string) string {
	parts := make([]string, len(m))
	for i, x := range m {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " → ")
}

// summary is the table the README shows.
func (s *soak) summary(runs, failed int) string {
	var b strings.Builder
	byRoute := map[string][]call{}
	kinds := map[string]int{}
	for _, c := range s.calls {
		byRoute[c.route] = append(byRoute[c.route], c)
		if c.kind != "" {
			kinds[c.kind]++
		}
	}
	routes := make([]string, 0, len(byRoute))
	for r := range byRoute {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	load := s.loadEnd.Sub(s.start)
	fmt.Fprintf(&b, "Soak: %d fake + %d IPMI nodes, %d replicas on PostgreSQL, %s of load, %d requests (%.0f/s)\n\n",
		*fleet, len(s.ipmiIDs), replicas, load.Round(time.Second), len(s.calls), float64(len(s.calls))/load.Seconds())
	fmt.Fprintf(&b, "| route | requests | p50 ms | p99 ms | non-2xx |\n|---|---:|---:|---:|---:|\n")
	for _, r := range routes {
		cs := byRoute[r]
		lat := make([]time.Duration, len(cs))
		bad := 0
		for i, c := range cs {
			lat[i] = c.took
			if c.status < 200 || c.status > 299 {
				bad++
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %d |\n", r, len(cs), ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), bad)
	}
	fmt.Fprintf(&b, "\n| errors by kind | count |\n|---|---:|\n")
	ks := make([]string, 0, len(kinds))
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "| %s | %d |\n", k, kinds[k])
	}
	fmt.Fprintf(&b, "\n| fault and recovery | at |\n|---|---:|\n")
	for _, f := range s.faults {
		at := ""
		if !f.start.IsZero() {
			at = fmt.Sprintf("%.0fs", f.start.Sub(s.start).Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s |\n", f.what, at)
	}
	acked := 0
	for _, r := range s.runs {
		acked += len(r)
	}
	fmt.Fprintf(&b, "\n- Runs: %d acknowledged, %d ended in history (%d failed, each naming its step), %d acknowledged writes checked\n", acked, runs, failed, len(s.writes))
	for m, n := range s.failures {
		fmt.Fprintf(&b, "  - %d × %s\n", n, m)
	}
	for _, f := range s.flat {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
