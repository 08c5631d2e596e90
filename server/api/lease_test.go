package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/allocations"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// leaseAt is a lease end d from now as RFC 3339 in UTC.
func leaseAt(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

// allocationRow reads an allocation as stored, nil when it is gone.
func allocationRow(t *testing.T, db *ent.Client, id string) *ent.Allocation {
	t.Helper()
	a, err := db.Allocation.Query().Where(allocation.UUID(id)).Only(context.Background())
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// endLeaseNow moves an allocation's lease end into the past, as time
// would: the API refuses a past end at create.
func endLeaseNow(t *testing.T, db *ent.Client, id string) string {
	t.Helper()
	a := allocationRow(t, db, id)
	end := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	extra := a.Extra
	extra[allocations.LeaseKey] = end
	if err := db.Allocation.UpdateOne(a).SetExtra(extra).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return end
}

// leaseWait polls cond for up to 30 s.
func leaseWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaseAudits are the audit rows of lease ends of an allocation.
func leaseAudits(t *testing.T, db *ent.Client, id string) []*ent.AuditEvent {
	t.Helper()
	evs, err := db.AuditEvent.Query().Where(auditevent.TargetType("allocation"), auditevent.TargetID(id),
		auditevent.Rule(allocations.RuleDelete)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*ent.AuditEvent
	for _, e := range evs {
		if e.Detail["reason"] == "lease ended" {
			out = append(out, e)
		}
	}
	return out
}

// leaseEndAudits waits for the audit row of the lease end of allocation
// id, which the conductor writes after the row goes, and returns the
// rows then: exactly one is right.
func leaseEndAudits(t *testing.T, db *ent.Client, id string) []*ent.AuditEvent {
	t.Helper()
	var got []*ent.AuditEvent
	leaseWait(t, "lease end of "+id+" audited", func() bool { got = leaseAudits(t, db, id); return len(got) > 0 })
	return got
}

// TestLeaseValidation: a lease end must be a timestamp, in the future at
// create, and with --allocation-max-lease a project's caller must give
// one within the cap and may neither push it beyond nor remove it, by
// any shape of patch; a system caller is not capped. Every refusal is a
// 400 naming extra.anvil_expires_at that changes nothing.
func TestLeaseValidation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting, server.Options{AllocationMaxLease: time.Hour})
		admin, member := clients["system-admin"], clients["owner-member"]
		availableNode(t, admin, map[string]any{"name": "lease-v1", "owner": "own"})
		availableNode(t, admin, map[string]any{"name": "lease-v2", "owner": "own"})
		body := func(extra map[string]any) map[string]any {
			return map[string]any{"resource_class": "baremetal", "extra": extra}
		}
		for what, extra := range map[string]map[string]any{
			"not a timestamp": {allocations.LeaseKey: "tomorrow"},
			"a number":        {allocations.LeaseKey: 1767225600},
			"null":            {allocations.LeaseKey: nil},
			"in the past":     {allocations.LeaseKey: leaseAt(-time.Minute)},
			"beyond the cap":  {allocations.LeaseKey: leaseAt(2 * time.Hour)},
			"missing":         {"purpose": "ci"},
		} {
			mustFaultNaming(t, what, member.Do(t, "POST", "/v1/allocations", body(extra)), allocations.LeaseField)
		}
		mustFaultNaming(t, "admin, in the past", admin.Do(t, "POST", "/v1/allocations", body(map[string]any{allocations.LeaseKey: leaseAt(-time.Minute)})), allocations.LeaseField)
		if n, err := db.Allocation.Query().Count(context.Background()); err != nil || n != 0 {
			t.Fatalf("%d allocations after refused creates (%v)", n, err)
		}

		// Within the cap, in another zone: stored in UTC.
		end := time.Now().Add(30 * time.Minute).Truncate(time.Second)
		a := allocate(t, member, body(map[string]any{allocations.LeaseKey: end.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)}))
		id := a["uuid"].(string)
		if got := a["extra"].(map[string]any)[allocations.LeaseKey]; got != end.UTC().Format(time.RFC3339) {
			t.Errorf("lease end reads back %v, want %s", got, end.UTC().Format(time.RFC3339))
		}
		// The operator is not capped, and may leave a lease out.
		sys := allocate(t, admin, body(map[string]any{allocations.LeaseKey: leaseAt(48 * time.Hour)}))
		if sys["state"] != "active" {
			t.Errorf("system allocation beyond the cap: %v", sys)
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/allocations/"+sys["uuid"].(string), nil), 204)

		path := "/v1/allocations/" + id
		patch := func(c *servertest.Client, ops ...map[string]any) *servertest.Response {
			return c.Do(t, "PATCH", path, ops)
		}
		op := func(o, p string, v any) map[string]any { return map[string]any{"op": o, "path": p, "value": v} }
		keyPath := "/extra/" + allocations.LeaseKey
		before := allocationRow(t, db.Client, id)
		for what, ops := range map[string][]map[string]any{
			"remove the key":      {{"op": "remove", "path": keyPath}},
			"replace extra whole": {op("replace", "/extra", map[string]any{"purpose": "mine now"})},
			"remove extra":        {{"op": "remove", "path": "/extra"}},
			"beyond the cap":      {op("replace", keyPath, leaseAt(3*time.Hour))},
			"extra beyond":        {op("replace", "/extra", map[string]any{allocations.LeaseKey: leaseAt(3 * time.Hour)})},
			"move it away":        {{"op": "move", "from": keyPath, "path": "/extra/was"}},
			"not a timestamp":     {op("replace", keyPath, "soon")},
		} {
			mustFaultNaming(t, what, patch(member, ops...), allocations.LeaseField)
		}
		if after := allocationRow(t, db.Client, id); fmt.Sprint(after.Extra) != fmt.Sprint(before.Extra) || after.Name != nil {
			t.Errorf("refused patches changed the allocation: %v -> %v", before.Extra, after.Extra)
		}
		mustStatus(t, patch(clients["other-admin"], op("replace", keyPath, leaseAt(time.Minute))), 404)

		// Shortening and renewing within the cap are the tenant's; the
		// operator may go beyond it.
		mustStatus(t, patch(member, op("replace", keyPath, leaseAt(50*time.Minute)), op("add", "/extra/purpose", "ci")), 200)
		mustStatus(t, patch(admin, op("replace", keyPath, leaseAt(72*time.Hour))), 200)
		// A tenant patching something else keeps the operator's lease.
		mustStatus(t, patch(member, op("replace", "/name", "mine")), 200)
		mustStatus(t, patch(admin, map[string]any{"op": "remove", "path": keyPath}), 200)

		// Two tenant patches at once: each is a 200 or a 400, the stored
		// lease one of the accepted values.
		mustStatus(t, patch(admin, op("add", keyPath, leaseAt(10*time.Minute))), 200)
		ok := leaseAt(20 * time.Minute)
		var wg sync.WaitGroup
		status := make([]int, 8)
		for i := range status {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ops := []map[string]any{op("replace", keyPath, ok)}
				if i%2 == 1 {
					ops = []map[string]any{op("replace", "/extra", map[string]any{})}
				}
				status[i] = patch(member, ops...).Status
			}()
		}
		wg.Wait()
		for i, s := range status {
			if want := []int{200, 400}[i%2]; s != want {
				t.Errorf("concurrent patch %d: %d, want %d", i, s, want)
			}
		}
		if got := allocationRow(t, db.Client, id).Extra[allocations.LeaseKey]; got != ok {
			t.Errorf("lease after concurrent patches %v, want %s", got, ok)
		}
		auditedRule(t, clients["system-reader"], allocations.RuleUpdate)
	})
}

// leaseServer starts a server whose conductor checks leases every 100 ms.
func leaseServer(t *testing.T, setting string) (*servertest.Server, map[string]*servertest.Client) {
	return startLocal(t, setting, server.Options{Conductor: cond.Config{LeaseCheck: 100 * time.Millisecond}})
}

// TestLeaseEndReleasesHeldNode: a lease ends on an available node the
// allocation holds: the allocation goes, the node is free again, the
// node's history tells its owner and lessee, and the audit log names the
// conductor. An allocation that never got a node goes too.
func TestLeaseEndReleasesHeldNode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := leaseServer(t, setting)
		admin, member := clients["system-admin"], clients["lessee-member"]
		node := availableNode(t, admin, map[string]any{"name": "lease-held", "owner": "own", "lessee": "les"})
		a := allocate(t, member, map[string]any{"resource_class": "baremetal", "name": "held-1",
			"extra": map[string]any{allocations.LeaseKey: leaseAt(time.Hour)}})
		id := a["uuid"].(string)
		if a["node_uuid"] != node {
			t.Fatalf("allocation %v", a)
		}
		failed := allocate(t, admin, map[string]any{"resource_class": "baremetal", "owner": "nobody",
			"extra": map[string]any{allocations.LeaseKey: leaseAt(time.Hour)}})
		if failed["state"] != "error" {
			t.Fatalf("allocation without a node: %v", failed)
		}
		end := endLeaseNow(t, db.Client, id)
		endLeaseNow(t, db.Client, failed["uuid"].(string))

		leaseWait(t, "allocation released", func() bool { return allocationRow(t, db.Client, id) == nil })
		mustStatus(t, member.Do(t, "GET", "/v1/allocations/"+id, nil), 404)
		n := admin.Do(t, "GET", "/v1/nodes/"+node, nil).JSON(t)
		if n["instance_uuid"] != nil || n["provision_state"] != "available" || n["maintenance"] != false {
			t.Errorf("released node: instance_uuid %v, %v, maintenance %v", n["instance_uuid"], n["provision_state"], n["maintenance"])
		}
		want := fmt.Sprintf("notify: Lease of allocation held-1 ended at %s: released the node", end)
		for _, reader := range []string{"lessee-member", "owner-member"} {
			if h := eventsOf(t, clients[reader], node); !strings.Contains(h, want) {
				t.Errorf("%s reads a history without %q:\n%s", reader, want, h)
			}
		}
		audits := leaseEndAudits(t, db.Client, id)
		if len(audits) != 1 {
			t.Fatalf("%d lease-end audit rows, want 1", len(audits))
		}
		if e := audits[0]; e.User != "conductor "+srv.Cond.Name() || e.Scope != "system" || e.Result != "allowed" ||
			e.Detail["action"] != "release" || e.Detail["node"] != node || e.Detail["expires_at"] != end {
			t.Errorf("audit row: user %q scope %q result %q detail %v", e.User, e.Scope, e.Result, e.Detail)
		}
		leaseWait(t, "nodeless allocation deleted", func() bool { return allocationRow(t, db.Client, failed["uuid"].(string)) == nil })
		if got := leaseEndAudits(t, db.Client, failed["uuid"].(string)); len(got) != 1 || got[0].Detail["action"] != "release" {
			t.Errorf("nodeless lease end audited %d times", len(got))
		}
		// The node serves the next tenant.
		if b := allocate(t, clients["owner-member"], map[string]any{"resource_class": "baremetal"}); b["node_uuid"] != node {
			t.Errorf("next allocation %v", b)
		}
	})
}

// TestLeaseEndUndeploys: a lease ends on a deployed fake-hardware node:
// protected, it waits with a note; unprotected, the conductor undeploys
// it (tear-down, automated cleaning, available), its open console
// closes, and the tear-down takes the allocation.
func TestLeaseEndUndeploys(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := leaseServer(t, setting)
		admin, owner := clients["system-admin"], clients["owner-member"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "lease-dep", "driver": "fake-hardware", "owner": "own", "resource_class": "baremetal"})
		mustStatus(t, r, 201)
		node := r.JSON(t)["uuid"].(string)
		provision(t, admin, node, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, node, "manageable")
		provision(t, admin, node, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, node, "available")
		a := allocate(t, owner, map[string]any{"resource_class": "baremetal", "extra": map[string]any{allocations.LeaseKey: leaseAt(time.Hour)}})
		id := a["uuid"].(string)
		provision(t, owner, node, map[string]any{"target": "active"}, 202)
		waitState(t, admin, node, "active")
		mustStatus(t, owner.Do(t, "PUT", "/v1/nodes/"+node+"/states/console", map[string]any{"enabled": true}), 202)
		leaseWait(t, "console enabled", func() bool { on, _ := consoleState(t, owner, node); return on })

		// Protected, the node waits for whoever protected it.
		protect := func(on bool) {
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+node, []map[string]any{{"op": "replace", "path": "/protected", "value": on}}), 200)
		}
		protect(true)
		end := endLeaseNow(t, db.Client, id)
		note := "Lease of allocation " + id + " ended at " + end + ": the node is protected; it awaits its owner or an operator"
		leaseWait(t, "protected note", func() bool { return strings.Contains(eventsOf(t, owner, node), note) })
		if n := admin.Do(t, "GET", "/v1/nodes/"+node, nil).JSON(t); n["provision_state"] != "active" || allocationRow(t, db.Client, id) == nil {
			t.Fatalf("a protected node's lease ended: %v", n["provision_state"])
		}
		protect(false)
		leaseWait(t, "allocation gone", func() bool { return allocationRow(t, db.Client, id) == nil })
		n := waitState(t, admin, node, "available")
		if n["instance_uuid"] != nil || n["console_enabled"] != false || n["power_state"] != "power off" {
			t.Errorf("after the lease: instance_uuid %v, console_enabled %v, power %v", n["instance_uuid"], n["console_enabled"], n["power_state"])
		}
		h := eventsOf(t, owner, node)
		for _, want := range []string{
			"notify: Lease of allocation " + id + " ended at " + end + ": undeploying; automated cleaning wipes it",
			"deploy: Instance torn down", "console disabled; allocation " + id + " released", "clean: No clean steps to run; node is available",
		} {
			if !strings.Contains(h, want) {
				t.Errorf("history lacks %q:\n%s", want, h)
			}
		}
		// One lease end, the undeploy: the tear-down took the allocation.
		audits := leaseEndAudits(t, db.Client, id)
		if len(audits) != 1 {
			t.Fatalf("%d lease-end audit rows, want 1", len(audits))
		}
		if e := audits[0]; e.Detail["action"] != "undeploy" || e.User != "conductor "+srv.Cond.Name() || e.Result != "allowed" || e.Detail["node"] != node {
			t.Errorf("audit row: user %q result %q detail %v", e.User, e.Result, e.Detail)
		}
	})
}

// TestLeaseEndInMaintenance: a lease that ends on a node in maintenance
// leaves node and allocation alone and says so once; once maintenance is
// cleared, the next pass ends it.
func TestLeaseEndInMaintenance(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := leaseServer(t, setting)
		admin, member := clients["system-admin"], clients["owner-member"]
		node := availableNode(t, admin, map[string]any{"name": "lease-maint", "owner": "own"})
		a := allocate(t, member, map[string]any{"resource_class": "baremetal", "extra": map[string]any{allocations.LeaseKey: leaseAt(time.Hour)}})
		id := a["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+node+"/maintenance", map[string]any{"reason": "disk swap"}), 202)
		end := endLeaseNow(t, db.Client, id)
		note := "Lease of allocation " + id + " ended at " + end + ": the node is in maintenance; it awaits its owner or an operator"
		leaseWait(t, "maintenance note", func() bool { return strings.Contains(eventsOf(t, member, node), note) })
		// Several more passes.
		time.Sleep(time.Second)
		if c := strings.Count(eventsOf(t, member, node), note); c != 1 {
			t.Errorf("note recorded %d times, want once", c)
		}
		if allocationRow(t, db.Client, id) == nil {
			t.Fatal("allocation ended on a node in maintenance")
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+node, nil).JSON(t); n["instance_uuid"] != id {
			t.Errorf("node instance_uuid %v", n["instance_uuid"])
		}
		if got := leaseAudits(t, db.Client, id); len(got) != 0 {
			t.Errorf("%d lease-end audit rows while nothing changed", len(got))
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+node+"/maintenance", nil), 202)
		leaseWait(t, "allocation released", func() bool { return allocationRow(t, db.Client, id) == nil })
		if got := leaseEndAudits(t, db.Client, id); len(got) != 1 || got[0].Detail["action"] != "release" {
			t.Errorf("%d lease-end audit rows after maintenance, want one release", len(got))
		}
	})
}

// TestLeaseEndsOnceAcrossConductors: two conductors on one database end
// twenty leases in concurrent passes while the tenant releases half of
// them at the same moment: every allocation ends exactly once, by one
// conductor or the tenant, and no release fails with a 500.
func TestLeaseEndsOnceAcrossConductors(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	opts := func(name string) server.Options {
		// The loops' own passes are an hour apart: the test runs them.
		return server.Options{Database: setting, Conductor: cond.Config{Name: name, LeaseCheck: time.Hour}}
	}
	srvA, clients := startLocal(t, setting, opts("lease-a"))
	srvB := servertest.Start(t, opts("lease-b"))
	waitRegistered(t, srvA, "lease-a", "lease-b")
	admin, member := clients["system-admin"], clients["owner-member"]
	const n = 20
	var ids []string
	for i := range n {
		availableNode(t, admin, map[string]any{"name": fmt.Sprintf("lease-ring-%02d", i), "owner": "own"})
		a := allocate(t, member, map[string]any{"resource_class": "baremetal", "extra": map[string]any{allocations.LeaseKey: leaseAt(time.Hour)}})
		ids = append(ids, a["uuid"].(string))
	}
	for _, id := range ids {
		endLeaseNow(t, srvA.DB.Client, id)
	}
	// Everything starts at once, when start closes.
	start := make(chan struct{})
	var wg sync.WaitGroup
	deleted := make([]int, n)
	for i, id := range ids {
		if i%2 == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				deleted[i] = member.Do(t, "DELETE", "/v1/allocations/"+id, nil).Status
			}()
		}
	}
	for _, s := range []*servertest.Server{srvA, srvB, srvA, srvB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := s.Cond.EndLeases(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	by := map[string]int{}
	for i, id := range ids {
		if allocationRow(t, srvA.DB.Client, id) != nil {
			t.Errorf("allocation %d still there", i)
		}
		ended := leaseAudits(t, srvA.DB.Client, id)
		for _, e := range ended {
			by[e.User]++
		}
		switch {
		case i%2 == 1 && len(ended) != 1:
			t.Errorf("allocation %d: %d lease ends, want 1", i, len(ended))
		case i%2 == 0 && deleted[i] == 204 && len(ended) != 0:
			t.Errorf("allocation %d: released by its tenant and ended %d times", i, len(ended))
		case i%2 == 0 && deleted[i] == 404 && len(ended) != 1:
			t.Errorf("allocation %d: tenant told 404, %d lease ends", i, len(ended))
		case i%2 == 0 && deleted[i] != 204 && deleted[i] != 404:
			t.Errorf("allocation %d: tenant release %d", i, deleted[i])
		}
	}
	t.Logf("lease ends by conductor: %v; tenant releases %v", by, deleted)
	if by["conductor lease-a"] == 0 || by["conductor lease-b"] == 0 {
		t.Errorf("lease ends %v: the ring should give each conductor a share", by)
	}
}
