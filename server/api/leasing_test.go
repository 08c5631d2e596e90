package api_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/leaseevent"
	"github.com/anvilproject/anvil/server"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// leaseClock is the leasing service's clock in a test: moved to a lease's
// start or end instead of waited for.
type leaseClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *leaseClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *leaseClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// esiTime is a time as ESI-Leap's clients send and read it.
func esiTime(t time.Time) string { return leasing.Format(t) }

// leasingServer starts a server whose conductor runs its lease passes only
// when the test calls RunLeases (and once at start), on a clock the test
// sets.
func leasingServer(t *testing.T, setting string, o server.Options) (*servertest.Server, map[string]*servertest.Client, *leaseClock) {
	t.Helper()
	o.Conductor = cond.Config{LeaseCheck: time.Hour}
	srv, cs := startLocal(t, setting, o)
	clk := &leaseClock{now: time.Now().UTC().Truncate(time.Second)}
	srv.Leasing.SetClock(clk.Now)
	return srv, cs, clk
}

// fakeNode enrols a fake-hardware node owned by own and makes it
// available.
func fakeNode(t *testing.T, admin *servertest.Client, name string) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "owner": "own", "resource_class": "baremetal"})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	provision(t, admin, id, map[string]any{"target": "provide"}, 202)
	waitState(t, admin, id, "available")
	return id
}

// leaseWipes are node id's wipe records that name a lessee: those of
// lease ends, not of the cleaning at enrolment.
func leaseWipes(t *testing.T, admin *servertest.Client, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range wipeRecords(t, admin, id) {
		if r["lessee"] != nil {
			out = append(out, r)
		}
	}
	return out
}

// pass runs one lease pass of srv's conductor.
func pass(t *testing.T, srv *servertest.Server) {
	t.Helper()
	if err := srv.Cond.RunLeases(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func leaseRow(t *testing.T, db *ent.Client, id string) *ent.Lease {
	t.Helper()
	l, err := db.Lease.Query().Where(lease.UUID(id)).Only(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// nodeLessee is node id's lessee, "" for none.
func nodeLessee(t *testing.T, admin *servertest.Client, id string) string {
	t.Helper()
	l, _ := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["lessee"].(string)
	return l
}

// leaseEventsOf are the event types of lease or offer id, oldest first.
func leaseEventsOf(t *testing.T, db *ent.Client, id string) []string {
	t.Helper()
	evs, err := db.LeaseEvent.Query().Where(leaseevent.ObjectUUID(id)).Order(ent.Asc(leaseevent.FieldID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventType
	}
	return out
}

// TestLeasingLifecycle is issue 43's journey through ESI-Leap's API: an
// owner's member offers three nodes for a week; two lessee projects send
// 50 claims of overlapping windows of one node at once and exactly one
// wins; the lease starts on time (lessee set), the winner sub-leases
// within it to the other project, and both end on time, each tearing the
// deployed node down with a wipe record naming its lessee, the lessee
// going back to the parent's and then to none, and the offer's window
// free again; a claim outside the offer, an extension beyond it and a
// sub-lease beyond the parent are refused; a cancel frees the window;
// every step is in the events and the node's history; a project sees
// neither the offers addressed to another nor others' leases (404).
func TestLeasingLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, cs, clk := leasingServer(t, setting, server.Options{})
		admin, owner := cs["system-admin"], cs["owner-member"]
		base := clk.Now()
		week := base.Add(7 * 24 * time.Hour)

		// Version discovery, without a token.
		r := srv.Client().Do(t, "GET", "/leasing", nil)
		if r.Status != 300 || !strings.Contains(string(r.Body), `"id":"v1.0"`) || !strings.Contains(string(r.Body), srv.URL+"/leasing/v1") {
			t.Fatalf("GET /leasing: %d %s", r.Status, r.Body)
		}
		mustStatus(t, srv.Client().Do(t, "GET", "/leasing/v1/offers", nil), 401)

		var nodes, offers []string
		for i, name := range []string{"lease-a", "lease-b", "lease-c"} {
			id := fakeNode(t, admin, name)
			nodes = append(nodes, id)
			body := map[string]any{"resource_uuid": name, "start_time": esiTime(base), "end_time": esiTime(week), "properties": map[string]any{"rack": "r1"}}
			if i == 2 {
				body["lessee_id"] = "les"
			}
			r := owner.Do(t, "POST", "/leasing/v1/offers", body)
			mustStatus(t, r, 201)
			o := r.JSON(t)
			if o["project_id"] != "own" || o["status"] != "available" || o["resource_uuid"] != id || o["resource"] != name ||
				o["start_time"] != esiTime(base) || o["end_time"] != esiTime(week) || o["resource_type"] != "ironic_node" {
				t.Fatalf("offer %v", o)
			}
			offers = append(offers, o["uuid"].(string))
		}
		// Overlapping the first offer, the owner cannot offer the node again;
		// bad input is a 400 naming the field; a lessee's member cannot
		// offer a node it does not lease.
		r = owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": nodes[0], "start_time": esiTime(base.Add(time.Hour)), "end_time": esiTime(week.Add(time.Hour))})
		mustStatus(t, r, 409)
		if f := r.JSON(t); f["faultcode"] != "Client" || !strings.Contains(f["faultstring"].(string), offers[0]) {
			t.Errorf("overlapping offer: %s", r.Body)
		}
		for field, body := range map[string]map[string]any{
			"end_time":      {"resource_uuid": nodes[1], "start_time": esiTime(week), "end_time": esiTime(base)},
			"start_time":    {"resource_uuid": nodes[1], "start_time": "next tuesday"},
			"resource_type": {"resource_uuid": nodes[1], "resource_type": "dummy_node"},
			"resource_uuid": {"start_time": esiTime(base)},
			"bogus":         {"resource_uuid": nodes[1], "bogus": 1},
		} {
			r := owner.Do(t, "POST", "/leasing/v1/offers", body)
			if r.Status != 400 || !strings.Contains(string(r.Body), field) {
				t.Errorf("offer with bad %s: %d %s", field, r.Status, r.Body)
			}
		}
		mustStatus(t, cs["lessee-member"].Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": nodes[1]}), 404)

		// The offer addressed to les is hidden from oth; the open ones are
		// not.
		mustStatus(t, cs["other-reader"].Do(t, "GET", "/leasing/v1/offers/"+offers[2], nil), 404)
		mustStatus(t, cs["lessee-reader"].Do(t, "GET", "/leasing/v1/offers/"+offers[2], nil), 200)
		if got := cs["other-reader"].Do(t, "GET", "/leasing/v1/offers", nil).JSON(t)["offers"].([]any); len(got) != 2 {
			t.Errorf("other-reader lists %d offers, want the 2 open ones", len(got))
		}
		if got := admin.Do(t, "GET", "/leasing/v1/offers?resource_uuid="+nodes[0], nil).JSON(t)["offers"].([]any); len(got) != 1 {
			t.Errorf("admin lists %d offers of node a, want 1", len(got))
		}

		// 50 claims of overlapping windows of node a, at once.
		start, end := base.Add(time.Hour), base.Add(25*time.Hour)
		go1 := make(chan struct{})
		var wg sync.WaitGroup
		statuses := make([]int, 50)
		bodies := make([]map[string]any, 50)
		for i := range 50 {
			c, shift := cs["lessee-member"], time.Duration(0)
			if i%2 == 1 {
				c, shift = cs["other-member"], time.Hour
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-go1
				r := c.Do(t, "POST", "/leasing/v1/offers/"+offers[0]+"/claim", map[string]any{"start_time": esiTime(start.Add(shift)), "end_time": esiTime(end.Add(shift))})
				statuses[i] = r.Status
				if r.Status == 201 {
					bodies[i] = r.JSON(t)
				}
			}()
		}
		close(go1)
		wg.Wait()
		var won map[string]any
		for i, st := range statuses {
			switch st {
			case 201:
				if won != nil {
					t.Fatalf("two claims won: %v and %v", won, bodies[i])
				}
				won = bodies[i]
			case 409:
			default:
				t.Errorf("claim %d: status %d", i, st)
			}
		}
		if won == nil {
			t.Fatal("no claim won")
		}
		n, err := db.Lease.Query().Where(lease.ResourceUUID(nodes[0])).Count(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("%d leases of node a (%v), want 1", n, err)
		}
		parent := won["uuid"].(string)
		winner, loser := won["project_id"].(string), "oth"
		wm, lm := cs["lessee-member"], cs["other-member"]
		if winner == "oth" {
			loser, wm, lm = "les", cs["other-member"], cs["lessee-member"]
		}
		pstart, _ := leasing.ParseTime("start_time", won["start_time"].(string))
		pend, _ := leasing.ParseTime("end_time", won["end_time"].(string))
		if won["status"] != "created" || won["owner_id"] != "own" || won["offer_uuid"] != offers[0] || won["resource_uuid"] != nodes[0] {
			t.Fatalf("lease %v", won)
		}
		// The loser's project does not see the winner's lease.
		mustStatus(t, lm.Do(t, "GET", "/leasing/v1/leases/"+parent, nil), 404)
		mustStatus(t, cs["owner-reader"].Do(t, "GET", "/leasing/v1/leases/"+parent, nil), 200)
		// Outside the offer's window a claim is refused, with the window.
		r = lm.Do(t, "POST", "/leasing/v1/offers/"+offers[1]+"/claim", map[string]any{"start_time": esiTime(week.Add(-time.Hour)), "end_time": esiTime(week.Add(time.Hour))})
		if r.Status != 409 || !strings.Contains(string(r.Body), esiTime(week)) {
			t.Errorf("claim beyond the offer: %d %s", r.Status, r.Body)
		}

		// The claimed window is no longer available in the offer; the
		// other offers' still is.
		q := "/leasing/v1/offers?available_start_time=" + esiTime(pstart) + "&available_end_time=" + esiTime(pend)
		var avail []string
		for _, o := range owner.Do(t, "GET", q, nil).JSON(t)["offers"].([]any) {
			avail = append(avail, o.(map[string]any)["uuid"].(string))
		}
		if strings.Join(avail, ",") != offers[1]+","+offers[2] && strings.Join(avail, ",") != offers[2]+","+offers[1] {
			t.Errorf("offers available for the claimed window: %v, want b's and c's", avail)
		}
		if o := owner.Do(t, "GET", "/leasing/v1/offers/"+offers[0], nil).JSON(t); len(o["availabilities"].([]any)) != 2 {
			t.Errorf("availabilities around the claim: %v", o["availabilities"])
		}
		// Not yet: the pass leaves the lease alone.
		pass(t, srv)
		if l := leaseRow(t, db.Client, parent); l.Status != "created" || nodeLessee(t, admin, nodes[0]) != "" {
			t.Fatalf("before its start: %s, lessee %v", l.Status, nodeLessee(t, admin, nodes[0]))
		}
		// On time: the lessee is set.
		clk.Set(pstart)
		pass(t, srv)
		if l := leaseRow(t, db.Client, parent); l.Status != "active" || l.FulfillTime == nil || !l.FulfillTime.Equal(pstart) {
			t.Fatalf("at its start: %s, fulfilled %v", l.Status, l.FulfillTime)
		}
		if got := nodeLessee(t, admin, nodes[0]); got != winner {
			t.Fatalf("lessee %v, want %s", got, winner)
		}
		// The lessee reads the node's history, the lease's start in it.
		if h := eventsOf(t, wm, nodes[0]); !strings.Contains(h, "lease: Lease "+parent+" started") || !strings.Contains(h, "claimed by "+winner) {
			t.Errorf("the lessee's history of the node lacks its lease:\n%s", h)
		}
		// While the lease runs, only system scope changes the lessee by
		// hand, and the history says so.
		patch := []map[string]any{{"op": "replace", "path": "/lessee", "value": "someone"}}
		mustStatus(t, owner.Do(t, "PATCH", "/v1/nodes/"+nodes[0], patch), 409)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+nodes[0], patch), 200)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+nodes[0], []map[string]any{{"op": "replace", "path": "/lessee", "value": winner}}), 200)
		if h := eventsOf(t, owner, nodes[0]); !strings.Contains(h, "Lessee changed by system scope during lease "+parent) {
			t.Errorf("history lacks the hand change:\n%s", h)
		}

		// The winner sub-leases within its lease, not beyond it.
		sstart, send := pstart.Add(time.Hour), pstart.Add(3*time.Hour)
		mustStatus(t, wm.Do(t, "POST", "/leasing/v1/leases", map[string]any{"resource_uuid": nodes[0], "project_id": loser,
			"start_time": esiTime(sstart), "end_time": esiTime(pend.Add(time.Hour))}), 403)
		r = wm.Do(t, "POST", "/leasing/v1/leases", map[string]any{"resource_uuid": nodes[0], "project_id": loser, "name": "sub",
			"start_time": esiTime(sstart), "end_time": esiTime(send)})
		mustStatus(t, r, 201)
		sub := r.JSON(t)
		if sub["parent_lease_uuid"] != parent || sub["owner_id"] != winner || sub["project_id"] != loser {
			t.Fatalf("sub-lease %v", sub)
		}
		subID := sub["uuid"].(string)
		// The winner offers a later part of its lease too (a sub-offer);
		// it may not then shorten its lease below either.
		r = wm.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": nodes[0], "start_time": esiTime(send), "end_time": esiTime(send.Add(time.Hour))})
		mustStatus(t, r, 201)
		subOffer := r.JSON(t)
		if subOffer["parent_lease_uuid"] != parent || subOffer["project_id"] != winner {
			t.Fatalf("sub-offer %v", subOffer)
		}
		for _, to := range []time.Time{sstart.Add(time.Hour), send.Add(30 * time.Minute)} {
			r = wm.Do(t, "PATCH", "/leasing/v1/leases/"+parent, map[string]any{"end_time": esiTime(to)})
			if r.Status != 409 || !strings.Contains(string(r.Body), "its sub-") {
				t.Errorf("shortening the parent to %s: %d %s", esiTime(to), r.Status, r.Body)
			}
		}
		clk.Set(sstart)
		pass(t, srv)
		if got := nodeLessee(t, admin, nodes[0]); got != loser {
			t.Fatalf("sub-lease started: lessee %v, want %s", got, loser)
		}
		// The sub-lessee deploys; at the sub-lease's end the node is torn
		// down and wiped, and goes back to the winner.
		provision(t, admin, nodes[0], map[string]any{"target": "active"}, 202)
		waitState(t, admin, nodes[0], "active")
		clk.Set(send)
		pass(t, srv)
		waitState(t, admin, nodes[0], "available")
		if l := leaseRow(t, db.Client, subID); l.Status != "expired" || l.ExpireTime == nil {
			t.Fatalf("sub-lease after its end: %s", l.Status)
		}
		if got := nodeLessee(t, admin, nodes[0]); got != winner {
			t.Fatalf("after the sub-lease: lessee %v, want %s", got, winner)
		}
		recs := leaseWipes(t, admin, nodes[0])
		if len(recs) != 1 || recs[0]["lessee"] != loser || recs[0]["owner"] != "own" {
			t.Fatalf("wipe records after the sub-lease: %v", recs)
		}
		// The winner deploys too; at its end the same.
		provision(t, admin, nodes[0], map[string]any{"target": "active"}, 202)
		waitState(t, admin, nodes[0], "active")
		clk.Set(pend)
		pass(t, srv)
		waitState(t, admin, nodes[0], "available")
		if l := leaseRow(t, db.Client, parent); l.Status != "expired" {
			t.Fatalf("lease after its end: %s", l.Status)
		}
		if got := nodeLessee(t, admin, nodes[0]); got != "" {
			t.Fatalf("after the lease: lessee %v, want none", got)
		}
		if o := owner.Do(t, "GET", "/leasing/v1/offers/"+subOffer["uuid"].(string), nil).JSON(t); o["status"] != "expired" {
			t.Errorf("the sub-offer after its parent ended: %v", o["status"])
		}
		recs = leaseWipes(t, admin, nodes[0])
		if len(recs) != 2 || (recs[0]["lessee"] != winner && recs[1]["lessee"] != winner) {
			t.Fatalf("wipe records after the lease: %v", recs)
		}
		// The offer's window from now to its end is free again.
		o := owner.Do(t, "GET", "/leasing/v1/offers/"+offers[0], nil).JSON(t)
		av, _ := o["availabilities"].([]any)
		if len(av) != 1 || av[0].([]any)[0] != esiTime(pend) || av[0].([]any)[1] != esiTime(week) {
			t.Errorf("availabilities after the lease: %v", o["availabilities"])
		}
		// Every step is an event its lessee reads, and in the history.
		for id, want := range map[string][]string{parent: {"esi_leap.lease.create.end", "esi_leap.lease.fulfill.end", "esi_leap.lease.delete.end"},
			subID: {"esi_leap.lease.create.end", "esi_leap.lease.fulfill.end", "esi_leap.lease.delete.end"}} {
			got := leaseEventsOf(t, db.Client, id)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("events of %s: %v, want %v", id, got, want)
			}
		}
		evs := wm.Do(t, "GET", "/leasing/v1/events?resource_uuid="+nodes[0], nil).JSON(t)["events"].([]any)
		if len(evs) < 6 {
			t.Errorf("the winner reads %d events of node a, want its lease's and its sub-lease's 6", len(evs))
		}
		for _, e := range evs {
			m := e.(map[string]any)
			if m["lessee_id"] != winner && m["owner_id"] != winner {
				t.Errorf("the winner reads an event not naming it: %v", m)
			}
		}
		h := eventsOf(t, owner, nodes[0])
		for _, want := range []string{"Offered by own", "claimed by " + winner, "Lease " + parent + " started: lessee (none) → " + winner,
			"Lease sub (" + subID + ") started: lessee " + winner + " → " + loser, "undeploying; automated cleaning wipes it; lessee " + loser + " → " + winner,
			"undeploying; automated cleaning wipes it; lessee " + winner + " → (none)"} {
			if !strings.Contains(h, want) {
				t.Errorf("history lacks %q:\n%s", want, h)
			}
		}

		// Node b: an extension beyond the offer is refused, one within it
		// granted; a cancel frees the window for the next claim.
		r = lm.Do(t, "POST", "/leasing/v1/offers/"+offers[1]+"/claim", map[string]any{"start_time": esiTime(pend.Add(time.Hour)), "end_time": esiTime(pend.Add(2 * time.Hour))})
		mustStatus(t, r, 201)
		b := r.JSON(t)["uuid"].(string)
		r = lm.Do(t, "PATCH", "/leasing/v1/leases/"+b, map[string]any{"end_time": esiTime(week.Add(time.Hour))})
		if r.Status != 409 || !strings.Contains(string(r.Body), "ends at "+esiTime(week)) {
			t.Errorf("extension beyond the offer: %d %s", r.Status, r.Body)
		}
		mustStatus(t, lm.Do(t, "PATCH", "/leasing/v1/leases/"+b, map[string]any{"purpose": "x"}), 400)
		r = lm.Do(t, "PATCH", "/leasing/v1/leases/"+b, map[string]any{"end_time": esiTime(pend.Add(3 * time.Hour))})
		mustStatus(t, r, 200)
		if r.JSON(t)["end_time"] != esiTime(pend.Add(3*time.Hour)) {
			t.Errorf("extended lease %s", r.Body)
		}
		mustStatus(t, wm.Do(t, "POST", "/leasing/v1/offers/"+offers[1]+"/claim", map[string]any{"start_time": esiTime(pend.Add(2 * time.Hour)), "end_time": esiTime(pend.Add(4 * time.Hour))}), 409)
		mustStatus(t, wm.Do(t, "DELETE", "/leasing/v1/leases/"+b, nil), 404)
		mustStatus(t, lm.Do(t, "DELETE", "/leasing/v1/leases/"+b, nil), 200)
		if l := leaseRow(t, db.Client, b); l.Status != "deleted" {
			t.Errorf("cancelled lease: %s", l.Status)
		}
		mustStatus(t, wm.Do(t, "POST", "/leasing/v1/offers/"+offers[1]+"/claim", map[string]any{"start_time": esiTime(pend.Add(2 * time.Hour)), "end_time": esiTime(pend.Add(4 * time.Hour))}), 201)
		if got := lm.Do(t, "GET", "/leasing/v1/leases?status=any", nil).JSON(t)["leases"].([]any); len(got) != 2 {
			t.Errorf("%s lists %d leases, want its sub-lease and its cancelled lease", loser, len(got))
		}
		mustStatus(t, lm.Do(t, "GET", "/leasing/v1/leases?view=all", nil), 403)
		if got := admin.Do(t, "GET", "/leasing/v1/leases?view=all&status=any", nil).JSON(t)["leases"].([]any); len(got) != 4 {
			t.Errorf("view=all lists %d leases, want 4", len(got))
		}
		// Every mutation is audited.
		audits, err := db.AuditEvent.Query().Where(auditevent.TargetID(parent)).All(context.Background())
		if err != nil || len(audits) < 3 {
			t.Errorf("%d audit rows of the lease (%v), want its claim, start and end", len(audits), err)
		}
	})
}

// TestLeasingQuota: with --lease-max-nodes 1 and --lease-max-node-hours
// 48, a project's second concurrent node and its hours beyond 48 in a
// month are refused with the numbers; a system caller claims for a
// project only by naming it.
func TestLeasingQuota(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs, clk := leasingServer(t, setting, server.Options{LeaseQuota: leasing.Quota{MaxNodes: 1, MaxNodeHours: 48}})
		admin, owner, les := cs["system-admin"], cs["owner-member"], cs["lessee-member"]
		// The first of a month, so a day's lease stays in it.
		now := clk.Now()
		base := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
		var offers []string
		for _, name := range []string{"quota-a", "quota-b"} {
			fakeNode(t, admin, name)
			r := owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": name, "start_time": esiTime(base), "end_time": esiTime(base.AddDate(0, 0, 20))})
			mustStatus(t, r, 201)
			offers = append(offers, r.JSON(t)["uuid"].(string))
		}
		claim := func(c *servertest.Client, offer string, from, to time.Duration) *servertest.Response {
			return c.Do(t, "POST", "/leasing/v1/offers/"+offer+"/claim", map[string]any{"start_time": esiTime(base.Add(from)), "end_time": esiTime(base.Add(to))})
		}
		mustStatus(t, claim(les, offers[0], 0, 24*time.Hour), 201)
		r := claim(les, offers[1], 12*time.Hour, 36*time.Hour)
		if r.Status != 403 || !strings.Contains(string(r.Body), "would hold 2 leased nodes") || !strings.Contains(string(r.Body), "quota is 1") {
			t.Errorf("second node: %d %s", r.Status, r.Body)
		}
		r = claim(les, offers[1], 48*time.Hour, 80*time.Hour)
		if r.Status != 403 || !strings.Contains(string(r.Body), "24.0 node-hours") || !strings.Contains(string(r.Body), "32.0 more") || !strings.Contains(string(r.Body), "48 node-hours a month") {
			t.Errorf("hours beyond the month's: %d %s", r.Status, r.Body)
		}
		mustStatus(t, claim(les, offers[1], 48*time.Hour, 72*time.Hour), 201)
		// Another project has its own quota.
		mustStatus(t, claim(cs["other-member"], offers[1], 12*time.Hour, 36*time.Hour), 201)
		r = claim(admin, offers[0], 100*time.Hour, 101*time.Hour)
		if r.Status != 400 || !strings.Contains(string(r.Body), "project_id") {
			t.Errorf("system claim without project_id: %d %s", r.Status, r.Body)
		}
	})
}

// TestLeaseMissedWhileDown: a lease whose end passed, and one whose start
// passed, while no conductor ran (rows as a stopped server leaves them)
// end and start when the server starts, once: passes run after it, four
// at a time, change nothing more. The allocation the leaving project held
// on its idle node is released with the lease.
func TestLeaseMissedWhileDown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Second)
		mk := func(name, lessee string) *ent.Node {
			n, err := db.Node.Create().SetUUID(uuid.NewString()).SetName(name).SetDriver("fake-hardware").SetProvisionState("available").
				SetOwner("own").SetLessee(lessee).Save(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		ended, due := mk("missed-end", "les"), mk("missed-start", "")
		past := db.Lease.Create().SetUUID(uuid.NewString()).SetProjectID("les").SetOwnerID("own").SetResourceUUID(ended.UUID).
			SetStartTime(now.Add(-2 * time.Hour)).SetEndTime(now.Add(-time.Hour)).SetStatus("active").SetFulfillTime(now.Add(-2 * time.Hour)).SaveX(ctx)
		// The lessee holds an allocation on the node that ended: it goes
		// with the lease.
		alloc := db.Allocation.Create().SetUUID(uuid.NewString()).SetResourceClass("baremetal").SetOwner("les").SetState("active").
			SetNodeID(ended.ID).SaveX(ctx)
		db.Node.UpdateOne(ended).SetInstanceUUID(alloc.UUID).ExecX(ctx)
		late := db.Lease.Create().SetUUID(uuid.NewString()).SetProjectID("oth").SetOwnerID("own").SetResourceUUID(due.UUID).
			SetStartTime(now.Add(-time.Hour)).SetEndTime(now.Add(time.Hour)).SaveX(ctx)

		srv, cs := startLocal(t, setting, server.Options{Conductor: cond.Config{LeaseCheck: time.Hour}})
		leaseWait(t, "the missed end and start", func() bool {
			return leaseRow(t, db.Client, past.UUID).Status == "expired" && leaseRow(t, db.Client, late.UUID).Status == "active"
		})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := srv.Cond.RunLeases(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		admin := cs["system-admin"]
		if got := nodeLessee(t, admin, ended.UUID); got != "" {
			t.Errorf("ended lease's node: lessee %v", got)
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+ended.UUID, nil).JSON(t); n["instance_uuid"] != nil || allocationRow(t, db.Client, alloc.UUID) != nil {
			t.Errorf("the ended lessee's allocation stayed: instance_uuid %v", n["instance_uuid"])
		}
		if got := nodeLessee(t, admin, due.UUID); got != "oth" {
			t.Errorf("started lease's node: lessee %v", got)
		}
		if got := leaseEventsOf(t, db.Client, past.UUID); strings.Join(got, ",") != "esi_leap.lease.delete.end" {
			t.Errorf("events of the ended lease: %v", got)
		}
		if got := leaseEventsOf(t, db.Client, late.UUID); strings.Join(got, ",") != "esi_leap.lease.fulfill.end" {
			t.Errorf("events of the started lease: %v", got)
		}
		for _, id := range []string{past.UUID, late.UUID} {
			audits, err := db.AuditEvent.Query().Where(auditevent.TargetID(id), auditevent.Rule(leasing.RuleLeaseUpdate)).Count(ctx)
			if err != nil || audits != 1 {
				t.Errorf("lease %s: %d audit rows (%v), want 1", id, audits, err)
			}
		}
		if h := eventsOf(t, admin, ended.UUID); strings.Count(h, "lease: Lease "+past.UUID+" of les ended at "+esiTime(now.Add(-time.Hour))+": the node holds no instance; allocation "+alloc.UUID+" released; lessee les → (none)") != 1 {
			t.Errorf("history of the ended lease's node:\n%s", h)
		}
	})
}

// TestLeasingPersonas: who gets what from ESI-Leap's API, as a table of
// personas and expected statuses ("-" where the request would change
// what the next rows read): 401 without a token, 404 for an offer
// addressed to another project or another project's lease, 403 for what
// the caller sees but may not do.
func TestLeasingPersonas(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, cs, clk := leasingServer(t, setting, server.Options{})
		admin, owner := cs["system-admin"], cs["owner-member"]
		base := clk.Now()
		window := map[string]any{"start_time": esiTime(base.Add(time.Hour)), "end_time": esiTime(base.Add(48 * time.Hour))}
		fakeNode(t, admin, "persona-a")
		r := owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "persona-a", "end_time": esiTime(base.Add(24 * time.Hour))})
		mustStatus(t, r, 201)
		open := r.JSON(t)["uuid"].(string)
		r = owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "persona-a", "lessee_id": "les",
			"start_time": esiTime(base.Add(24 * time.Hour)), "end_time": esiTime(base.Add(72 * time.Hour))})
		mustStatus(t, r, 201)
		addressed := r.JSON(t)["uuid"].(string)
		r = cs["lessee-member"].Do(t, "POST", "/leasing/v1/offers/"+addressed+"/claim", map[string]any{"start_time": esiTime(base.Add(30 * time.Hour)), "end_time": esiTime(base.Add(40 * time.Hour))})
		mustStatus(t, r, 201)
		leased := r.JSON(t)["uuid"].(string)

		who := []string{"anonymous", "system-admin", "system-reader", "owner-member", "owner-reader", "lessee-member", "lessee-reader", "other-member", "other-reader"}
		rows := []struct {
			method, path string
			body         any
			want         string
		}{
			{"GET", "/leasing/v1/offers/" + open, nil, "401 200 200 200 200 200 200 200 200"},
			{"GET", "/leasing/v1/offers/" + addressed, nil, "401 200 200 200 200 200 200 404 404"},
			{"GET", "/leasing/v1/leases/" + leased, nil, "401 200 200 200 200 200 200 404 404"},
			{"GET", "/leasing/v1/leases?view=all", nil, "401 200 200 403 403 403 403 403 403"},
			{"GET", "/leasing/v1/leases?project_id=les", nil, "401 200 200 403 403 200 200 403 403"},
			{"GET", "/leasing/v1/nodes", nil, "401 200 200 200 200 200 200 200 200"},
			{"GET", "/leasing/v1/events", nil, "401 200 200 200 200 200 200 200 200"},
			{"POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "persona-a", "start_time": esiTime(base.Add(100 * time.Hour))}, "401 - 403 - 403 404 404 404 404"},
			{"DELETE", "/leasing/v1/offers/" + open, nil, "401 - 403 - 403 403 403 403 403"},
			{"POST", "/leasing/v1/offers/" + addressed + "/claim", window, "401 - 403 - 403 - 403 404 404"},
			{"PATCH", "/leasing/v1/leases/" + leased, map[string]any{"end_time": esiTime(base.Add(41 * time.Hour))}, "401 - 403 - 403 - 403 404 404"},
			{"DELETE", "/leasing/v1/leases/" + leased, nil, "401 - 403 - 403 - 403 404 404"},
		}
		// ESI-Leap's node list: the current offer, the future ones and the
		// leases not yet started.
		ns := owner.Do(t, "GET", "/leasing/v1/nodes", nil).JSON(t)["nodes"].([]any)
		if len(ns) != 1 {
			t.Fatalf("owner lists %d leasing nodes, want 1", len(ns))
		}
		if n := ns[0].(map[string]any); n["name"] != "persona-a" || n["offer_uuid"] != open || n["maintenance"] != "False" ||
			fmt.Sprint(n["future_offers"]) != "["+addressed+"]" || fmt.Sprint(n["future_leases"]) != "["+leased+"]" || n["lease_uuid"] != nil {
			t.Errorf("leasing node %v", n)
		}
		if got := cs["system-reader"].Do(t, "GET", "/leasing/v1/leases", nil).JSON(t)["leases"].([]any); len(got) != 1 {
			t.Errorf("a system reader lists %d leases, want every one (1)", len(got))
		}
		if got := cs["other-reader"].Do(t, "GET", "/leasing/v1/leases", nil).JSON(t)["leases"].([]any); len(got) != 0 {
			t.Errorf("another project lists %d leases, want none", len(got))
		}
		before, err := db.Lease.Query().Count(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			want := strings.Fields(row.want)
			for i, p := range who {
				if want[i] == "-" {
					continue
				}
				r := cs[p].Do(t, row.method, row.path, row.body)
				if got := r.Status; want[i] != strconv.Itoa(got) {
					t.Errorf("%s %s as %s: %d, want %s: %s", row.method, row.path, p, got, want[i], r.Body)
				}
			}
		}
		if after, err := db.Lease.Query().Count(context.Background()); err != nil || after != before {
			t.Errorf("refused requests changed the leases: %d before, %d after (%v)", before, after, err)
		}
		if l := leaseRow(t, db.Client, leased); l.Status != "created" || !l.EndTime.Equal(base.Add(40*time.Hour)) {
			t.Errorf("refused requests changed the lease: %s until %v", l.Status, l.EndTime)
		}
	})
}

// TestLeasesOnceAcrossConductors: two conductors on one database run
// their lease passes at the same moment, twice each, over ten leases due
// to end and ten due to start: every lease ends or starts exactly once
// (one event, one audit row), and the ring gives each conductor a share.
func TestLeasesOnceAcrossConductors(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	opts := func(name string) server.Options {
		return server.Options{Database: setting, Conductor: cond.Config{Name: name, LeaseCheck: time.Hour}}
	}
	srvA, _ := startLocal(t, setting, opts("leasing-a"))
	srvB := servertest.Start(t, opts("leasing-b"))
	waitRegistered(t, srvA, "leasing-a", "leasing-b")
	ctx := context.Background()
	db := srvA.DB.Client
	now := time.Now().UTC().Truncate(time.Second)
	var ending, starting []string
	for i := range 20 {
		lessee, status, start, end := "les", "active", now.Add(-2*time.Hour), now.Add(-time.Hour)
		if i%2 == 1 {
			lessee, status, start, end = "", "created", now.Add(-time.Hour), now.Add(time.Hour)
		}
		n := db.Node.Create().SetUUID(uuid.NewString()).SetName(fmt.Sprintf("ring-lease-%02d", i)).SetDriver("fake-hardware").
			SetProvisionState("available").SetOwner("own").SetLessee(lessee).SaveX(ctx)
		l := db.Lease.Create().SetUUID(uuid.NewString()).SetProjectID("les").SetOwnerID("own").SetResourceUUID(n.UUID).
			SetStartTime(start).SetEndTime(end).SetStatus(status).SaveX(ctx)
		if i%2 == 1 {
			starting = append(starting, l.UUID)
		} else {
			ending = append(ending, l.UUID)
		}
	}
	go1 := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []*servertest.Server{srvA, srvB, srvA, srvB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-go1
			if err := s.Cond.RunLeases(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	close(go1)
	wg.Wait()
	by := map[string]int{}
	check := func(ids []string, status, event string) {
		for _, id := range ids {
			if l := leaseRow(t, db, id); l.Status != status {
				t.Errorf("lease %s: %s, want %s", id, l.Status, status)
			}
			if got := leaseEventsOf(t, db, id); strings.Join(got, ",") != event {
				t.Errorf("lease %s: events %v, want one %s", id, got, event)
			}
			audits, err := db.AuditEvent.Query().Where(auditevent.TargetID(id), auditevent.Rule(leasing.RuleLeaseUpdate)).All(ctx)
			if err != nil || len(audits) != 1 {
				t.Errorf("lease %s: %d audit rows (%v), want 1", id, len(audits), err)
				continue
			}
			by[audits[0].User]++
		}
	}
	check(ending, "expired", "esi_leap.lease.delete.end")
	check(starting, "active", "esi_leap.lease.fulfill.end")
	if by["conductor leasing-a"] == 0 || by["conductor leasing-b"] == 0 {
		t.Errorf("lease passes by conductor %v: the ring should give each a share", by)
	}
}

// TestLeasingBadInput: bad input to ESI-Leap's API is a 400 whose
// message names the field, in wsme's shape, and writes nothing.
func TestLeasingBadInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, cs, clk := leasingServer(t, setting, server.Options{})
		admin, owner, les := cs["system-admin"], cs["owner-member"], cs["lessee-member"]
		base := clk.Now()
		fakeNode(t, admin, "bad-a")
		r := owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "bad-a", "end_time": esiTime(base.Add(48 * time.Hour))})
		mustStatus(t, r, 201)
		offer := r.JSON(t)["uuid"].(string)
		r = les.Do(t, "POST", "/leasing/v1/offers/"+offer+"/claim", map[string]any{"start_time": esiTime(base.Add(time.Hour)), "end_time": esiTime(base.Add(2 * time.Hour))})
		mustStatus(t, r, 201)
		lease := r.JSON(t)["uuid"].(string)
		long := strings.Repeat("n", 36)
		rows := []struct {
			c            *servertest.Client
			method, path string
			body         any
			field        string
		}{
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"start_time": "soon"}, "start_time"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"end_time": 5}, "end_time"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"start_time": esiTime(base.Add(5 * time.Hour)), "end_time": esiTime(base.Add(4 * time.Hour))}, "end_time"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"start_time": esiTime(base.Add(-3 * time.Hour)), "end_time": esiTime(base.Add(-2 * time.Hour))}, "end_time"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"name": long}, "name"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"properties": "x"}, "properties"},
			{les, "POST", "/leasing/v1/offers/" + offer + "/claim", map[string]any{"uuid": "x"}, "uuid"},
			{owner, "POST", "/leasing/v1/leases", map[string]any{"resource_uuid": "bad-a", "start_time": esiTime(base.Add(3 * time.Hour))}, "project_id"},
			{owner, "POST", "/leasing/v1/leases", map[string]any{"resource_uuid": "bad-a", "project_id": " les"}, "project_id"},
			{owner, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "bad-a", "lessee_id": "a\tb"}, "lessee_id"},
			{owner, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": "bad-a", "name": long}, "name"},
			{les, "PATCH", "/leasing/v1/leases/" + lease, map[string]any{"end_time": "later"}, "end_time"},
			{les, "PATCH", "/leasing/v1/leases/" + lease, map[string]any{"end_time": esiTime(base)}, "end_time"},
			{les, "PATCH", "/leasing/v1/leases/" + lease, map[string]any{}, "end_time"},
			{les, "PATCH", "/leasing/v1/leases/" + lease, "[]", "body"},
			{les, "GET", "/leasing/v1/leases?view=mine", nil, "view"},
			{les, "GET", "/leasing/v1/leases?start_time=" + esiTime(base), nil, "start_time"},
			{les, "GET", "/leasing/v1/leases?resource_type=dummy_node", nil, "resource_type"},
			{les, "GET", "/leasing/v1/leases?sort=x", nil, "sort"},
			{les, "GET", "/leasing/v1/offers?available_start_time=" + esiTime(base.Add(time.Hour)) + "&available_end_time=" + esiTime(base), nil, "available_end_time"},
			{les, "GET", "/leasing/v1/events?last_event_id=x", nil, "last_event_id"},
			{les, "GET", "/leasing/v1/events?last_event_time=x", nil, "last_event_time"},
		}
		count := func() int {
			n, err := db.Lease.Query().Count(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			o, err := db.Offer.Query().Count(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n*1000 + o
		}
		before := count()
		for _, row := range rows {
			r := row.c.Do(t, row.method, row.path, row.body)
			if r.Status != 400 {
				t.Errorf("%s %s %v: %d, want 400: %s", row.method, row.path, row.body, r.Status, r.Body)
				continue
			}
			f := r.JSON(t)
			if f["faultcode"] != "Client" || !strings.Contains(f["faultstring"].(string), row.field) {
				t.Errorf("%s %s %v: %s does not name %s", row.method, row.path, row.body, r.Body, row.field)
			}
		}
		if after := count(); after != before {
			t.Errorf("bad input wrote rows: %d before, %d after", before, after)
		}
		if l := leaseRow(t, db.Client, lease); !l.EndTime.Equal(base.Add(2 * time.Hour)) {
			t.Errorf("bad patches moved the lease's end to %v", l.EndTime)
		}
	})
}

// TestLeasingWithdraw: an owner withdrawing an offer cancels its leases:
// one not yet started is deleted at once, an active one waits for the
// conductor, which gives the node back; an offer whose node was deleted
// can still be withdrawn.
func TestLeasingWithdraw(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, cs, clk := leasingServer(t, setting, server.Options{})
		admin, owner := cs["system-admin"], cs["owner-member"]
		base := clk.Now()
		node := fakeNode(t, admin, "withdraw-a")
		gone := fakeNode(t, admin, "withdraw-b")
		offer := func(name string) string {
			r := owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": name, "end_time": esiTime(base.Add(48 * time.Hour))})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		o, og := offer("withdraw-a"), offer("withdraw-b")
		claim := func(c *servertest.Client, from, to time.Duration) string {
			r := c.Do(t, "POST", "/leasing/v1/offers/"+o+"/claim", map[string]any{"start_time": esiTime(base.Add(from)), "end_time": esiTime(base.Add(to))})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		running, later := claim(cs["lessee-member"], time.Hour, 2*time.Hour), claim(cs["other-member"], 3*time.Hour, 4*time.Hour)
		clk.Set(base.Add(time.Hour))
		pass(t, srv)
		if got := nodeLessee(t, admin, node); got != "les" {
			t.Fatalf("lessee %q after the start", got)
		}
		mustStatus(t, cs["lessee-member"].Do(t, "DELETE", "/leasing/v1/offers/"+o, nil), 403)
		mustStatus(t, owner.Do(t, "DELETE", "/leasing/v1/offers/"+o, nil), 200)
		// What can no longer be deleted is not found, as in ESI-Leap
		// (esisdk's cleanups delete with ignore_missing, which passes over
		// a 404 only): the withdrawn offer, a lease waiting for its cancel
		// and a cancelled one.
		mustStatus(t, owner.Do(t, "DELETE", "/leasing/v1/offers/"+o, nil), 404)
		if a, b := leaseRow(t, db.Client, running).Status, leaseRow(t, db.Client, later).Status; a != "wait cancel" || b != "deleted" {
			t.Fatalf("after the withdrawal: running %s, later %s", a, b)
		}
		mustStatus(t, owner.Do(t, "DELETE", "/leasing/v1/leases/"+running, nil), 404)
		mustStatus(t, cs["other-member"].Do(t, "DELETE", "/leasing/v1/leases/"+later, nil), 404)
		pass(t, srv)
		if l := leaseRow(t, db.Client, running); l.Status != "deleted" || l.ExpireTime == nil {
			t.Fatalf("the cancelled lease after a pass: %s", l.Status)
		}
		if got := nodeLessee(t, admin, node); got != "" {
			t.Errorf("lessee %q after the cancel", got)
		}
		if got := leaseEventsOf(t, db.Client, running); strings.Join(got, ",") != "esi_leap.lease.create.end,esi_leap.lease.fulfill.end,esi_leap.lease.cancel.end,esi_leap.lease.delete.end" {
			t.Errorf("events of the cancelled lease: %v", got)
		}
		if got := leaseEventsOf(t, db.Client, o); strings.Join(got, ",") != "esi_leap.offer.create.end,esi_leap.offer.delete.end" {
			t.Errorf("events of the offer: %v", got)
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+gone, nil), 204)
		mustStatus(t, owner.Do(t, "DELETE", "/leasing/v1/offers/"+og, nil), 200)
	})
}
