package api_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// failedAs checks a run that failed in the agent: the failed state, the
// step named, the machine off, the agent forgotten; clean and service
// failures also put the node into maintenance with Ironic's fault.
func failedAs(t *testing.T, c *servertest.Client, id, state, step, fault string) map[string]any {
	t.Helper()
	n := c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
	if n["provision_state"] != state {
		t.Fatalf("state %v, want %s (%v)", n["provision_state"], state, n["last_error"])
	}
	if e, _ := n["last_error"].(string); !strings.Contains(e, step) {
		t.Errorf("last_error %q does not name %s", e, step)
	}
	if n["power_state"] != "power off" {
		t.Errorf("%s left power %v", state, n["power_state"])
	}
	if fault != "" && (n["maintenance"] != true || n["fault"] != fault) {
		t.Errorf("%s: maintenance %v fault %v, want maintenance with %q", state, n["maintenance"], n["fault"], fault)
	}
	if fault == "" && n["maintenance"] != false {
		t.Errorf("%s set maintenance: %v", state, n["maintenance_reason"])
	}
	if dii := n["driver_internal_info"].(map[string]any); dii["agent_url"] != nil || dii["agent_secret_token"] != nil {
		t.Errorf("the agent is still known after %s: %v", state, dii)
	}
	return n
}

// waitAny polls until the node is in one of states.
func waitAny(t *testing.T, c *servertest.Client, id string, states ...string) map[string]any {
	t.Helper()
	var n map[string]any
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n = c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if slices.Contains(states, n["provision_state"].(string)) && n["target_provision_state"] == nil {
			return n
		}
	}
	t.Fatalf("node stayed %v (%v), want one of %v", n["provision_state"], n["last_error"], states)
	return nil
}

// TestAgentRunsForTenantsAndFailures: a lessee member runs a public
// runbook with an in-band step; disable_ramdisk refuses one; and each way
// an agent run fails ends in the right failed state, naming the step,
// with the machine off, the agent's logs kept where it could give them,
// and maintenance with a fault for cleaning.
func TestAgentRunsForTenantsAndFailures(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		// The boot timeout bounds the real agent's start too: 25 s was too
		// short for it on two cores under the suite's load (a load
		// average of 10), so the never-booting machine below waits 60 s.
		rg := newRig(t, setting, conductor.AgentConfig{BootTimeout: 60 * time.Second, HeartbeatTimeout: 10 * time.Second}, 2)
		admin, lessee := rg.cs["system-admin"], rg.cs["lessee-member"]
		id, disk := rg.node(t, 0, "m1", true, []string{"CUSTOM_WIPE"})
		kept := func() int {
			l, _ := filepath.Glob(filepath.Join(rg.logs, id+"_*.tar.gz"))
			return len(l)
		}

		// A public runbook, run by the lessee's member, wipes the disk in
		// the agent.
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_WIPE", "public": true,
			"steps": []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata", "order": 1}}}), 201)
		run(t, "sgdisk", "-o", "-n", "1:2048:+16M", disk)
		provision(t, lessee, id, map[string]any{"target": "clean", "runbook": "CUSTOM_WIPE"}, 202)
		n := waitFor(t, admin, id, "manageable", rg.rack)
		if p := partitions(t, disk); len(p) != 0 {
			t.Errorf("the runbook left partitions %v", p)
		}
		if n["power_state"] != "power off" || n["maintenance"] != false {
			t.Errorf("after the runbook: power %v maintenance %v", n["power_state"], n["maintenance"])
		}
		if s := startedSteps(t, admin, id); !slices.Contains(s, "deploy.erase_devices_metadata") {
			t.Errorf("steps started: %v", s)
		}

		// disable_ramdisk refuses an in-band step before anything starts.
		r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "disable_ramdisk": true,
			"clean_steps": steps(step("deploy", "erase_devices_metadata", nil))})
		if r.Status != 400 || !strings.Contains(r.Fault(t), "disable_ramdisk") {
			t.Errorf("disable_ramdisk with an in-band step: %d %s", r.Status, r.Body)
		}

		// A step the agent fails (burn-in without stress-ng on the
		// machine): clean failed, maintenance with fault, logs kept.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "burnin_cpu", nil))}, 202)
		waitAny(t, admin, id, "clean failed")
		failedAs(t, admin, id, "clean failed", "deploy.burnin_cpu", "clean failure")
		if kept() != 1 {
			t.Errorf("agent logs kept: %d, want 1", kept())
		}
		// The operator's way back: out of maintenance, manage, provide.
		mustStatus(t, admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitFor(t, admin, id, "available", rg.rack)

		// A checksum that does not match: deploy failed, no maintenance.
		deploy := func(src, sum string) {
			t.Helper()
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info", "value": map[string]any{
				"image_source": src, "image_os_hash_algo": "sha256", "image_os_hash_value": sum}}}), 200)
			provision(t, admin, id, map[string]any{"target": "active"}, 202)
		}
		deploy(rg.im.URL+rg.im.Raw, strings.Repeat("ab", 32))
		waitAny(t, admin, id, "deploy failed")
		failedAs(t, admin, id, "deploy failed", "deploy.write_image", "")
		if kept() != 2 {
			t.Errorf("agent logs kept: %d, want 2", kept())
		}

		// The agent dies while it writes: deploy failed once it has been
		// silent for the heartbeat timeout.
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := make([]byte, 256<<10)
			for range 256 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		}))
		defer slow.Close()
		writes := func() int {
			n := 0
			for _, s := range startedSteps(t, admin, id) {
				if s == "deploy.write_image" {
					n++
				}
			}
			return n
		}
		before := writes()
		deploy(slow.URL+"/slow.raw", rg.im.RawSum)
		for deadline := time.Now().Add(2 * time.Minute); writes() == before; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("write_image never started")
			}
		}
		time.Sleep(3 * time.Second)
		rg.rack.Kill(rg.sim.Systems[0].ID)
		waitAny(t, admin, id, "deploy failed")
		failedAs(t, admin, id, "deploy failed", "deploy.write_image", "")

		// A machine that never boots the agent: clean failed after the
		// boot timeout, with maintenance and the machine off.
		other, _ := rg.node(t, 1, "m2", false, nil)
		provision(t, admin, other, map[string]any{"target": "provide"}, 202)
		waitAny(t, admin, other, "clean failed")
		n = failedAs(t, admin, other, "clean failed", "did not call back", "clean failure")
		if !strings.Contains(n["last_error"].(string), "deploy.erase_devices_metadata") {
			t.Errorf("boot timeout's last_error %q does not name the step", n["last_error"])
		}
	})
}
