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

// checkFlat compares each replica process's RSS and goroutines over the
// first window of the load (after 10 s of warm-up) with the last.
func (s *soak) checkFlat(fail func(string, ...any)) {
	first0, first1 := s.start.Add(10*time.Second), s.start.Add(10*time.Second+s.window)
	last0 := s.loadEnd.Add(-s.window)
	type acc struct{ rss, g, n float64 }
	for i, p := range s.procs {
		var a, b acc
		name := p.name
		for _, m := range s.samples {
			if m.replica == i && m.pid != p.cmd.Process.Pid {
				name = p.name + " (since its restart)"
			}
			if m.replica != i || m.pid != p.cmd.Process.Pid {
				continue
			}
			switch {
			case !m.at.Before(first0) && m.at.Before(first1):
				a.rss, a.g, a.n = a.rss+m.rss, a.g+m.goroutines, a.n+1
			case !m.at.Before(last0):
				b.rss, b.g, b.n = b.rss+m.rss, b.g+m.goroutines, b.n+1
			}
		}
		if a.n == 0 || b.n == 0 {
			continue // restarted mid-load: no first window to compare
		}
		rss0, rss1, g0, g1 := a.rss/a.n/(1<<20), b.rss/b.n/(1<<20), a.g/a.n, b.g/b.n
		s.flat = append(s.flat, fmt.Sprintf("%s: RSS %.0f → %.0f MiB, goroutines %.0f → %.0f", name, rss0, rss1, g0, g1))
		if rss1 > 1.5*rss0+32 {
			fail("%s: RSS grew from %.0f MiB to %.0f MiB between the first and last window", p.name, rss0, rss1)
		}
		if g1 > 1.5*g0+50 {
			fail("%s: goroutines grew from %.0f to %.0f between the first and last window", p.name, g0, g1)
		}
	}
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
