package api_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
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

// plantMarker writes marker at each offset of disk.
func plantMarker(t *testing.T, disk string, marker []byte, offsets []int64) {
	t.Helper()
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range offsets {
		if _, err := f.WriteAt(marker, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// markerPieces counts where any 16-byte piece of marker occurs on the
// whole of disk, read from its first byte to its last.
func markerPieces(t *testing.T, disk string, marker []byte) int {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pieces [][]byte
	for i := 0; i+16 <= len(marker); i += 16 {
		pieces = append(pieces, marker[i:i+16])
	}
	const chunk = 8 << 20
	buf := make([]byte, chunk+len(marker))
	found, carry := 0, 0
	for {
		n, err := io.ReadFull(f, buf[carry:carry+chunk])
		data := buf[:carry+n]
		for _, p := range pieces {
			found += bytes.Count(data, p)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return found
		}
		if err != nil {
			t.Fatal(err)
		}
		// Keep the tail, less one byte, so a piece across two chunks is
		// seen once.
		carry = copy(buf, data[len(data)-15:])
	}
}

// TestWipePolicies: with the real agent booted only from what Anvil
// serves (an ISO Anvil builds), a marker planted on the loop disk (random
// bytes in the partition table's sectors, in data areas and at the end)
// is gone from the whole device after provide with the express and full
// policies, and still there after metadata; each provide leaves a wipe
// record the lessee's reader reads, naming the disk, its method and the
// result.
func TestWipePolicies(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		// No random passes: the full overwrite is one pass of zeros,
		// which still leaves no byte of the disk unwritten.
		rg := newRigWith(t, setting, server.Options{BootISODir: t.TempDir(),
			Conductor: conductor.Config{Agent: conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, WipePasses: 0}}}, 1)
		base, _, _, _ := bootFiles(t)
		rg.boot = map[string]any{"deploy_kernel": base + "vmlinuz", "deploy_ramdisk": base + "initrd", "bootloader": base + "esp.img"}
		admin, member, lessee := rg.cs["system-admin"], rg.cs["owner-member"], rg.cs["lessee-reader"]
		id, disk := rg.node(t, 0, "wipe1", true, nil)
		size, err := os.OpenFile(disk, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := size.Seek(0, io.SeekEnd)
		size.Close()
		offsets := []int64{0, 512 + 100, 1 << 20, 16<<20 + 4096 + 7, 1 << 30, 3<<30 + 12345, end - 1<<20, end - 64}
		for _, policy := range []string{"express", "full", "metadata"} {
			marker := make([]byte, 64)
			_, _ = rand.Read(marker)
			run(t, "sgdisk", "-o", "-n", "1:2048:+16M", disk)
			plantMarker(t, disk, marker, offsets)
			planted := markerPieces(t, disk, marker)
			if planted < len(offsets)*4 {
				t.Fatalf("%s: planted marker found %d times", policy, planted)
			}
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/anvil_wipe", "value": policy}}), 200)
			provision(t, member, id, map[string]any{"target": "provide"}, 202)
			waitFor(t, admin, id, "available", rg.rack)
			left := markerPieces(t, disk, marker)
			switch {
			case policy == "metadata" && left == 0:
				t.Errorf("metadata: the marker is gone from the disk; it erases partition tables only")
			case policy != "metadata" && left != 0:
				t.Errorf("%s: %d pieces of the marker are still on the disk", policy, left)
			}
			recs := wipeRecords(t, lessee, id)
			if len(recs) == 0 {
				t.Fatalf("%s: the lessee reads no wipe record", policy)
			}
			rec := recs[0]
			disks, _ := rec["disks"].([]any)
			if rec["result"] != "wiped" || rec["policy"] != policy || len(disks) != 1 {
				t.Fatalf("%s: record %v", policy, rec)
			}
			d := disks[0].(map[string]any)
			method, _ := d["method"].(string)
			want := map[string]string{"express": "else a full overwrite (erase_devices)", "full": "full overwrite: 0 random pass(es), then zeros",
				"metadata": "metadata: partition tables"}[policy]
			if d["name"] != disk || d["serial"] == nil || d["size"] == nil || !strings.Contains(method, want) {
				t.Errorf("%s: record's disk %v, want %s and method %q", policy, d, disk, want)
			}
			page := lessee.Do(t, "GET", "/v1/wipe_records/"+rec["uuid"].(string), nil)
			mustStatus(t, page, 200)
			if !historyHas(t, lessee, id, "Wipe ("+policy+" policy) wiped") {
				t.Errorf("%s: no wipe event in the node's history", policy)
			}
			t.Logf("%s: marker pieces before %d, after %d; wipe took %v s", policy, planted, left, rec["duration_seconds"])
			provision(t, admin, id, map[string]any{"target": "manage"}, 202)
			waitFor(t, admin, id, "manageable", rg.rack)
		}
	})
}
