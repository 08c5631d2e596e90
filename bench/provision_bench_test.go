package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// provMachines is how many machines the issue asks to provision at once.
const provMachines = 10

// BenchmarkAgentProvision provisions 10 machines at once with the real
// ironic-python-agent, each on its own loop disk, booted by redfish-sim's
// power hook from virtual media: provide (automated cleaning in the
// agent) to available, then active (the agent writes a 32 MiB raw image,
// sha256 checked, and a config drive) to active, then deleted (the tear
// down's cleaning) back to available and manage, so that every
// iteration is the same cycle. It reports the mean wall time per node of
// each phase (from its request to the node's arrival, all 10 running at
// once), the wall time of provide and active for all 10, and Anvil's CPU
// time per node over those two phases. The conductor runs with its
// production defaults (2 s command-status poll), as an operator's would.
//
// Each iteration takes minutes: run it once.
//
//	go test -run '^$' -bench AgentProvision -benchtime 1x ./bench/
func BenchmarkAgentProvision(b *testing.B) {
	agenttest.Need(b)
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			srv := servertest.Start(b, anvil.Options{Database: storetest.Setting(b, backend), AuthNone: true, AccessLog: "off",
				Conductor: conductor.Config{Agent: conductor.AgentConfig{LogDir: b.TempDir()}}})
			c := srv.Client()
			rack := agenttest.NewRack(b, srv.URL)
			// The agents serve plain HTTP: with auto-TLS every agent on
			// this host writes its certificate and key to the same
			// /run/ironic-python-agent/agent.{crt,key} (a real machine
			// has its own /run), so agents booting together overwrite
			// each other's, and one dies loading a key that is not its
			// certificate's (ssl.SSLError: PEM lib) while its node waits
			// out the 30-minute boot timeout. Anvil's TLS handshakes to
			// the agents are therefore not in the CPU figure.
			sim := bmctest.StartRedfish(b, append(rack.Env(), fmt.Sprintf("SIM_SYSTEMS=%d", provMachines),
				"OS_DEFAULT__ENABLE_AUTO_TLS=false")...)
			if len(sim.Systems) != provMachines {
				b.Fatalf("redfish-sim has %d systems, want %d", len(sim.Systems), provMachines)
			}
			im := agenttest.ServeImage(b, "ANVIL-IMAGE-MARKER")
			iso := servertest.ServeISO(b)
			ids, disks := make([]string, provMachines), make([]string, provMachines)
			for i, sys := range sim.Systems {
				disks[i] = rack.Machine(b, sys.ID)
				r := c.Do(b, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("bench-%02d", i), "driver": "redfish",
					"boot_interface": "redfish-virtual-media",
					"driver_info": map[string]any{"redfish_address": sim.URL, "redfish_system_id": sim.SystemPath(sys.ID),
						"redfish_username": bmctest.RedfishUser, "redfish_password": bmctest.RedfishPassword,
						"redfish_verify_ca": sim.CAPEM, "deploy_iso": iso}})
				if r.Status != 201 {
					b.Fatalf("enrol %s: %d %s", sys.ID, r.Status, r.Body)
				}
				ids[i] = r.JSON(b)["uuid"].(string)
				for _, mac := range sys.MACs {
					if r := c.Do(b, "POST", "/v1/ports", map[string]any{"node_uuid": ids[i], "address": mac}); r.Status != 201 {
						b.Fatalf("port %s: %d %s", mac, r.Status, r.Body)
					}
				}
			}
			// The nodes go manageable together (power credentials checked),
			// before the clock starts.
			if err := provAll(c, rack, sim, ids, map[string]any{"target": "manage"}, "manageable", nil); err != nil {
				b.Fatal(err)
			}
			var provide, deploy, teardown, wall time.Duration
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				// RUSAGE_SELF is this process: Anvil (API, conductor,
				// database driver; SQLite in-process) plus the benchmark's
				// own polling, 10 GETs every 250 ms. The agents, the
				// simulator and PostgreSQL are other processes and are not
				// counted.
				start, cpu0 := time.Now(), cpuTime()
				if err := provAll(c, rack, sim, ids, map[string]any{"target": "provide"}, "available", &provide); err != nil {
					b.Fatal(err)
				}
				for i, id := range ids {
					if r := c.Do(b, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info",
						"value": map[string]any{"image_source": im.URL + im.Raw, "image_os_hash_algo": "sha256", "image_os_hash_value": im.RawSum}}}); r.Status != 200 {
						b.Fatalf("node %d instance_info: %d %s", i, r.Status, r.Body)
					}
				}
				active := map[string]any{"target": "active",
					"configdrive": map[string]any{"meta_data": map[string]any{"hostname": "bench"}, "user_data": "#cloud-config\n"}}
				if err := provAll(c, rack, sim, ids, active, "active", &deploy); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(start)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				// The work is checked, so that a broken deploy cannot pass
				// for a fast one: the image's first partition, marker
				// included, on every machine's disk.
				const part = 2048 * 512
				for i, disk := range disks {
					got := provReadAt(b, disk, part, 8<<20)
					if !bytes.Equal(got, im.RawData[part:part+8<<20]) || !bytes.Contains(got, []byte("ANVIL-IMAGE-MARKER")) {
						b.Fatalf("node %d: disk %s does not hold the image's bytes", i, disk)
					}
				}
				// Tear down (timed apart, outside the CPU figure), and back
				// to manageable for the next iteration's provide.
				if err := provAll(c, rack, sim, ids, map[string]any{"target": "deleted"}, "available", &teardown); err != nil {
					b.Fatal(err)
				}
				for i, disk := range disks {
					if hdr := provReadAt(b, disk, 512, 8); string(hdr) == "EFI PART" {
						b.Fatalf("node %d: the tear down left a partition table on %s", i, disk)
					}
				}
				if err := provAll(c, rack, sim, ids, map[string]any{"target": "manage"}, "manageable", nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			n := float64(b.N * provMachines)
			b.ReportMetric(provide.Seconds()/n, "s/node-provide")
			b.ReportMetric(deploy.Seconds()/n, "s/node-deploy")
			b.ReportMetric(teardown.Seconds()/n, "s/node-teardown")
			b.ReportMetric(wall.Seconds()/float64(b.N), "s/10-provide+deploy")
			b.ReportMetric(cpu.Seconds()/n, "cpu-s/node")
		})
	}
}

// provAll asks every node for target at once, waits until each reaches
// state, and adds each node's time from its request to its arrival to
// sum (when not nil). A node in a failed state ends the wait with its
// last_error and the end of its agent's log.
func provAll(c *servertest.Client, rack *agenttest.Rack, sim *bmctest.Redfish, ids []string, body map[string]any, state string, sum *time.Duration) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i, id := range ids {
		wg.Go(func() {
			took, err := provOne(c, id, body, state)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("node %d (%s): %v\n%s", i, id, err, rack.Log(sim.Systems[i].ID, 3000)))
			} else if sum != nil {
				*sum += took
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%s: %d of %d nodes failed:\n%s", state, len(errs), len(ids), strings.Join(errs, "\n"))
	}
	return nil
}

// provOne moves one node and times it. It uses net/http directly, not
// servertest.Client, because it runs on its own goroutine, where b.Fatal
// may not be called.
func provOne(c *servertest.Client, id string, body map[string]any, state string) (time.Duration, error) {
	start := time.Now()
	if st, raw, err := provCall(c, "PUT", "/v1/nodes/"+id+"/states/provision", body, nil); err != nil || st != 202 {
		return 0, fmt.Errorf("provision %v: %d %v %s", body["target"], st, err, raw)
	}
	var n struct {
		ProvisionState       string  `json:"provision_state"`
		TargetProvisionState *string `json:"target_provision_state"`
		Reservation          *string `json:"reservation"`
		LastError            *string `json:"last_error"`
	}
	for deadline := start.Add(20 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if st, raw, err := provCall(c, "GET", "/v1/nodes/"+id, nil, &n); err != nil || st != 200 {
			return 0, fmt.Errorf("get: %d %v %s", st, err, raw)
		}
		if n.ProvisionState == state && n.TargetProvisionState == nil && n.Reservation == nil {
			return time.Since(start), nil
		}
		if strings.HasSuffix(n.ProvisionState, "failed") {
			return 0, fmt.Errorf("went to %s: %v", n.ProvisionState, deref(n.LastError))
		}
	}
	return 0, fmt.Errorf("did not reach %s in 20 minutes: %s %v", state, n.ProvisionState, deref(n.LastError))
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

var provHTTP = &http.Client{Timeout: 30 * time.Second}

func provCall(c *servertest.Client, method, path string, body, into any) (int, []byte, error) {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, c.Base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := provHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err == nil && into != nil && resp.StatusCode < 300 {
		err = json.Unmarshal(out, into)
	}
	return resp.StatusCode, out, err
}

func provReadAt(b *testing.B, disk string, off int64, n int) []byte {
	b.Helper()
	f, err := os.Open(disk)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		b.Fatal(err)
	}
	return buf
}
