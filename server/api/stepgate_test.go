package api_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestDeployStepsFirmwareFlash: a lessee admin's rebuild carrying a
// firmware.update deploy step is refused by
// baremetal:node:set_provision_state:deploy_steps before anything runs:
// the node stays active and the BMC hears no update. The same request
// from a system admin flashes the simulator's BIOS, so the refusal is
// what kept it unchanged.
func TestDeployStepsFirmwareFlash(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1")
		iso := servertest.ServeISO(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "flash-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"),
			"owner": "own", "lessee": "les", "deploy_interface": "ramdisk", "boot_interface": "redfish-virtual-media",
			// No agent media: about steps, not wipes, so it opts out of
			// automated cleaning rather than fail it closed.
			"automated_clean": false})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []any{map[string]any{"op": "add", "path": "/instance_info/boot_iso", "value": iso}}), 200)
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")

		bios := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]
		flash := map[string]any{"target": "rebuild", "deploy_steps": []any{map[string]any{"interface": "firmware", "step": "update", "priority": 150,
			"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "http://127.0.0.1:9/evil.bin"}}}}}}
		if f := provision(t, clients["lessee-admin"], id, flash, 403).Fault(t); !strings.Contains(f, "deploy_steps") {
			t.Errorf("403 fault %q does not name the deploy_steps rule", f)
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] != "active" || n["target_provision_state"] != nil {
			t.Errorf("after the refused rebuild: %v → %v", n["provision_state"], n["target_provision_state"])
		}
		for _, b := range sim.Bodies(t) {
			if strings.Contains(b, "evil.bin") {
				t.Errorf("the BMC was sent the firmware URL: %s", b)
			}
		}
		if hist := eventsOf(t, admin, id); strings.Contains(hist, "firmware.update") {
			t.Errorf("history shows the firmware step:\n%s", hist)
		}

		provision(t, admin, id, flash, 202)
		if n := waitState(t, admin, id, "active"); n["last_error"] != nil {
			t.Fatalf("the system admin's rebuild: %v", n["last_error"])
		}
		if now := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]; now == bios {
			t.Errorf("the system admin's flash left the BIOS at %v", now)
		}
	})
}

// stepRoute is one way a caller hands Anvil steps; run sends them (the
// node prepared in state) and returns the status.
type stepRoute struct {
	name  string
	state string // the node's state first; "" for no node
	// viaRunbook: the route runs the node owner's allowed runbooks only.
	viaRunbook bool
	run        func(t *testing.T, c *servertest.Client, node string, i int, st map[string]any) *servertest.Response
}

func deployStep(st map[string]any) []any {
	m := map[string]any{"priority": 150, "args": map[string]any{}}
	for k, v := range st {
		m[k] = v
	}
	return []any{m}
}

var stepRoutes = []stepRoute{
	{"clean_steps", "manageable", false, func(t *testing.T, c *servertest.Client, n string, _ int, st map[string]any) *servertest.Response {
		return c.Do(t, "PUT", "/v1/nodes/"+n+"/states/provision", map[string]any{"target": "clean", "clean_steps": []any{st}})
	}},
	{"service_steps", "active", false, func(t *testing.T, c *servertest.Client, n string, _ int, st map[string]any) *servertest.Response {
		return c.Do(t, "PUT", "/v1/nodes/"+n+"/states/provision", map[string]any{"target": "service", "service_steps": []any{st}})
	}},
	{"deploy_steps (active)", "available", false, func(t *testing.T, c *servertest.Client, n string, _ int, st map[string]any) *servertest.Response {
		return c.Do(t, "PUT", "/v1/nodes/"+n+"/states/provision", map[string]any{"target": "active", "deploy_steps": deployStep(st)})
	}},
	{"deploy_steps (rebuild)", "active", false, func(t *testing.T, c *servertest.Client, n string, _ int, st map[string]any) *servertest.Response {
		return c.Do(t, "PUT", "/v1/nodes/"+n+"/states/provision", map[string]any{"target": "rebuild", "deploy_steps": deployStep(st)})
	}},
	{"deploy template", "", false, func(t *testing.T, c *servertest.Client, _ string, i int, st map[string]any) *servertest.Response {
		return c.Do(t, "POST", "/v1/deploy_templates", map[string]any{"name": fmt.Sprintf("CUSTOM_TPL_%d", i), "steps": deployStep(st)})
	}},
	{"runbook", "manageable", true, func(t *testing.T, c *servertest.Client, n string, _ int, st map[string]any) *servertest.Response {
		return c.Do(t, "PUT", "/v1/nodes/"+n+"/states/provision", map[string]any{"target": "clean", "runbook": runbookFor(st)})
	}},
	{"campaign", "manageable", true, func(t *testing.T, c *servertest.Client, n string, i int, st map[string]any) *servertest.Response {
		return c.Do(t, "POST", "/v1/campaigns", map[string]any{"name": fmt.Sprintf("gate-%d", i), "runbook": runbookFor(st), "nodes": []string{n}})
	}},
}

// The steps the table sends: one that outlives a lease and one that
// does not, each also published as a runbook named after it.
var (
	lastingStep  = map[string]any{"interface": "bios", "step": "factory_reset"}
	harmlessStep = map[string]any{"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 0}}
)

func runbookFor(st map[string]any) string {
	if st["interface"] == "bios" {
		return "CUSTOM_GATE_LASTING"
	}
	return "CUSTOM_GATE_HARMLESS"
}

// projectPersonas are the project personas that see the node (a lessee's
// service user, like another project, gets its 404).
var projectPersonas = []string{"owner-admin", "owner-manager", "owner-member", "owner-reader", "owner-service",
	"lessee-admin", "lessee-manager", "lessee-member", "lessee-reader"}

// TestStepRoutesOneGate walks every route by which steps reach a node ×
// every project persona, with a policy.d that opens every rule these
// routes check: what is left deciding is conductor.LeaseSafe. A step that
// outlives a lease (bios.factory_reset) is a 403 by every route but a
// runbook (and a campaign, which runs runbooks) the node's owner allowed
// with a trait; a step that does not is accepted by every route, so the
// refusals are the gate's and nothing else's.
func TestStepRoutesOneGate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		dir := t.TempDir()
		open := ""
		for _, rule := range []string{"baremetal:node:set_provision_state", "baremetal:node:set_provision_state:clean_steps",
			"baremetal:node:set_provision_state:service_steps", "baremetal:node:set_provision_state:deploy_steps",
			"baremetal:node:set_provision_state:runbook", "baremetal:runbook:use", "baremetal:deploy_template:create", "baremetal:deploy_template:get",
			"baremetal:campaign:create"} {
			open += fmt.Sprintf("%q: \"@\"\n", rule)
		}
		if err := os.WriteFile(filepath.Join(dir, "10-open.yaml"), []byte(open), 0o644); err != nil {
			t.Fatal(err)
		}
		_, clients := startLocal(t, setting, server.Options{PolicyDir: dir, PolicyOverrideEnabled: true})
		admin := clients["system-admin"]
		for _, st := range []map[string]any{lastingStep, harmlessStep} {
			rb := map[string]any{"name": runbookFor(st), "public": true, "steps": []any{map[string]any{"order": 1}}}
			for k, v := range st {
				rb["steps"].([]any)[0].(map[string]any)[k] = v
			}
			mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", rb), 201)
		}
		i := 0
		for _, route := range stepRoutes {
			for _, who := range projectPersonas {
				for _, st := range []map[string]any{lastingStep, harmlessStep} {
					i++
					node := ""
					if route.state != "" {
						node = gateNode(t, admin, i, route.state)
					}
					r := route.run(t, clients[who], node, i, st)
					refused := st["interface"] == "bios" && !route.viaRunbook
					switch {
					case refused && (r.Status != 403 || !strings.Contains(r.Fault(t), "outlives a lease")):
						t.Errorf("%s by %s, %s.%s: %d %s, want the lease gate's 403", route.name, who, st["interface"], st["step"], r.Status, r.Body)
					case !refused && r.Status/100 != 2:
						t.Errorf("%s by %s, %s.%s: %d %s, want it accepted", route.name, who, st["interface"], st["step"], r.Status, r.Body)
					}
				}
			}
		}
	})
}

// gateNode is a fresh fake node owned by "own", leased to "les", carrying
// both gate runbooks' traits, in state.
func gateNode(t *testing.T, admin *servertest.Client, i int, state string) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("gate-%d", i), "driver": "fake-hardware", "owner": "own", "lessee": "les"})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits", map[string]any{"traits": []string{"CUSTOM_GATE_LASTING", "CUSTOM_GATE_HARMLESS"}}), 204)
	for _, step := range [][2]string{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}} {
		provision(t, admin, id, map[string]any{"target": step[0]}, 202)
		waitState(t, admin, id, step[1])
		if step[1] == state {
			break
		}
	}
	return id
}
