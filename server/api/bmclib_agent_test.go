package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// rpcMachine is a machine whose power and boot device a bmctest.RPCWebhook
// keeps: system id of rack. When the webhook turns it on with boot
// device pxe, it does what the machine's iPXE firmware would after DHCP:
// it asks Anvil for its MAC's script (GET /ipxe/<mac>) and boots the real
// agent only when that script boots the deploy kernel, its disk
// otherwise; when the webhook turns it off, the agent stops. It boots one
// power change at a time, in order, away from the webhook's answer, as
// redfish-sim runs its power hook.
type rpcMachine struct {
	hook         *bmctest.RPCWebhook
	rack         *agenttest.Rack
	id, mac, api string
	changes      chan [2]string
	done         chan struct{}
	mu           sync.Mutex
	booted       []string // "agent" or "disk" per power on, in order
	failed       []string // what the machine could not do
	pending      int      // power changes taken by the webhook, not yet followed
}

func newRPCMachine(t *testing.T, hook *bmctest.RPCWebhook, rack *agenttest.Rack, id, mac, apiURL string) *rpcMachine {
	m := &rpcMachine{hook: hook, rack: rack, id: id, mac: mac, api: apiURL, changes: make(chan [2]string, 64), done: make(chan struct{})}
	go m.run()
	// Registered after the rack's machine, so it runs before the agent
	// and its disk go.
	t.Cleanup(func() {
		close(m.changes)
		<-m.done
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, f := range m.failed {
			t.Errorf("machine %s: %s", id, f)
		}
	})
	return m
}

// ServeHTTP is the webhook, with the machine following its power.
func (m *rpcMachine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	before, _, _, _ := m.hook.State()
	m.hook.ServeHTTP(w, r)
	if after, boot, _, _ := m.hook.State(); after != before {
		m.mu.Lock()
		m.pending++
		m.mu.Unlock()
		m.changes <- [2]string{after, boot}
	}
}

func (m *rpcMachine) run() {
	defer close(m.done)
	for c := range m.changes {
		power, boot := c[0], c[1]
		var err error
		switch {
		case power == "off":
			err = m.rack.Power(m.id, "Off", "", m.mac)
		case boot == "pxe" && m.netbootsAgent():
			m.note("agent")
			err = m.rack.Power(m.id, "On", "Pxe", m.mac)
		default:
			m.note("disk")
			err = m.rack.Power(m.id, "On", "Hdd", m.mac)
		}
		if err != nil {
			m.fail(err.Error())
		}
		m.mu.Lock()
		m.pending--
		m.mu.Unlock()
	}
}

// netbootsAgent fetches the machine's iPXE script from Anvil and says
// whether it boots a kernel (the agent) rather than exiting to the disk.
func (m *rpcMachine) netbootsAgent() bool {
	r, err := http.Get(m.api + "/ipxe/" + strings.ReplaceAll(m.mac, ":", "-"))
	if err != nil {
		m.fail("iPXE script: " + err.Error())
		return false
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !bytes.HasPrefix(b, []byte("#!ipxe")) {
		m.fail("iPXE script: " + r.Status + ": " + string(b))
		return false
	}
	return bytes.Contains(b, []byte("\nkernel ")) && bytes.Contains(b, []byte("\nboot\n"))
}

func (m *rpcMachine) note(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.booted = append(m.booted, what)
}

func (m *rpcMachine) fail(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = append(m.failed, what)
}

// boots is what the machine booted at each power on, once it has
// followed every power change the webhook took: it follows them in its
// own goroutine, which can lag the conductor (stopping an agent takes
// seconds), so a node may be active before its machine is on.
func (m *rpcMachine) boots(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m.mu.Lock()
		pending, booted := m.pending, append([]string(nil), m.booted...)
		m.mu.Unlock()
		if pending == 0 {
			return booted
		}
		if time.Now().After(deadline) {
			t.Fatalf("the machine has not followed %d power changes after a minute", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBmclibAgentDeploy is a whole agent lifecycle on a bmclib node
// whose power and boot device are an rpc webhook (signatures checked):
// the conductor sets boot device pxe through bmclib and powers the
// machine on, the machine netboots by Anvil's iPXE script into the real
// agent on a loop disk, and the node goes enroll → manageable →
// available (cleaning wipes the disk) → active (the image and a config
// drive written, the machine booted from its disk) → available again
// (undeploy's cleaning wipes it), the agent stopped at each power off.
func TestBmclibAgentDeploy(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		im := agenttest.ServeImage(t, "ANVIL-IMAGE-MARKER")
		o := bmcOpts
		o.Conductor.Agent = conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, LogDir: t.TempDir(), Poll: 500 * time.Millisecond}
		srv, clients := startLocal(t, setting, o)
		admin := atVer(clients["system-admin"], api.VerMax)
		rack := agenttest.NewRack(t, srv.URL)
		disk := rack.Machine(t, "1")
		const mac = "52:54:00:b1:00:01"
		hook := bmctest.NewRPCWebhook("rpc-agent-s3cret", "off")
		m := newRPCMachine(t, hook, rack, "1", mac, srv.URL)
		ts := httptest.NewServer(m)
		t.Cleanup(ts.Close)

		info := map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node1", "bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": hook.Secret,
			// What the machine's iPXE script boots; the simulated
			// machine starts the agent itself rather than download them.
			"deploy_kernel": im.URL + "ipa.kernel", "deploy_ramdisk": im.URL + "ipa.initramfs"}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "bl-agent", "driver": "bmclib", "driver_info": info})
		mustStatus(t, r, 201)
		n := r.JSON(t)
		id := n["uuid"].(string)
		if n["boot_interface"] != "pxe" || n["deploy_interface"] != "direct" {
			t.Fatalf("bmclib node interfaces: boot %v, deploy %v", n["boot_interface"], n["deploy_interface"])
		}
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}), 201)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)
		for _, iface := range []string{"boot", "power", "management"} {
			if res, _ := v[iface].(map[string]any); res["result"] != true {
				t.Errorf("validate %s: %v", iface, res)
			}
		}

		// provide: automated cleaning boots the agent from the network,
		// which wipes the disk's partition table; the machine ends off.
		run(t, "sgdisk", "-o", "-n", "1:2048:+16M", disk)
		if len(partitions(t, disk)) != 1 {
			t.Fatal("could not partition the loop disk")
		}
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		n = waitFor(t, admin, id, "available", rack)
		if p := partitions(t, disk); len(p) != 0 {
			t.Errorf("after automated cleaning the disk still has partitions %v", p)
		}
		if n["power_state"] != bmc.PowerOff || n["maintenance"] != false {
			t.Errorf("after cleaning: power %v maintenance %v", n["power_state"], n["maintenance"])
		}
		if b := m.boots(t); len(b) != 1 || b[0] != "agent" {
			t.Fatalf("cleaning: the machine booted %v, want the agent once", b)
		}
		if !rack.Stopped("1", 20*time.Second) {
			t.Error("the agent still runs after cleaning")
		}

		// active: the raw image and a config drive on the disk, the disk
		// the boot device, the machine on from its disk.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": im.URL + im.Raw,
				"image_os_hash_algo": "sha256", "image_os_hash_value": im.RawSum}}}), 200)
		provision(t, admin, id, map[string]any{"target": "active",
			"configdrive": map[string]any{"meta_data": map[string]any{"hostname": "bl-tenant"}}}, 202)
		n = waitFor(t, admin, id, "active", rack)
		const part = 2048 * 512
		if got := readAt(t, disk, part, 8<<20); !bytes.Equal(got, im.RawData[part:part+8<<20]) {
			t.Errorf("the disk does not hold the image's bytes")
		}
		if !hasConfigDrive(t, disk) {
			t.Errorf("no config-2 partition on the disk: %v", partitions(t, disk))
		}
		power, boot, _, _ := hook.State()
		if n["power_state"] != bmc.PowerOn || power != "on" || boot != "disk" {
			t.Errorf("deployed: node power %v, webhook power %s boot %s", n["power_state"], power, boot)
		}
		if b := m.boots(t); strings.Join(b, ",") != "agent,agent,disk" {
			t.Errorf("deploy: the machine booted %v, want the agent then its disk", b)
		}
		if !rack.Stopped("1", 20*time.Second) {
			t.Error("the agent still runs on the deployed machine")
		}

		// deleted: the tear down's cleaning wipes the disk again.
		provision(t, admin, id, map[string]any{"target": "deleted"}, 202)
		n = waitFor(t, admin, id, "available", rack)
		if p := partitions(t, disk); len(p) != 0 {
			t.Errorf("after deleted the disk still has partitions %v", p)
		}
		if n["power_state"] != bmc.PowerOff {
			t.Errorf("after deleted: power %v", n["power_state"])
		}
		if !rack.Stopped("1", 20*time.Second) {
			t.Error("the agent still runs after undeploy's cleaning")
		}
		if _, _, bad, _ := hook.State(); bad != 0 {
			t.Errorf("the webhook refused %d signatures", bad)
		}
	})
}

// TestBmclibAgentBootRefused: a bmclib provider that cannot set the boot
// device (homeassistant) cannot network-boot the agent, so validate's
// boot verdict says so, its step list has no agent step, and a deploy is
// refused naming driver_info/bmclib_provider before anything is done; an
// rpc node with the same deploy settings validates and lists the agent's
// steps.
func TestBmclibAgentBootRefused(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		deploy := map[string]any{"deploy_kernel": "http://192.0.2.1/ipa.kernel", "deploy_ramdisk": "http://192.0.2.1/ipa.initramfs"}
		node := func(name string, info map[string]any) string {
			t.Helper()
			for k, v := range deploy {
				info[k] = v
			}
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "bmclib", "driver_info": info,
				"instance_info": map[string]any{"image_source": "http://192.0.2.1/img.raw", "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32)}})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		ha := node("bl-ha", map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_homeassistant_switch": "switch.node1", "bmclib_password": "token"})
		rpc := node("bl-rpc", map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.1:9/bmc", "bmclib_rpc_secret": "s"})

		boot := func(id string) map[string]any {
			return admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)["boot"].(map[string]any)
		}
		if b := boot(ha); b["result"] != false || !strings.Contains(fmt.Sprint(b["reason"]), "bmclib provider homeassistant cannot set the boot device") {
			t.Errorf("homeassistant validate boot: %v", b)
		}
		if b := boot(rpc); b["result"] != true {
			t.Errorf("rpc validate boot: %v", b)
		}
		steps := func(id string) string {
			r := admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil)
			mustStatus(t, r, 200)
			return string(r.Body)
		}
		if s := steps(ha); strings.Contains(s, `"erase_devices_metadata"`) || strings.Contains(s, `"write_image"`) {
			t.Errorf("homeassistant step list offers the agent's steps: %s", s)
		}
		if s := steps(rpc); !strings.Contains(s, `"erase_devices_metadata"`) || !strings.Contains(s, `"write_image"`) {
			t.Errorf("rpc step list lacks the agent's steps: %s", s)
		}
		r := provision(t, admin, ha, map[string]any{"target": "active"}, 400)
		mustFaultNaming(t, "deploy homeassistant", r, "bmclib provider homeassistant cannot set the boot device")
		if n := admin.Do(t, "GET", "/v1/nodes/"+ha, nil).JSON(t); n["provision_state"] != "enroll" || n["last_error"] != nil {
			t.Errorf("a refused deploy changed the node: %v %v", n["provision_state"], n["last_error"])
		}
	})
}
