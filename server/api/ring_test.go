package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/conductor"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// syncAll runs one power-sync cycle on every conductor at once, as their
// loops would, and returns how many nodes each read.
func syncAll(t *testing.T, cs ...*servertest.Server) map[string]int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	read := map[string]int{}
	for _, s := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.Cond.SyncPower(context.Background())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			read[s.Cond.Name()] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return read
}

// waitRegistered waits for conductors to register: a server's conductor
// starts in Serve, after servertest.Start has returned.
func waitRegistered(t *testing.T, s *servertest.Server, names ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := s.DB.Conductor.Query().Where(conductor.HostnameIn(names...), conductor.Online(true)).Count(context.Background())
		if err == nil && n == len(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("conductors %v not registered (%d online, %v)", names, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeConductors is each node's conductor as the API shows it (1.49).
func nodeConductors(t *testing.T, c *servertest.Client, query string) map[string]string {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes?limit=1000&fields=uuid,conductor,conductor_group"+query, nil)
	mustStatus(t, r, 200)
	out := map[string]string{}
	for _, x := range r.JSON(t)["nodes"].([]any) {
		n := x.(map[string]any)
		h, _ := n["conductor"].(string)
		out[n["uuid"].(string)] = h
	}
	return out
}

// TestRingSpreadsPowerSync runs three replicas of the default group and one
// of group rack2 on one PostgreSQL database: one power-sync cycle reads
// every node exactly once, spread over the three, rack2's nodes only on its
// own conductor; the API shows each node's conductor as the one that read
// it; a fourth replica takes about a quarter, all to itself; and a crashed
// replica's nodes go to the others once its heartbeat times out, not before.
func TestRingSpreadsPowerSync(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	const timeout = 3 * time.Second
	opts := func(name, group string) server.Options {
		return server.Options{Database: setting, Conductor: cond.Config{Name: name, Group: group, Heartbeat: 200 * time.Millisecond, HeartbeatTimeout: timeout}}
	}
	srvA, clients := startLocal(t, setting, opts("ring-a", ""))
	srvB := servertest.Start(t, opts("ring-b", ""))
	srvC := servertest.Start(t, opts("ring-c", ""))
	srvD := servertest.Start(t, opts("ring-d", "rack2"))
	admin := clients["system-admin"]
	const n, pinned = 300, 20
	for i := range n + pinned {
		body := map[string]any{"name": fmt.Sprintf("ring-%03d", i), "driver": "fake"}
		if i >= n {
			// Groups are case-insensitive, as Ironic's.
			body["conductor_group"] = "Rack2"
		}
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes", body), 201)
	}

	waitRegistered(t, srvA, "ring-a", "ring-b", "ring-c", "ring-d")
	read := syncAll(t, srvA, srvB, srvC, srvD)
	t.Logf("first cycle: %v", read)
	if got := read["ring-a"] + read["ring-b"] + read["ring-c"]; got != n {
		t.Errorf("default group: %d reads in one cycle over %d nodes, want each read once (%v)", got, n, read)
	}
	for _, h := range []string{"ring-a", "ring-b", "ring-c"} {
		if read[h] < n/6 {
			t.Errorf("%s read %d of %d nodes; the ring should give each about a third (%v)", h, read[h], n, read)
		}
	}
	if read["ring-d"] != pinned {
		t.Errorf("ring-d (rack2) read %d nodes, want its %d", read["ring-d"], pinned)
	}

	// Who read each node is who the API says its conductor is.
	ctx := context.Background()
	evs, err := srvA.DB.NodeEvent.Query().Where(nodeevent.EventHasSuffix("(first read by power sync)")).WithNode().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	readBy := map[string]string{}
	for _, e := range evs {
		if prev, dup := readBy[e.Edges.Node.UUID]; dup {
			t.Errorf("node %s first read by both %s and %s", e.Edges.Node.UUID, prev, e.Conductor)
		}
		readBy[e.Edges.Node.UUID] = e.Conductor
	}
	shown := nodeConductors(t, admin, "")
	if len(readBy) != n+pinned || len(shown) != n+pinned {
		t.Fatalf("%d nodes read, %d listed; want %d", len(readBy), len(shown), n+pinned)
	}
	for id, h := range shown {
		if readBy[id] != h {
			t.Errorf("node %s: conductor %q in the API, read by %q", id, h, readBy[id])
		}
	}
	if got := nodeConductors(t, admin, "&conductor_group=RACK2"); len(got) != pinned {
		t.Errorf("conductor_group=RACK2 lists %d nodes, want %d", len(got), pinned)
	} else {
		for id, h := range got {
			if h != "ring-d" {
				t.Errorf("rack2 node %s mapped to %q", id, h)
			}
		}
	}
	r := admin.Do(t, "GET", "/v1/conductors?detail=true", nil)
	mustStatus(t, r, 200)
	for _, x := range r.JSON(t)["conductors"].([]any) {
		c := x.(map[string]any)
		h := c["hostname"].(string)
		if c["node_count"] != float64(read[h]) {
			t.Errorf("conductor %s: node_count %v, read %d", h, c["node_count"], read[h])
		}
		if want := map[bool]string{true: "rack2", false: ""}[h == "ring-d"]; c["conductor_group"] != want {
			t.Errorf("conductor %s: conductor_group %v, want %q", h, c["conductor_group"], want)
		}
	}

	// A fourth replica of the default group moves about a quarter of the
	// nodes, all to itself.
	before := nodeConductors(t, admin, "")
	srvE := servertest.Start(t, opts("ring-e", ""))
	waitRegistered(t, srvA, "ring-e")
	if got := syncAll(t, srvA, srvB, srvC, srvE); got["ring-a"]+got["ring-b"]+got["ring-c"]+got["ring-e"] != n {
		t.Errorf("after ring-e joined: %v reads, want %d in all", got, n)
	}
	time.Sleep(300 * time.Millisecond) // the API's ring cache lives one heartbeat
	after := nodeConductors(t, admin, "")
	moved := 0
	for id, h := range after {
		if h == before[id] {
			continue
		}
		moved++
		if h != "ring-e" {
			t.Errorf("node %s moved from %s to %s, not to the new conductor", id, before[id], h)
		}
	}
	t.Logf("ring-e took %d of %d nodes", moved, n)
	if moved < n/8 || moved > n*3/8 {
		t.Errorf("ring-e took %d of %d nodes, want about a quarter", moved, n)
	}
	// ring-c crashes: its loops stop and its row stays online, as after
	// kill -9. Until its heartbeat is timeout old nobody reads its nodes
	// (it might still be alive); then the other three read all of them.
	srvC.Cond.Stop()
	if err := srvA.DB.Conductor.Update().Where(conductor.Hostname("ring-c")).SetOnline(true).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// It died holding locks on some nodes: each goes back to the ring's
	// new owner of that node, once.
	locked, err := srvA.DB.Node.Query().Where(node.ConductorGroup("")).Limit(30).IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srvA.DB.Node.Update().Where(node.IDIn(locked...)).SetReservation("ring-c").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := srvA.DB.Conductor.Query().Where(conductor.Hostname("ring-c")).Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		start := time.Now()
		read = syncAll(t, srvA, srvB, srvE)
		got := read["ring-a"] + read["ring-b"] + read["ring-e"]
		if got == n {
			if age := start.Sub(last.HeartbeatAt); age < timeout {
				t.Errorf("ring-c's nodes were taken %v after its last heartbeat, before the %v timeout", age, timeout)
			}
			break
		}
		if got > n {
			t.Fatalf("%d reads of %d nodes after ring-c crashed", got, n)
		}
		if time.Since(last.HeartbeatAt) > timeout+5*time.Second {
			t.Fatalf("ring-c's nodes still unread %v after its last heartbeat (%v)", time.Since(last.HeartbeatAt), read)
		}
		time.Sleep(50 * time.Millisecond)
	}

	t.Logf("after ring-c crashed %v", read)
	time.Sleep(300 * time.Millisecond) // the API's ring cache lives one heartbeat
	owners := nodeConductors(t, admin, "")
	evs, err = srvA.DB.NodeEvent.Query().Where(nodeevent.EventHasPrefix("Conductor ring-c was lost")).WithNode().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recovered := map[string]int{}
	for _, e := range evs {
		id := e.Edges.Node.UUID
		recovered[e.Conductor]++
		if owners[id] != e.Conductor {
			t.Errorf("node %s recovered by %s; the ring maps it to %s", id, e.Conductor, owners[id])
		}
	}
	if len(evs) != len(locked) || len(recovered) < 2 {
		t.Errorf("%d recoveries of %d locked nodes by %v; want each once, spread", len(evs), len(locked), recovered)
	}
}

// TestConductorGroupField: Ironic's conductor_group (1.46) on create,
// show, patch and the list filter, and node.conductor (1.49), on both
// databases.
func TestConductorGroupField(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		at := func(c *servertest.Client, v string) *servertest.Client {
			cp := *c
			cp.Version = v
			return &cp
		}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "cg-1", "driver": "fake", "owner": "own", "conductor_group": "Rack-1.a_b"})
		mustStatus(t, r, 201)
		n := r.JSON(t)
		id := n["uuid"].(string)
		if n["conductor_group"] != "rack-1.a_b" || n["conductor"] != nil {
			t.Errorf("created: conductor_group %v, conductor %v; want rack-1.a_b stored lower case and no conductor (none serves it)", n["conductor_group"], n["conductor"])
		}
		if f := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "conductor_group": "rack 1!"}); f.Status != 400 || !strings.Contains(f.Fault(t), "conductor group") {
			t.Errorf("bad group on create: %d %s", f.Status, f.Body)
		}
		mustStatus(t, at(admin, "1.45").Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "conductor_group": "rack"}), 406)
		r = at(admin, "1.45").Do(t, "POST", "/v1/nodes", map[string]any{"name": "cg-2", "driver": "fake", "conductor_group": ""})
		mustStatus(t, r, 201)
		id2 := r.JSON(t)["uuid"].(string)

		// Fields appear at their versions; the default group's node maps
		// to this replica's conductor.
		for _, c := range []struct {
			v           string
			group, cond bool
		}{{"1.45", false, false}, {"1.46", true, false}, {"1.48", true, false}, {"1.49", true, true}} {
			got := at(admin, c.v).Do(t, "GET", "/v1/nodes/"+id2, nil).JSON(t)
			_, hasGroup := got["conductor_group"]
			_, hasCond := got["conductor"]
			if hasGroup != c.group || hasCond != c.cond {
				t.Errorf("at %s: conductor_group shown %v, conductor shown %v", c.v, hasGroup, hasCond)
			}
			if c.cond && got["conductor"] != srv.Cond.Name() {
				t.Errorf("node in the default group: conductor %v, want %s", got["conductor"], srv.Cond.Name())
			}
		}

		// Patch: system members only by default; validated; remove is "".
		patch := func(c *servertest.Client, op string, val any) *servertest.Response {
			p := map[string]any{"op": op, "path": "/conductor_group"}
			if op != "remove" {
				p["value"] = val
			}
			return c.Do(t, "PATCH", "/v1/nodes/"+id, []any{p})
		}
		mustStatus(t, patch(clients["owner-admin"], "replace", "other"), 403)
		mustStatus(t, patch(at(admin, "1.45"), "replace", "other"), 406)
		if f := patch(admin, "replace", "a/b"); f.Status != 400 || !strings.Contains(f.Fault(t), "conductor") {
			t.Errorf("bad group on patch: %d %s", f.Status, f.Body)
		}
		if f := patch(admin, "replace", 7); f.Status != 400 {
			t.Errorf("numeric group on patch: %d %s", f.Status, f.Body)
		}
		r = patch(admin, "replace", "RACK2")
		mustStatus(t, r, 200)
		if g := r.JSON(t)["conductor_group"]; g != "rack2" {
			t.Errorf("after patch: conductor_group %v", g)
		}
		mustStatus(t, patch(clients["system-member"], "remove", nil), 200)
		if got := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); got["conductor_group"] != "" || got["conductor"] != srv.Cond.Name() {
			t.Errorf("after remove: conductor_group %q, conductor %v; want the default group and this conductor", got["conductor_group"], got["conductor"])
		}

		// The list filter, case-insensitive, and the conductor filter.
		mustStatus(t, patch(admin, "add", "rack2"), 200)
		if got := nodeConductors(t, admin, "&conductor_group=Rack2"); len(got) != 1 || got[id] != "" {
			t.Errorf("conductor_group=Rack2 lists %v, want only %s, unserved", got, id)
		}
		mustStatus(t, at(admin, "1.45").Do(t, "GET", "/v1/nodes?conductor_group=rack2", nil), 406)
		r = admin.Do(t, "GET", "/v1/nodes?fields=uuid,conductor", nil)
		mustStatus(t, r, 200)
		for _, x := range r.JSON(t)["nodes"].([]any) {
			n := x.(map[string]any)
			if want := map[bool]any{true: nil, false: srv.Cond.Name()}[n["uuid"] == id]; n["conductor"] != want {
				t.Errorf("fields=uuid,conductor: node %v conductor %v, want %v (its group decides)", n["uuid"], n["conductor"], want)
			}
		}
		if got := nodeConductors(t, admin, "&conductor="+srv.Cond.Name()); len(got) != 1 || got[id2] != srv.Cond.Name() {
			t.Errorf("conductor filter lists %v, want only %s (%s is in rack2, which no conductor serves)", got, id2, id)
		}
		r = admin.Do(t, "GET", "/v1/conductors?fields=hostname,node_count", nil)
		mustStatus(t, r, 200)
		cs := r.JSON(t)["conductors"].([]any)
		if len(cs) != 1 || cs[0].(map[string]any)["node_count"] != float64(1) {
			t.Errorf("conductors %v: want this one with node_count 1 (cg-2; cg-1 is in rack2)", cs)
		}
	})
}
