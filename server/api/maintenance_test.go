package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// maintenanceNodes is how many leased machines each run covers at once.
const maintenanceNodes = 10

// TestMaintenanceRunbooks runs the demo's public runbooks, as the demo
// defines them, through the HTTP API with a lessee member's token, on 10
// leased Redfish machines at once. The BIOS runbook leaves every machine
// with its settings current, as the simulator (not Anvil's cache)
// reports; the firmware runbook flashes the image uploaded to Anvil,
// which the BMCs were told to fetch from Anvil's own download route, and
// the firmware listing shows each machine's old and new versions.
func TestMaintenanceRunbooks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, fmt.Sprintf("SIM_SYSTEMS=%d", maintenanceNodes), "SIM_UPDATE_DELAY=1")
		// Ten machines at once on one simulator process: a busy host
		// answers slower than bmcOpts' 5 s, so the default 20 s here
		// (the test is about runbooks, not BMC timeouts).
		opts := bmcOpts
		opts.Conductor.BMC.Timeout = 20 * time.Second
		srv, clients := startLocal(t, setting, opts)
		admin, member := clients["system-admin"], clients["lessee-member"]

		r := upload(t, admin, "?name="+demo.ImageName, bytes.NewReader(demo.Image()), "")
		mustStatus(t, r, 201)
		imageURL := r.JSON(t)["url"].(string)
		if !strings.HasPrefix(imageURL, srv.URL+"/firmware/") {
			t.Fatalf("image URL %s is not Anvil's download route", imageURL)
		}
		var bios []any
		for _, rb := range demo.Runbooks(imageURL) {
			if !rb.Public {
				continue
			}
			var steps []map[string]any
			for i, st := range rb.Steps {
				steps = append(steps, map[string]any{"interface": st.Interface, "step": st.Step, "args": st.Args, "order": i + 1})
				if st.Interface == "bios" {
					bios = st.Args["settings"].([]any)
				}
			}
			mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": rb.Name, "public": true, "steps": steps}), 201)
		}

		ids := make([]string, maintenanceNodes)
		for i := range ids {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("mnt-%d", i+1), "driver": "redfish",
				"driver_info": sim.DriverInfo(fmt.Sprint(i + 1)), "owner": "own", "lessee": "les"})
			mustStatus(t, r, 201)
			ids[i] = r.JSON(t)["uuid"].(string)
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+ids[i]+"/traits", map[string]any{"traits": []string{demo.BIOSRunbook, demo.FirmwareRunbook}}), 204)
			provision(t, admin, ids[i], map[string]any{"target": "manage"}, 202)
		}
		for _, id := range ids {
			waitState(t, admin, id, "manageable")
		}
		// runAll has the lessee member start runbook on every node at once
		// and waits until each is manageable again without an error.
		runAll := func(runbook string) {
			t.Helper()
			var wg sync.WaitGroup
			status := make([]int, len(ids))
			for i, id := range ids {
				wg.Go(func() {
					status[i] = member.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "runbook": runbook}).Status
				})
			}
			wg.Wait()
			for i, id := range ids {
				if status[i] != 202 {
					t.Fatalf("%s on node %d: status %d", runbook, i+1, status[i])
				}
				// Ten firmware updates queue on one simulator process.
				if n := waitStateWithin(t, member, id, "manageable", 5*time.Minute); n["last_error"] != nil {
					t.Errorf("%s on node %d: %v", runbook, i+1, n["last_error"])
				}
			}
		}

		runAll(demo.BIOSRunbook)
		for i := range ids {
			cur, pending := sim.BIOS(t, fmt.Sprint(i+1))
			for _, s := range bios {
				s := s.(map[string]any)
				if cur[s["name"].(string)] != s["value"] {
					t.Errorf("system %d: BIOS %s is %v, want %v", i+1, s["name"], cur[s["name"].(string)], s["value"])
				}
			}
			if len(pending) != 0 {
				t.Errorf("system %d: settings still pending %v", i+1, pending)
			}
		}

		before := make([]any, len(ids))
		for i := range ids {
			before[i] = sim.Resource(t, sim.SystemPath(fmt.Sprint(i+1)))["BiosVersion"]
		}
		runAll(demo.FirmwareRunbook)
		for i, id := range ids {
			now := sim.Resource(t, sim.SystemPath(fmt.Sprint(i+1)))["BiosVersion"]
			if now == before[i] {
				t.Errorf("system %d: BIOS version still %v", i+1, now)
			}
			fw := firmwareBy(t, member, id)["bios"]
			if fw == nil || fw["initial_version"] != before[i] || fw["current_version"] != now || fw["last_version_flashed"] != now {
				t.Errorf("node %d firmware listing %v, want initial %v and current and flashed %v", i+1, fw, before[i], now)
			}
		}
		// Every BMC was sent Anvil's URL for the image, and the URL serves it.
		sent := 0
		for _, b := range sim.Bodies(t) {
			if strings.Contains(b, "UpdateService.SimpleUpdate") && strings.Contains(b, `"ImageURI":"`+imageURL+`"`) {
				sent++
			}
		}
		if sent != maintenanceNodes {
			t.Errorf("%d SimpleUpdate requests named %s, want %d:\n%s", sent, imageURL, maintenanceNodes, strings.Join(sim.Bodies(t), "\n"))
		}
		resp, err := http.Get(imageURL)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, demo.Image()) {
			t.Errorf("GET %s: %d, %d bytes", imageURL, resp.StatusCode, len(got))
		}
	})
}
