package api_test

import (
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// wipeRecords lists node id's wipe records as c reads them.
func wipeRecords(t *testing.T, c *servertest.Client, id string) []map[string]any {
	t.Helper()
	r := c.Do(t, "GET", "/v1/wipe_records?node="+id, nil)
	mustStatus(t, r, 200)
	var out []map[string]any
	for _, x := range r.JSON(t)["wipe_records"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// historyHas tells whether node id's history, as c reads it, has an
// event containing s.
func historyHas(t *testing.T, c *servertest.Client, id, s string) bool {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
	mustStatus(t, r, 200)
	for _, e := range r.JSON(t)["history"].([]any) {
		if ev, _ := e.(map[string]any)["event"].(string); strings.Contains(ev, s) {
			return true
		}
	}
	return false
}

// TestWipeFailsClosed: provide on a node that cannot boot the agent (a
// redfish-virtual-media node with deploy_kernel and deploy_ramdisk but no
// bootloader, so no ISO can be built) ends in clean failed with
// maintenance and the clean failure fault, never available, and leaves a
// failed wipe record its lessee's reader reads, also after the lease
// ended, and an unrelated project cannot; a fake-hardware node reaches
// available with a record that says it was not wiped; only system scope
// sets a node's wipe policy.
func TestWipeFailsClosed(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, cs := startLocal(t, setting)
		admin, lessee, other := cs["system-admin"], cs["lessee-reader"], cs["other-reader"]
		info := sim.DriverInfo("1")
		info["deploy_kernel"], info["deploy_ramdisk"] = "http://127.0.0.1:9/vmlinuz", "http://127.0.0.1:9/initrd"
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "nowipe", "driver": "redfish", "driver_info": info,
			"owner": "own", "lessee": "les", "boot_interface": "redfish-virtual-media"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, cs["owner-member"], id, map[string]any{"target": "provide"}, 202)
		n := waitState(t, admin, id, "clean failed")
		last, _ := n["last_error"].(string)
		if n["maintenance"] != true || n["fault"] != "clean failure" || !strings.Contains(last, "bootloader") || !strings.Contains(last, "cannot wipe") {
			t.Errorf("after provide: maintenance %v fault %v last_error %q", n["maintenance"], n["fault"], last)
		}
		recs := wipeRecords(t, lessee, id)
		if len(recs) != 1 {
			t.Fatalf("lessee reads %d wipe records, want 1", len(recs))
		}
		rec := recs[0]
		if rec["result"] != "failed" || rec["policy"] != "express" || rec["lessee"] != "les" || rec["owner"] != "own" ||
			!strings.Contains(rec["message"].(string), "bootloader") || len(rec["disks"].([]any)) != 0 {
			t.Errorf("failed wipe's record: %v", rec)
		}
		if !historyHas(t, lessee, id, "Wipe (express policy) failed") {
			t.Error("the node's history has no failed wipe event")
		}
		uuid := rec["uuid"].(string)
		// The lease ends: the lessee no longer sees the node, but reads
		// the record; another project reads neither.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/lessee"}}), 200)
		mustStatus(t, lessee.Do(t, "GET", "/v1/nodes/"+id, nil), 404)
		if got := lessee.Do(t, "GET", "/v1/wipe_records/"+uuid, nil); got.Status != 200 || got.JSON(t)["uuid"] != uuid {
			t.Errorf("the former lessee reads its wipe record: %d %s", got.Status, got.Body)
		}
		mustStatus(t, cs["owner-reader"].Do(t, "GET", "/v1/wipe_records/"+uuid, nil), 200)
		mustStatus(t, cs["system-reader"].Do(t, "GET", "/v1/wipe_records/"+uuid, nil), 200)
		mustStatus(t, other.Do(t, "GET", "/v1/wipe_records/"+uuid, nil), 404)
		if got := wipeRecords(t, other, id); len(got) != 0 {
			t.Errorf("an unrelated project lists %d wipe records", len(got))
		}
		mustStatus(t, lessee.Do(t, "GET", "/v1/wipe_records?bogus=1", nil), 400)

		// Only system scope sets the node's wipe policy.
		set := func(c *servertest.Client, v any) *servertest.Response {
			return c.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/anvil_wipe", "value": v}})
		}
		mustStatus(t, set(cs["owner-admin"], "metadata"), 403)
		wantFault(t, set(admin, "deep"), 400, "driver_info/anvil_wipe")
		mustStatus(t, set(admin, "full"), 200)
		if di := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["driver_info"].(map[string]any); di["anvil_wipe"] != "full" {
			t.Errorf("driver_info after setting the wipe policy: %v", di)
		}

		// fake-hardware: available, and a record that says not wiped.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "fake1", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		fid := r.JSON(t)["uuid"].(string)
		provision(t, admin, fid, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, fid, "manageable")
		provision(t, admin, fid, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, fid, "available")
		recs = wipeRecords(t, lessee, fid)
		if len(recs) != 1 || recs[0]["result"] != "not wiped" || recs[0]["policy"] != "none" || !strings.Contains(recs[0]["message"].(string), "fake hardware") {
			t.Errorf("fake node's wipe records: %v", recs)
		}
	})
}
