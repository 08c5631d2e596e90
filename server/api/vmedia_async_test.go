package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// vmediaSettled waits until the virtual media work on a node has ended
// (its lock is released) and returns the node as admin sees it.
func vmediaSettled(t *testing.T, admin *servertest.Client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := admin.Do(t, "GET", "/v1/nodes/"+id, nil)
		mustStatus(t, r, 200)
		if n := r.JSON(t); n["reservation"] == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s still locked after its virtual media work", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastHistory is the node's newest history entry.
func lastHistory(t *testing.T, admin *servertest.Client, id string) map[string]any {
	t.Helper()
	h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil).JSON(t)["history"].([]any)
	if len(h) == 0 {
		t.Fatalf("node %s has no history", id)
	}
	return h[len(h)-1].(map[string]any)
}

// TestVMediaAsync: as Ironic's conductor, virtual media attach and detach
// answer 204 once the node's lock is held and its management settings
// validate; a driver without virtual media or a BMC that cannot fetch the
// image fails afterwards, in last_error and as an error in the node's
// history. What stays synchronous: the lock (409), missing BMC settings
// (400), a power failure (503), and another project's node (404). A new
// request clears the last error.
func TestVMediaAsync(t *testing.T) {
	iso := servertest.ServeISO(t)
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerVMediaGet)
		ctx := context.Background()

		// gophercloud's acceptance test: an ipmi node, whose driver has
		// no virtual media, and a URL nothing serves.
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vma-ipmi", "driver": "ipmi", "owner": "own",
			"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": "6230", "ipmi_username": "admin", "ipmi_password": "admin"}})
		mustStatus(t, r, 201)
		ipmi := r.JSON(t)["uuid"].(string)
		path := "/v1/nodes/" + ipmi + "/vmedia"
		mustStatus(t, admin.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": "http://127.0.0.1:17"}), 204)
		n := vmediaSettled(t, admin, ipmi)
		want := "Could not attach device cdrom to node " + ipmi + ": Driver ipmi does not support attach_virtual_media (disabled or not implemented)."
		if n["last_error"] != want {
			t.Errorf("last_error %v, want %q", n["last_error"], want)
		}
		if h := lastHistory(t, admin, ipmi); h["severity"] != "ERROR" || h["event"] != want {
			t.Errorf("history after the failed attach: %v", h)
		}
		mustStatus(t, admin.Do(t, "DELETE", path+"?device_types=cdrom", nil), 204)
		n = vmediaSettled(t, admin, ipmi)
		if le, _ := n["last_error"].(string); !strings.HasPrefix(le, "Could not detach device(s) cdrom from node "+ipmi+": Driver ipmi does not support detach_virtual_media") {
			t.Errorf("last_error after detach %v", n["last_error"])
		}
		mustStatus(t, admin.Do(t, "DELETE", path, nil), 204)
		vmediaSettled(t, admin, ipmi)
		// Reading stays synchronous, as in Ironic: the driver's refusal.
		mustStatus(t, admin.Do(t, "GET", path, nil), 400)

		// Synchronous refusals.
		mustStatus(t, clients["other-admin"].Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": iso}), 404)
		// The API refuses an ipmi node without its address; one stored
		// before that rule still exists.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vma-bare", "driver": "ipmi", "driver_info": map[string]any{"ipmi_address": "127.0.0.1"}})
		mustStatus(t, r, 201)
		bare := r.JSON(t)["uuid"].(string)
		if err := db.Node.Update().Where(node.UUID(bare)).SetDriverInfo(map[string]any{}).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if r := admin.Do(t, "POST", "/v1/nodes/"+bare+"/vmedia", map[string]any{"device_type": "cdrom", "image_url": iso}); r.Status != 400 || !strings.Contains(r.Fault(t), "ipmi_address") {
			t.Errorf("attach without BMC settings: %d %s", r.Status, r.Body)
		}
		if n := vmediaSettled(t, admin, bare); n["last_error"] != nil {
			t.Errorf("a refused attach recorded %v", n["last_error"])
		}
		if err := db.Node.Update().Where(node.UUID(ipmi)).SetReservation("elsewhere").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if r := admin.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": iso}); r.Status != 409 || !strings.Contains(r.Fault(t), "locked") {
			t.Errorf("attach on a locked node: %d %s", r.Status, r.Body)
		}
		if err := db.Node.Update().Where(node.UUID(ipmi)).ClearReservation().SetMaintenance(true).SetFault("power failure").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if r := admin.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": iso}); r.Status != 503 || !strings.Contains(r.Fault(t), "power failure") {
			t.Errorf("attach in a power failure: %d %s", r.Status, r.Body)
		}
		if r := admin.Do(t, "DELETE", path, nil); r.Status != 503 || !strings.Contains(r.Fault(t), "Unable to detach virtual media") {
			t.Errorf("detach in a power failure: %d %s", r.Status, r.Body)
		}
		if n := vmediaSettled(t, admin, ipmi); !strings.HasPrefix(n["last_error"].(string), "Could not detach") {
			t.Errorf("a refused request changed last_error to %v", n["last_error"])
		}

		// A redfish BMC that cannot fetch the image fails after the
		// answer; the next attach clears the error and inserts.
		r = admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vma-rf", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own"})
		mustStatus(t, r, 201)
		rf := r.JSON(t)["uuid"].(string)
		rpath := "/v1/nodes/" + rf + "/vmedia"
		member := atVer(clients["owner-member"], api.VerVMediaGet)
		mustStatus(t, member.Do(t, "POST", rpath, map[string]any{"device_type": "cdrom", "image_url": "http://127.0.0.1:17/none.iso"}), 204)
		n = vmediaSettled(t, admin, rf)
		if le, _ := n["last_error"].(string); !strings.HasPrefix(le, "Could not attach device cdrom to node "+rf+": ") {
			t.Errorf("last_error after an unfetchable image: %v", n["last_error"])
		}
		if h := lastHistory(t, admin, rf); h["severity"] != "ERROR" || !strings.HasPrefix(h["event"].(string), "Could not attach device cdrom") {
			t.Errorf("history after an unfetchable image: %v", h)
		}
		mustStatus(t, member.Do(t, "POST", rpath, map[string]any{"device_type": "cdrom", "image_url": iso}), 204)
		if n := vmediaSettled(t, admin, rf); n["last_error"] != nil {
			t.Errorf("last_error after a good attach: %v", n["last_error"])
		}
		if image, inserted := sim.CD(t, "1"); image != iso || !inserted {
			t.Errorf("the BMC has %q (inserted %v), want %s", image, inserted, iso)
		}
		if h := lastHistory(t, admin, rf); h["severity"] != "INFO" || !strings.Contains(h["event"].(string), "attached") {
			t.Errorf("history after the attach: %v", h)
		}
	})
}
