package api_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAgentSoftwareRAIDAndRootHints runs software RAID steps and a deploy
// with root-device hints through the real agent. With raid_interface
// agent the RAID steps are the agent's (not the BMC's): the step list
// says so, create_configuration goes to the agent, which fails it (the
// simulated machine has one disk and no mdadm), and the run fails as an
// in-band clean does (clean failed, maintenance, fault, the agent's
// error in last_error, raid_config untouched). A root-device hint reaches the agent: one that
// matches no disk fails write_image, one naming the loop disk deploys.
func TestAgentSoftwareRAIDAndRootHints(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg := newRig(t, setting, conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second}, 1)
		admin, member := rg.cs["system-admin"], rg.cs["owner-member"]
		id, disk := rg.node(t, 0, "m1", true, nil)

		// Out of band by default (redfish): the step list shows the
		// BMC's RAID; with raid_interface agent, the agent's.
		stepInfo := func(name string) map[string]any {
			t.Helper()
			for _, s := range admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil).JSON(t)["steps"].([]any) {
				m := s.(map[string]any)
				if m["interface"].(string)+"."+m["step"].(string) == name {
					return m
				}
			}
			return nil
		}
		if s := stepInfo("raid.create_configuration"); s == nil || s["in_band"] != false {
			t.Fatalf("redfish RAID step: %v", s)
		}
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/raid_interface", "value": "agent"}}), 200)
		s := stepInfo("raid.create_configuration")
		if s == nil || s["in_band"] != true {
			t.Fatalf("agent RAID step: %v", s)
		}
		var args []string
		for _, a := range s["args"].([]any) {
			args = append(args, a.(map[string]any)["name"].(string))
		}
		if slices.Contains(args, "delete_existing") || !slices.Contains(args, "create_root_volume") {
			t.Errorf("agent RAID create_configuration args %v", args)
		}

		// disable_ramdisk refuses the agent's RAID before anything starts.
		r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "disable_ramdisk": true,
			"clean_steps": steps(step("raid", "delete_configuration", nil))})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "disable_ramdisk") {
			t.Errorf("disable_ramdisk with agent RAID: %d %s", r.Status, r.Body)
		}

		// The agent runs the step and fails it: the simulated machine
		// has no mdadm (and one disk).
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/raid", map[string]any{"logical_disks": []map[string]any{
			{"size_gb": "MAX", "raid_level": "1", "controller": "software", "is_root_volume": true}}}), 204)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("raid", "create_configuration", nil))}, 202)
		waitAny(t, admin, id, "clean failed")
		n := failedAs(t, admin, id, "clean failed", "raid.create_configuration", "clean failure")
		t.Logf("agent RAID refusal: %v", n["last_error"])
		if e, _ := n["last_error"].(string); !strings.Contains(e, "agent command clean.execute_clean_step failed") || !strings.Contains(e, "create_configuration. ") {
			t.Errorf("last_error %q does not carry the agent's refusal", e)
		}
		if st := startedSteps(t, admin, id); !slices.Contains(st, "raid.create_configuration") {
			t.Errorf("steps started: %v", st)
		}
		if rc := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["raid_config"].(map[string]any); len(rc) != 0 {
			t.Errorf("a failed create wrote raid_config %v", rc)
		}
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")

		// A root-device hint that matches no disk: the agent finds nowhere
		// to write the image.
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/properties/root_device", "value": map[string]any{"name": "/dev/no-such-disk"}},
			{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": rg.im.URL + rg.im.Raw,
				"image_os_hash_algo": "sha256", "image_os_hash_value": rg.im.RawSum}}}), 200)
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitFor(t, admin, id, "available", rg.rack)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		waitAny(t, admin, id, "deploy failed")
		failedAs(t, admin, id, "deploy failed", "deploy.write_image", "")

		// The hint naming the machine's disk: the image lands there.
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "replace", "path": "/properties/root_device", "value": map[string]any{"name": disk}}}), 200)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		waitFor(t, admin, id, "active", rg.rack)
		if got := readAt(t, disk, 2048*512, 8<<20); !strings.Contains(string(got), "ANVIL-IMAGE-MARKER") {
			t.Error("the hinted disk does not hold the image")
		}
	})
}
