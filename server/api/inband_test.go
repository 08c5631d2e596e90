package api_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/GehirnInc/crypt"
	_ "github.com/GehirnInc/crypt/sha512_crypt"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// partitions lists the start sectors of the loop disk's GPT partitions,
// read from the table itself: none when the table is gone.
func partitions(t *testing.T, disk string) []int64 {
	t.Helper()
	hdr := readAt(t, disk, 512, 92)
	if string(hdr[:8]) != "EFI PART" {
		return nil
	}
	entries := int64(binary.LittleEndian.Uint64(hdr[72:80]))
	count := int(binary.LittleEndian.Uint32(hdr[80:84]))
	size := int(binary.LittleEndian.Uint32(hdr[84:88]))
	table := readAt(t, disk, entries*512, count*size)
	var out []int64
	for i := range count {
		e := table[i*size : (i+1)*size]
		if !bytes.Equal(e[:16], make([]byte, 16)) {
			out = append(out, int64(binary.LittleEndian.Uint64(e[32:40])))
		}
	}
	return out
}

func readAt(t *testing.T, disk string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// hasConfigDrive tells whether a partition of disk holds an ISO 9660
// volume labelled config-2, as cloud-init looks for it.
func hasConfigDrive(t *testing.T, disk string) bool {
	for _, start := range partitions(t, disk) {
		pvd := readAt(t, disk, start*512+16*2048, 48)
		if string(pvd[1:6]) == "CD001" && strings.TrimSpace(string(pvd[40:48])) == "config-2" {
			return true
		}
	}
	return false
}

// waitFor polls the node until it reaches state (failing on a failed
// state), for as long as an agent boot and its work take.
func waitFor(t *testing.T, c *servertest.Client, id, state string, rack *agenttest.Rack) map[string]any {
	t.Helper()
	var n map[string]any
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n = c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] == state && n["target_provision_state"] == nil {
			return n
		}
		if s, _ := n["provision_state"].(string); strings.HasSuffix(s, "failed") && s != state {
			t.Fatalf("node went to %s: %v\n%s", s, n["last_error"], rack.Log("1", 5000))
		}
	}
	t.Fatalf("node did not reach %s: %v %v\n%s", state, n["provision_state"], n["last_error"], rack.Log("1", 5000))
	return nil
}

// rig is Anvil with a redfish-sim whose systems boot the real agent.
type rig struct {
	srv  *servertest.Server
	cs   map[string]*servertest.Client
	rack *agenttest.Rack
	sim  *bmctest.Redfish
	im   *agenttest.Image
	logs string
	// boot, when set, is the driver_info that boots nodes' agent in
	// place of a deploy_iso.
	boot map[string]any
}

func newRig(t *testing.T, setting string, ac conductor.AgentConfig, systems int) *rig {
	t.Helper()
	return newRigWith(t, setting, server.Options{Conductor: conductor.Config{Agent: ac}}, systems)
}

// newRigWith is newRig with the server's options.
func newRigWith(t *testing.T, setting string, o server.Options, systems int) *rig {
	t.Helper()
	agenttest.Need(t)
	rg := &rig{im: agenttest.ServeImage(t, "ANVIL-IMAGE-MARKER")}
	o.Conductor.Agent.Poll = 500 * time.Millisecond
	if o.Conductor.Agent.Wipe == "" {
		// Tests not about wipe depth wipe metadata only: the default
		// express overwrites the whole 5 GiB loop disk, a minute per
		// cleaning. TestWipePolicies covers every policy.
		o.Conductor.Agent.Wipe = conductor.WipeMetadata
	}
	rg.srv, rg.cs = startLocal(t, setting, o)
	// No --agent-log-dir: the logs go where they go by default.
	rg.logs = rg.srv.Cond.AgentLogs().Dir
	rg.rack = agenttest.NewRack(t, rg.srv.URL)
	// The agent retries a failed download 9 times 10 s apart; once
	// is enough here (oslo.config reads OS_<group>__<option>).
	rg.sim = bmctest.StartRedfish(t, append(rg.rack.Env(), fmt.Sprintf("SIM_SYSTEMS=%d", systems),
		"OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRIES=0", "OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRY_INTERVAL=1")...)
	return rg
}

// node enrols system i as a manageable redfish node owned by "own" and
// leased to "les" that boots the agent from virtual media; with machine
// the system gets a loop disk (returned) and so boots the agent.
func (rg *rig) node(t *testing.T, i int, name string, machine bool, traits []string) (id, disk string) {
	t.Helper()
	admin, sys := rg.cs["system-admin"], rg.sim.Systems[i]
	if machine {
		disk = rg.rack.Machine(t, sys.ID)
	}
	info := map[string]any{"redfish_address": rg.sim.URL, "redfish_system_id": rg.sim.SystemPath(sys.ID),
		"redfish_username": "admin", "redfish_password": "password", "redfish_verify_ca": rg.sim.CAPEM}
	if rg.boot == nil {
		info["deploy_iso"] = servertest.ServeISO(t)
	}
	for k, v := range rg.boot {
		info[k] = v
	}
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "redfish", "owner": "own", "lessee": "les",
		"boot_interface": "redfish-virtual-media", "rescue_interface": "agent", "driver_info": info})
	mustStatus(t, r, 201)
	id = r.JSON(t)["uuid"].(string)
	for _, mac := range sys.MACs {
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}), 201)
	}
	for _, tr := range traits {
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/"+tr, nil), 204)
	}
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	return id, disk
}

// TestAgentLifecycle is the lease lifecycle with the real agent on a loop
// disk, driven through the API by the owner project's member as Ironic's
// default policy allows: provide wipes the disk, active writes a raw
// image with a config drive, deleted wipes it again, a qcow2 image
// deploys, and a failed download ends in deploy failed with the agent's
// logs kept and the machine off.
func TestAgentLifecycle(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg := newRig(t, setting, conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second}, 1)
		admin, member, rack, im, logs := rg.cs["system-admin"], rg.cs["owner-member"], rg.rack, rg.im, rg.logs
		sys := rg.sim.Systems[0]
		id, disk := rg.node(t, 0, "m1", true, nil)
		// provide: automated cleaning in the agent wipes the disk's
		// partition table, and the machine ends powered off.
		run(t, "sgdisk", "-o", "-n", "1:2048:+16M", disk)
		if len(partitions(t, disk)) != 1 {
			t.Fatal("could not partition the loop disk")
		}
		provision(t, member, id, map[string]any{"target": "provide"}, 202)
		n := waitFor(t, admin, id, "available", rack)
		if p := partitions(t, disk); len(p) != 0 {
			t.Errorf("after automated cleaning the disk still has partitions %v", p)
		}
		if n["power_state"] != "power off" || n["maintenance"] != false {
			t.Errorf("after cleaning: power %v maintenance %v", n["power_state"], n["maintenance"])
		}
		if dii := internal(t, admin, id); dii["agent_url"] != nil || dii["agent_secret_token"] != nil {
			t.Errorf("the agent is still known after cleaning: %v", dii)
		}
		if !rack.Stopped(sys.ID, 20*time.Second) {
			t.Error("the agent still runs after cleaning")
		}

		// active: the raw image's bytes and a config-2 partition on disk,
		// the disk the persistent boot device, the machine on.
		deployImage := func(name, sum string) {
			t.Helper()
			mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
				{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": im.URL + name,
					"image_os_hash_algo": "sha256", "image_os_hash_value": sum}}}), 200)
			provision(t, member, id, map[string]any{"target": "active",
				"configdrive": map[string]any{"meta_data": map[string]any{"hostname": "tenant-1"}, "user_data": "#cloud-config\n"}}, 202)
			n := waitFor(t, admin, id, "active", rack)
			// The image's first partition, marker included (its partition
			// table changed: the agent added the config drive's).
			const part = 2048 * 512
			if got := readAt(t, disk, part, 8<<20); !bytes.Equal(got, im.RawData[part:part+8<<20]) || !bytes.Contains(got, []byte("ANVIL-IMAGE-MARKER")) {
				t.Errorf("%s: the disk does not hold the image's bytes", name)
			}
			if !hasConfigDrive(t, disk) {
				t.Errorf("%s: no config-2 partition on the disk: %v", name, partitions(t, disk))
			}
			if n["power_state"] != "power on" {
				t.Errorf("%s: deployed node's power %v", name, n["power_state"])
			}
			b := admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device", nil).JSON(t)
			if b["boot_device"] != "disk" || b["persistent"] != true {
				t.Errorf("%s: boot device %v", name, b)
			}
			if !rack.Stopped(sys.ID, 20*time.Second) {
				t.Errorf("%s: the agent still runs on the deployed machine", name)
			}
			if name == im.Raw {
				rescueAndBack(t, member, admin, id, rack)
			}
			// deleted: the tear down's cleaning wipes it again.
			provision(t, member, id, map[string]any{"target": "deleted"}, 202)
			waitFor(t, admin, id, "available", rack)
			if p := partitions(t, disk); len(p) != 0 {
				t.Errorf("%s: after deleted the disk still has partitions %v", name, p)
			}
		}
		deployImage(im.Raw, im.RawSum)
		deployImage(im.QCOW2, im.QCOW2Sum)

		// An image URL that answers 404 is refused before the deploy
		// starts, naming the answer (Ironic's HEAD).
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": im.URL + "missing.raw",
				"image_os_hash_algo": "sha256", "image_os_hash_value": im.RawSum}}}), 200)
		wantFault(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "active"}), 400, "404 Not Found")
		// An image the agent cannot write (its checksum does not match)
		// ends in deploy failed naming the step, with the agent's logs
		// kept and the machine off.
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": im.URL + im.Raw,
				"image_os_hash_algo": "sha256", "image_os_hash_value": im.QCOW2Sum}}}), 200)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		n = waitFor(t, admin, id, "deploy failed", rack)
		if e, _ := n["last_error"].(string); !strings.Contains(e, "deploy.write_image") {
			t.Errorf("last_error %q does not name the step", e)
		}
		if n["power_state"] != "power off" {
			t.Errorf("failed deploy left power %v", n["power_state"])
		}
		if kept, _ := filepath.Glob(filepath.Join(logs, id+"_*.tar.gz")); len(kept) != 1 {
			t.Errorf("agent logs kept: %v", kept)
		}
	})
}

// rescuePasswordFile is where the agent writes the rescue user's hashed
// password (ironic-python-agent's rescue extension); the simulated
// machine shares the host's /etc.
const rescuePasswordFile = "/etc/ipa-rescue-config/ipa-rescue-password"

// rescueAndBack rescues a deployed node with the real agent and checks
// the agent got a hash of the tenant's password, then unrescues it.
func rescueAndBack(t *testing.T, member, admin *servertest.Client, id string, rack *agenttest.Rack) {
	t.Helper()
	dir := filepath.Dir(rescuePasswordFile)
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists on this host; the test will not overwrite it", dir)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	provision(t, member, id, map[string]any{"target": "rescue", "rescue_password": "tenant pass 1"}, 202)
	waitFor(t, admin, id, "rescue", rack)
	hash, err := os.ReadFile(rescuePasswordFile)
	if err != nil {
		t.Fatalf("the agent wrote no rescue password: %v", err)
	}
	if !strings.HasPrefix(string(hash), "$6$") || crypt.SHA512.New().Verify(string(hash), []byte("tenant pass 1")) != nil {
		t.Errorf("rescue password file holds %q, not a SHA-512 crypt of the password", hash)
	}
	if dii := internal(t, admin, id); dii["agent_url"] != nil || dii["agent_secret_token"] != nil {
		t.Errorf("the agent is still known in rescue: %v", dii)
	}
	provision(t, member, id, map[string]any{"target": "unrescue"}, 202)
	n := waitFor(t, admin, id, "active", rack)
	if n["power_state"] != "power on" {
		t.Errorf("unrescued power %v", n["power_state"])
	}
	if b := admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device", nil).JSON(t); b["boot_device"] != "disk" {
		t.Errorf("unrescued boot device %v", b)
	}
}

// TestAgentFastTrack: with fast track, cleaning leaves the agent running
// on a powered machine, and the deploy that follows reuses it: the
// machine boots the agent once for both.
func TestAgentFastTrack(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg := newRig(t, setting, conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, FastTrack: true}, 1)
		admin, member, im := rg.cs["system-admin"], rg.cs["owner-member"], rg.im
		id, disk := rg.node(t, 0, "ft", true, nil)
		boots := func() int { return strings.Count(rg.rack.Log("1", 0), "agent started") }
		provision(t, member, id, map[string]any{"target": "provide"}, 202)
		n := waitFor(t, admin, id, "available", rg.rack)
		if n["power_state"] != "power on" || !rg.rack.Running(rg.sim.Systems[0].ID) {
			t.Fatalf("after fast-track cleaning: power %v, agent running %v", n["power_state"], rg.rack.Running(rg.sim.Systems[0].ID))
		}
		if boots() != 1 {
			t.Fatalf("%d agent boots for cleaning", boots())
		}
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info", "value": map[string]any{
			"image_source": im.URL + im.Raw, "image_os_hash_algo": "sha256", "image_os_hash_value": im.RawSum}}}), 200)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		n = waitFor(t, admin, id, "active", rg.rack)
		if boots() != 1 {
			t.Errorf("the deploy booted the agent again: %d boots", boots())
		}
		if got := readAt(t, disk, 2048*512, 8<<20); !bytes.Contains(got, []byte("ANVIL-IMAGE-MARKER")) {
			t.Error("the fast-tracked deploy did not write the image")
		}
		if n["power_state"] != "power on" || !rg.rack.Stopped(rg.sim.Systems[0].ID, 20*time.Second) {
			t.Errorf("deployed: power %v, agent running %v", n["power_state"], rg.rack.Running(rg.sim.Systems[0].ID))
		}
	})
}
