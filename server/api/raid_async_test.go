package api_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// rootMirror is a target of one 100 GiB root mirror named root.
var rootMirror = map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": 100, "volume_name": "root", "is_root_volume": true}}}

// raidNodeAt enrols a manageable redfish node with driver_info info and
// the root mirror as its target RAID.
func raidNodeAt(t *testing.T, admin *servertest.Client, info map[string]any) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "raid-async", "driver": "redfish", "driver_info": info, "owner": "own"})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", rootMirror), 204)
	return id
}

// cleanRAID runs one raid step in a manual clean and waits for state.
func cleanRAID(t *testing.T, admin *servertest.Client, id, stepName, state string) map[string]any {
	t.Helper()
	provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", stepName, nil))}, 202)
	return waitState(t, admin, id, state)
}

// proxyBodies decodes the proxy's volume request bodies of method.
func proxyBodies(t *testing.T, p *bmctest.RAIDProxy, method string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, b := range p.Bodies() {
		parts := strings.SplitN(b, " ", 3)
		if parts[0] != method {
			continue
		}
		m := map[string]any{}
		if parts[2] != "" {
			if err := json.Unmarshal([]byte(parts[2]), &m); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
		}
		out = append(out, m)
	}
	return out
}

// indexOf is the index of the first request with prefix, -1 for none.
func indexOf(reqs []string, prefix string) int {
	return slices.IndexFunc(reqs, func(r string) bool { return strings.HasPrefix(r, prefix) })
}

const resetPath = "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset"

// TestRAIDOnResetTask: a BMC whose volume collection supports only
// OnReset answers the create 202 with a task monitor and builds the
// volume at the next reset. Anvil asks OnReset, reboots the node, follows
// the task to its end, re-reads the volumes and records the one the BMC
// built, under the Id the BMC gave it. delete_configuration then goes one
// volume per controller per reset, as Ironic's, until none is left.
func TestRAIDOnResetTask(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		proxy := bmctest.StartRAIDProxy(t, sim, bmctest.RAIDMode{ApplyTimes: []string{"OnReset"}})
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		id := raidNodeAt(t, admin, proxy.DriverInfo())

		n := cleanRAID(t, admin, id, "create_configuration", "manageable")
		if n["last_error"] != nil {
			t.Fatalf("create_configuration: %v", n["last_error"])
		}
		posts := proxyBodies(t, proxy, "POST")
		if len(posts) != 1 || posts[0]["@Redfish.OperationApplyTime"] != "OnReset" || posts[0]["RAIDType"] != "RAID1" || posts[0]["Name"] != "root" {
			t.Fatalf("volume POSTs %v, want one RAID1 root asking OnReset", posts)
		}
		// The simulator saw the reset, and built the volume only then.
		vols := simVolumes(t, sim)
		if len(vols) != 2 {
			t.Fatalf("simulator volumes %v, want its own and the new one", vols)
		}
		if simReqs := sim.Requests(t); indexOf(simReqs, resetPath) < 0 || indexOf(simReqs, "POST "+volumesPathOf(sim)) < indexOf(simReqs, resetPath) {
			t.Errorf("simulator requests %v: want the reset, then the volume POST", simReqs)
		}
		// Anvil read the task after the reset, to its end.
		reqs := proxy.Requests()
		post, reset, done := indexOf(reqs, "POST "+volumesPathOf(sim)+" 202"), indexOf(reqs, resetPath+" 20"), indexOf(reqs, "GET /redfish/v1/TaskService/TaskMonitors/1 200")
		if post < 0 || reset < post || done < reset {
			t.Errorf("proxy requests %v: want the 202, the reset, then the task read done", reqs)
		}
		newID := vols[1][strings.LastIndex(vols[1], "/")+1:]
		raid := n["raid_config"].(map[string]any)
		want := []any{
			map[string]any{"id": "1", "name": "Virtual Disk 0", "controller": "1", "raid_level": "1", "size_gb": float64(446)},
			map[string]any{"id": newID, "name": "root", "controller": "1", "raid_level": "1", "size_gb": float64(100), "is_root_volume": true},
		}
		if !reflect.DeepEqual(raid["logical_disks"], want) {
			t.Errorf("raid_config %v, want logical_disks %v", raid, want)
		}

		n = cleanRAID(t, admin, id, "delete_configuration", "manageable")
		if n["last_error"] != nil {
			t.Fatalf("delete_configuration: %v", n["last_error"])
		}
		dels := proxyBodies(t, proxy, "DELETE")
		if len(dels) != 2 || dels[0]["@Redfish.OperationApplyTime"] != "OnReset" || dels[1]["@Redfish.OperationApplyTime"] != "OnReset" {
			t.Errorf("volume DELETEs %v, want two asking OnReset", dels)
		}
		// One reset for the create, one for each delete: the controller
		// takes one OnReset request at a time.
		resets := 0
		for _, r := range sim.Requests(t) {
			if strings.HasPrefix(r, resetPath) {
				resets++
			}
		}
		if resets != 3 {
			t.Errorf("simulator saw %d resets, want 3", resets)
		}
		if d := n["raid_config"].(map[string]any)["logical_disks"]; !reflect.DeepEqual(d, []any{}) {
			t.Errorf("raid_config after delete lists %v", d)
		}
		if got, _ := proxy.Resource(t, volumesPathOf(sim))["Members"].([]any); len(got) != 0 {
			t.Errorf("the BMC lists volumes %v after the delete", got)
		}
	})
}

// volumesPathOf is the simulator's system 1 volume collection.
func volumesPathOf(sim *bmctest.Redfish) string { return sim.SystemPath("1") + "/Storage/1/Volumes" }

// TestRAIDDellJob: an iDRAC answers the create 202 with
// Location /redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_123, a job that
// builds the volume when it completes. The collection supports Immediate,
// which Anvil picks as Ironic does, so nothing is rebooted; Anvil follows
// the job to Completed, then reads the volumes: raid_config has the
// volume the BMC built, never JID_123.
func TestRAIDDellJob(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		proxy := bmctest.StartRAIDProxy(t, sim, bmctest.RAIDMode{ApplyTimes: []string{"OnReset", "Immediate"}, Job: true})
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		id := raidNodeAt(t, admin, proxy.DriverInfo())

		n := cleanRAID(t, admin, id, "create_configuration", "manageable")
		if n["last_error"] != nil {
			t.Fatalf("create_configuration: %v", n["last_error"])
		}
		if posts := proxyBodies(t, proxy, "POST"); len(posts) != 1 || posts[0]["@Redfish.OperationApplyTime"] != "Immediate" {
			t.Errorf("volume POSTs %v, want one asking Immediate", posts)
		}
		reqs := proxy.Requests()
		jobReads := 0
		for _, r := range reqs {
			if r == "GET /redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_123 200" {
				jobReads++
			}
		}
		// The job is Scheduled on its first read and Completed on its
		// second, when the simulator builds the volume.
		if jobReads != 2 {
			t.Errorf("job read %d times, want until Completed (2): %v", jobReads, reqs)
		}
		if i := indexOf(reqs, resetPath); i >= 0 {
			t.Errorf("an Immediate request rebooted the node: %v", reqs)
		}
		vols := simVolumes(t, sim)
		if len(vols) != 2 {
			t.Fatalf("simulator volumes %v", vols)
		}
		newID := vols[1][strings.LastIndex(vols[1], "/")+1:]
		disks := n["raid_config"].(map[string]any)["logical_disks"].([]any)
		if len(disks) != 2 || disks[1].(map[string]any)["id"] != newID || disks[1].(map[string]any)["is_root_volume"] != true {
			t.Errorf("raid_config disks %v, want the simulator's new volume %s as root", disks, newID)
		}
		if strings.Contains(mustJSON(t, n["raid_config"]), "JID_") {
			t.Errorf("raid_config names the job: %v", n["raid_config"])
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRAIDTaskException: a task ending in Exception fails the step with
// Anvil's words in last_error and the BMC's message in the history
// detail; raid_config stays as it was and the BMC built nothing.
func TestRAIDTaskException(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t)
		const said = "Physical disk Disk.Bay.0 is not ready for RAID"
		proxy := bmctest.StartRAIDProxy(t, sim, bmctest.RAIDMode{ApplyTimes: []string{"Immediate"}, Fail: said})
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		id := raidNodeAt(t, admin, proxy.DriverInfo())
		before := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["raid_config"]

		n := cleanRAID(t, admin, id, "create_configuration", "clean failed")
		if want := "Step raid.create_configuration failed: the BMC answered with an error: the RAID task ended in Exception (TaskStatus Critical)"; n["last_error"] != want {
			t.Errorf("last_error %q, want %q", n["last_error"], want)
		}
		if !reflect.DeepEqual(n["raid_config"], before) {
			t.Errorf("raid_config %v after the failed task, want %v", n["raid_config"], before)
		}
		if vols := simVolumes(t, sim); len(vols) != 1 {
			t.Errorf("simulator volumes %v after the failed task", vols)
		}
		if posts := proxyBodies(t, proxy, "POST"); len(posts) != 1 {
			t.Errorf("volume POSTs %v, want one", posts)
		}
		got, err := db.NodeEvent.Query().Where(nodeevent.DetailContains(said)).Count(context.Background())
		if err != nil || got != 1 {
			t.Errorf("%d history events carry the BMC's message (%v), want 1", got, err)
		}
	})
}

// TestRAIDLocationNotAVolume: a BMC that builds the volume at once but
// answers 201 with a Location naming a job has the job taken for no
// volume: raid_config records the volume the BMC lists, with the root
// flag asked for.
func TestRAIDLocationNotAVolume(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		proxy := bmctest.StartRAIDProxy(t, sim, bmctest.RAIDMode{Location: "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_456"})
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		id := raidNodeAt(t, admin, proxy.DriverInfo())

		n := cleanRAID(t, admin, id, "create_configuration", "manageable")
		if n["last_error"] != nil {
			t.Fatalf("create_configuration: %v", n["last_error"])
		}
		// No apply time is advertised, so none is asked for.
		if posts := proxyBodies(t, proxy, "POST"); len(posts) != 1 || posts[0]["@Redfish.OperationApplyTime"] != nil {
			t.Errorf("volume POSTs %v, want one without an apply time", posts)
		}
		vols := simVolumes(t, sim)
		if len(vols) != 2 {
			t.Fatalf("simulator volumes %v", vols)
		}
		newID := vols[1][strings.LastIndex(vols[1], "/")+1:]
		disks := n["raid_config"].(map[string]any)["logical_disks"].([]any)
		if len(disks) != 2 || disks[1].(map[string]any)["id"] != newID || disks[1].(map[string]any)["is_root_volume"] != true {
			t.Errorf("raid_config disks %v, want the simulator's new volume %s as root", disks, newID)
		}
		if strings.Contains(mustJSON(t, n["raid_config"]), "JID_") {
			t.Errorf("raid_config names the job: %v", n["raid_config"])
		}
	})
}
